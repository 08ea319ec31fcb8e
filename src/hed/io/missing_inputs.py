"""Refuse a run whose inputs were never written, before its first node.

``kedro run --pipelines reporting`` on a fresh clone reads ``checkpoints``, ``prompts``, the
merged token records ... that only earlier pipelines write; Kedro would start the run and end
at the first load in a ``Did not find any versions for ...`` traceback. :func:`check_inputs_exist`
asks each free input of the pipeline about to run (``pipeline.inputs()``: what it reads but
does not write) whether it exists, with the dataset's own ``exists()`` (Kedro's
``catalog.exists``; for a versioned dataset: a version to load exists), and refuses in one line
naming the missing datasets, their files, and the ``kedro run`` that writes them first: the
pipelines that write them, and those that write *their* missing inputs, in chain order,
followed by the pipelines asked for (:func:`hed.core.command_line.update_command`: the run's
``--env``, ``--params``, ``--runner`` kept).

Not checked: parameters, datasets kept in memory (``MemoryDataset``, ``run_context``), names
the catalog does not resolve (Kedro reports those), and inputs no pipeline writes (the prompt
file, checkpoints folders, response pairs: their datasets' ``load()`` names the file and the
fix). A dataset whose ``exists()`` itself fails (an object store that cannot be reached) is
left to its load.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePath
from typing import Any

from kedro.io.core import VersionNotFoundError

from hed.config import session
from hed.core.command_line import update_command
from hed.errors import InputDataError

#: Pipelines in the order a whole run executes them: a command names producers in this order.
CHAIN = (
    "mini_rl",
    "generation",
    "aggregation",
    "dynamics",
    "metrics",
    "reporting",
    "rescoring",
    "analyses",
    "publish",
)
#: Missing datasets a message names before ``and <n> more``.
SHOWN = 3
#: Inputs a hook registers in the catalog during ``before_pipeline_run`` (in memory).
_IN_MEMORY = ("run_context",)


class MissingInputError(InputDataError):
    """A dataset the run reads was never written (no file, or no version of it)."""


def _dataset(catalog: Any, name: str) -> Any:
    try:
        return catalog.get(name)
    except Exception:  # a pattern that does not resolve: Kedro reports it at the run
        return None


def is_missing(catalog: Any, name: str) -> bool:
    """True when ``name`` is a persisted dataset of ``catalog`` whose ``exists()`` is False.

    Args:
        catalog: the run's Kedro ``DataCatalog``.
        name: a node input (a dataset name, ``params:<key>`` or ``parameters``).

    Returns:
        False for parameters, in-memory datasets, unresolved names and datasets whose
        ``exists()`` raises; for a versioned dataset, whether no file of the version to load
        is there (:func:`_version_present`); else ``not dataset.exists()``.
    """
    if name == "parameters" or name.startswith("params:") or name in _IN_MEMORY:
        return False
    dataset = _dataset(catalog, name)
    if dataset is None or getattr(dataset, "_EPHEMERAL", False):
        return False
    if type(dataset).__name__ in ("MemoryDataset", "SharedMemoryDataset"):
        return False
    try:
        if getattr(dataset, "_version", None) is not None:
            return not _version_present(dataset)
        return not dataset.exists()
    except Exception:  # e.g. an object store without network: its load will say why
        return False


def _version_present(dataset: Any) -> bool:
    """Whether a versioned dataset has a file for the version it would load.

    Not its ``exists()``: HED's Parquet datasets count a truncated file as missing (so that
    ``--only-missing-outputs`` writes it again), but a run that reads it is better told by the
    load, which names the file and says to delete it.
    """
    try:
        path = dataset._get_load_path()
    except VersionNotFoundError:
        return False
    exists = getattr(dataset, "_exists_function", None)
    return bool(exists(str(path))) if callable(exists) else True


def check_pinned_versions(catalog: Any, names: Iterable[str]) -> None:
    """Refuse a ``--load-versions`` pin of one of ``names`` (missing inputs) to a version
    that was never written, listing the versions that were.

    Raises:
        MissingInputError: one line: the pin, the dataset's folder, its newest versions (up
            to :data:`SHOWN`, newest first) and the fix: pin one of them or drop the pin.
    """
    for name in names:
        dataset = _dataset(catalog, name)
        pinned = getattr(getattr(dataset, "_version", None), "load", None)
        if not pinned:
            continue
        try:
            versions = [PurePath(path).parent.name for path in dataset._get_versions()]
        except VersionNotFoundError:
            versions = []
        listed = ", ".join(versions[:SHOWN]) + (" ..." if len(versions) > SHOWN else "")
        have = f"its versions, newest first: {listed}" if versions else "it has no version yet"
        raise MissingInputError(
            f"--load-versions {name}:{pinned}: {name} has no such version "
            f"({dataset_location(catalog, name)}); {have}; pin one of them, or drop the pin "
            "to load the newest"
        )


def dataset_location(catalog: Any, name: str) -> str:
    """Where ``name``'s file is (relative to the working folder when under it), or ``?``."""
    dataset = _dataset(catalog, name)
    path = getattr(dataset, "_filepath", None)
    if path is None:
        return "?"
    path = str(path)
    protocol = getattr(dataset, "_protocol", None)
    if protocol not in (None, "file", "local") and "://" not in path:
        return f"{protocol}://{path}"
    if os.path.isabs(path):
        relative = os.path.relpath(path)
        return path if relative.startswith("..") else relative
    return path


