"""An input table (a versioned CSV such as ``summary_by_step.csv``) that is empty or cut short,
refused before the first node with its file and the command that rewrites it.

pandas reads a 0-byte file as ``EmptyDataError`` (Kedro's 90-line traceback) and a file cut in
its header as a table without rows, which the reporting nodes took for missing data.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hed.errors import InputDataError
from hed.io.provenance import describe_dataset

#: Dataset types checked: pandas' CSV tables (kedro-datasets ``pandas.CSVDataset``).
TABLE_TYPES = ("CSVDataset",)


def table_problem(path: str) -> str | None:
    """What is wrong with the CSV file at ``path``, or None.

    pandas writes every line of a table, the last included, with ``\\n``; a file that does not
    end with one was cut short (a copy or write interrupted, a disk that filled up).

    Returns:
        ``"it is empty (0 bytes)"``, ``"it ends in the middle of a line (cut short)"`` or None.
    """
    size = os.path.getsize(path)
    if size == 0:
        return "it is empty (0 bytes)"
    with open(path, "rb") as handle:
        handle.seek(size - 1)
        if handle.read(1) != b"\n":
            return "it ends in the middle of a line (cut short)"
    return None


def check_input_tables(pipeline: Any, catalog: Any, rewrite: Callable[[str], str]) -> None:
    """Refuse a run that would read an empty or cut-short CSV table.

    Only the pipeline's free inputs (those no node of it writes) that HED wrote (versioned
    datasets) on the local file system are checked, each at the version the run would load
    (pinned or the latest).

    Args:
        pipeline: the run's Kedro pipeline.
        catalog: the run's catalog.
        rewrite: dataset name -> the ``kedro run`` command that writes it again.

    Raises:
        InputDataError: ``<dataset>: <file>: <problem>; rewrite it with `<command>```.
    """
    for name in sorted(pipeline.inputs()):
        if name == "parameters" or name.startswith("params:"):
            continue
        info = describe_dataset(catalog, name, "load")
        path = info.get("path")
        if not str(info.get("type")).endswith(TABLE_TYPES) or not path:
            continue
        if info.get("version") is None:
            continue  # a file users write or edit (a pass@1 CSV may lack its last newline)
        if not os.path.isfile(path):
            continue  # not written yet (another check says so) or on an object store
        problem = table_problem(path)
        if problem:
            shown = os.path.relpath(path) if os.path.isabs(path) else path
            raise InputDataError(f"{name}: {shown}: {problem}; rewrite it with `{rewrite(name)}`")
