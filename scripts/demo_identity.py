"""Snapshot the demo chain's outputs, or compare two snapshots (restructuring check, issue 11).

    python scripts/demo_identity.py run OUT      # kedro run (all pipelines) in a project copy,
                                                 # then copy the latest version of every output
    python scripts/demo_identity.py compare A B  # byte-for-byte and value-for-value comparison

``run`` uses the ``hed`` found on ``PYTHONPATH`` (run it once with the old source, once with
the new). The copy runs the embedded SmolLM2 on 6 prompts × 2 samples × 40 tokens, 2 shards.
Compared: the merged records and responses (Parquet: row values, schema and key-value
metadata), every CSV table and figure table, the PNGs and JSON files (bytes; a run's id and
dataset versions, which are its start time, blanked out in ``resolved_config``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARAMS = {
    "prompts": {"num_prompts": 6},
    "generation": {"max_new_tokens": 40, "samples_per_prompt": 2, "num_shards": 2, "batch_size": 6},
}
KINDS = (".parquet", ".csv", ".png", ".json")


def _latest_files(data: Path) -> dict[str, Path]:
    """Output file → its newest version (versioned datasets are folders of timestamps)."""
    found: dict[str, Path] = {}
    for path in sorted(data.rglob("*")):
        if not path.is_file() or path.suffix not in KINDS or "01_raw" in path.parts:
            continue
        rel = path.relative_to(data)
        parts = rel.parts
        # <...>/<name>/<version>/<name>: keep <...>/<name>, newest version wins (sorted)
        if len(parts) >= 3 and parts[-3] == parts[-1]:
            key = str(Path(*parts[:-2]))
        else:
            key = str(rel)
        found[key] = path
    return found


def run(out: Path) -> None:
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from hed.decode.embedded import ensure_embedded_checkpoint
    from tests.conftest import MODEL_CACHE
    from tests.project_copy import copy_project, run_kedro

    smollm2 = ensure_embedded_checkpoint(MODEL_CACHE / "smollm2" / "global_step_0" / "actor_hf")
    # one fixed folder: paths recorded in the outputs (prompts' source_file, resolved_config)
    # are then the same in both snapshots
    project = Path(tempfile.gettempdir()) / "hed_demo_identity" / "project"
    shutil.rmtree(project.parent, ignore_errors=True)
    try:
        copy_project(project, smollm2)
        run_kedro(project, params=PARAMS)
        out.mkdir(parents=True, exist_ok=True)
        for key, path in _latest_files(project / "data").items():
            dest = out / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest)
            print(key)
    finally:
        shutil.rmtree(project.parent, ignore_errors=True)


def compare(a: Path, b: Path) -> int:
    import pyarrow.parquet as pq

    # a run's id and dataset versions are its start time: compared with them blanked out, in
    # file contents and in file names (a version's own record: .hed_computed_from/<ds>/<v>.json)
    stamp = re.compile(rb"\d{4}-\d\d-\d\dT\d\d\.\d\d\.\d\d\.\d{3}Z")

    def files(root: Path) -> dict[str, Path]:
        named = {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}
        return {stamp.sub(b"<run time>", n.encode()).decode(): p for n, p in named.items()}

    paths_a, paths_b = files(a), files(b)
    files_a, files_b = set(paths_a), set(paths_b)
    problems = [f"only in {a}: {n}" for n in sorted(files_a - files_b)]
    problems += [f"only in {b}: {n}" for n in sorted(files_b - files_a)]
    for name in sorted(files_a & files_b):
        pa_, pb = paths_a[name], paths_b[name]
        same_bytes = pa_.read_bytes() == pb.read_bytes()
        if name.endswith(".json") and not same_bytes:
            blanked = [stamp.sub(b"<run time>", p.read_bytes()) for p in (pa_, pb)]
            if json.loads(blanked[0]) == json.loads(blanked[1]):
                # key order follows the order the config loader found the files in
                print(f"{'values':9} {name} (equal but for run id and versions)")
                continue
        if name.endswith(".parquet"):
            ta, tb = pq.read_table(pa_), pq.read_table(pb)
            equal = ta.equals(tb, check_metadata=False)
            meta = ta.schema.metadata == tb.schema.metadata
            verdict = "bytes" if same_bytes else ("values" if equal else "DIFFERENT")
            print(f"{verdict:9} rows={ta.num_rows:6} metadata_equal={meta} {name}")
            if not equal:
                problems.append(f"values differ: {name}")
        else:
            digest = hashlib.sha256(pa_.read_bytes()).hexdigest()[:12]
            verdict = "bytes" if same_bytes else "DIFFERENT"
            print(f"{verdict:9} sha256={digest} {name}")
            if not same_bytes:
                problems.append(f"bytes differ: {name}")
    print("\n".join(problems) or "IDENTICAL: every table and record file")
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(Path(sys.argv[2]))
    else:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