def producers_of(missing: Iterable[str], pipelines: Mapping[str, Any], catalog: Any) -> list[str]:
    """The pipelines that write ``missing``, and those that write their missing inputs.

    Args:
        missing: dataset names that do not exist.
        pipelines: the project's pipelines by name (``__default__`` is ignored).
        catalog: the run's catalog (to ask whether a producer's own inputs exist).

    Returns:
        Pipeline names in :data:`CHAIN` order (others after, by name); a dataset written by
        several pipelines counts for the first in that order. Empty when no pipeline writes
        any of ``missing``.
    """
    order = {name: i for i, name in enumerate(CHAIN)}
    names = sorted(
        (n for n in pipelines if n != "__default__"), key=lambda n: (order.get(n, len(CHAIN)), n)
    )
    chosen: list[str] = []
    todo, seen = list(missing), set()
    while todo:
        dataset = todo.pop()
        if dataset in seen:
            continue
        seen.add(dataset)
        writer = next((n for n in names if dataset in pipelines[n].all_outputs()), None)
        if writer is None or writer in chosen:
            continue
        chosen.append(writer)
        todo += [name for name in pipelines[writer].inputs() if is_missing(catalog, name)]
    return sorted(chosen, key=names.index)


#: Sections whose keys enter the records through the shards: a change means new shards.
_GENERATED_FROM = ("generation.", "prompts.")
#: Pipelines a fix command never adds on its own: training, and publishing results elsewhere.
_NEVER_ADDED = ("mini_rl", "publish")


def pipelines_to_update(
    dataset: str,
    changed: Iterable[str],
    built: Mapping[str, Any],
    parameters: Mapping[str, Any],
    resample: bool = True,
) -> list[str]:
    """The pipelines that bring ``dataset`` up to date, and everything computed from it.

    The pipelines that write ``dataset``; ``generation`` too when a changed key is a
    generation or prompts parameter (the shards must be sampled again); then, repeatedly,
    every pipeline that reads what those write (so that no table downstream, read by no later
    run, is left stale), except :data:`_NEVER_ADDED` and ``rescoring`` unless
    ``rescoring.in_default``.

    Args:
        dataset: the stale dataset.
        changed: the keys of its record that differ from the current parameters.
        built: the project's pipelines by name (:func:`project_pipelines`).
        parameters: the run's parameters.
        resample: False when the shards are known to be current (the merged records were
            aggregated from shards of the current generation parameters): no ``generation``.

    Returns:
        Pipeline names in :data:`CHAIN` order.
    """
    names = _eligible(built, parameters)
    chosen = {n for n in names if dataset in built[n].all_outputs()}
    if resample and "generation" in built and any(k.startswith(_GENERATED_FROM) for k in changed):
        chosen.add("generation")
    return with_downstream(chosen, built, parameters)


def _eligible(built: Mapping[str, Any], parameters: Mapping[str, Any]) -> list[str]:
    """Pipelines a fix command may add, in :data:`CHAIN` order."""
    rescoring = parameters.get("rescoring")
    skip = {*_NEVER_ADDED, *(() if _in_default(rescoring) else ("rescoring",))}
    return [n for n in CHAIN if n in built and n not in skip]


def with_downstream(
    pipelines: Iterable[str], built: Mapping[str, Any], parameters: Mapping[str, Any]
) -> list[str]:
    """``pipelines`` and, repeatedly, every pipeline that reads what they write (not
    :data:`_NEVER_ADDED`; ``rescoring`` only with ``rescoring.in_default``), in :data:`CHAIN`
    order: what a command that rewrites ``pipelines``' outputs must also run so that no table
    is left computed from the old ones."""
    names = _eligible(built, parameters)
    chosen = set(pipelines)
    grown = True
    while grown:
        written = outputs_of(built, chosen)
        more = {n for n in names if n not in chosen and built[n].inputs() & written}
        chosen |= more
        grown = bool(more)
    return [n for n in CHAIN if n in chosen] + sorted(n for n in chosen if n not in CHAIN)


def outputs_of(built: Mapping[str, Any], pipelines: Iterable[str]) -> set[str]:
    """Every dataset ``pipelines`` write (a fix command drops their ``--load-versions`` pins)."""
    return set().union(set(), *(built[n].all_outputs() for n in pipelines))


def _in_default(section: Any) -> bool:
    return isinstance(section, Mapping) and bool(section.get("in_default"))


def project_pipelines(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every pipeline of the project, built now (Kedro's ``find_pipelines``).

    The session's registry holds only the pipelines asked for (``--pipelines reporting``);
    Kedro 1.7's ``find_pipelines`` also builds only those while they are set, so they are
    unset for the call. Called only to word a refusal.

    Args:
        params: the run's parameters: the pipelines are built from them
            (:func:`hed.config.session.session_config`; the session's configuration is no longer
            active once its pipeline is built). None: the active configuration.
    """
    from kedro.framework.project import find_pipelines, pipelines

    requested = getattr(pipelines, "_requested_pipelines", None)
    pipelines._requested_pipelines = None
    scope = session.session_config(params) if params is not None else contextlib.nullcontext()
    try:
        with scope:
            return find_pipelines(raise_errors=False)
    finally:
        pipelines._requested_pipelines = requested


def _run_parameters(catalog: Any) -> Mapping[str, Any] | None:
    try:
        return catalog.load("parameters")
    except Exception:  # a bare catalog (a test): the active configuration
        return None


def check_inputs_exist(
    pipeline: Any,
    catalog: Any,
    run_params: Mapping[str, Any],
    all_pipelines: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Refuse to start a run when a dataset it reads (a free input) was never written.

    Args:
        pipeline: the (filtered) pipeline about to run.
        catalog: the run's catalog.
        run_params: Kedro's run parameters (``pipeline_names``: the pipelines asked for,
            ``env``: named in the command outside ``kedro run``).
        all_pipelines: the project's pipelines by name (default :func:`project_pipelines` of
            the catalog's ``parameters``).

    Raises:
        MissingInputError: one line: how many inputs are missing, the first :data:`SHOWN`
            with their files, and the ``kedro run`` command that writes them first.
    """
    missing = sorted(name for name in pipeline.inputs() if is_missing(catalog, name))
    if not missing:
        return
    check_pinned_versions(catalog, missing)
    built = all_pipelines() if all_pipelines else project_pipelines(_run_parameters(catalog))
    writers = producers_of(missing, built, catalog)
    if not writers:
        return  # inputs no pipeline writes: their own load names the file and the fix
    written = [m for m in missing if any(m in built[w].all_outputs() for w in writers)]
    shown = ", ".join(f"{m} ({dataset_location(catalog, m)})" for m in written[:SHOWN])
    more = f" and {len(written) - SHOWN} more" if len(written) > SHOWN else ""
    asked = run_params.get("pipeline_names") or []
    writers = with_downstream(writers, built, _run_parameters(catalog) or {})
    command = update_command(
        writers,
        asked,
        run_params.get("env"),
        run_params.get("runtime_params"),
        outputs_of(built, writers),
    )
    raise MissingInputError(
        f"{len(written)} input(s) of this run were never written: {shown}{more}; "
        f"write them first with `{command}`"
    )
