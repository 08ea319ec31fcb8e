"""Project pipelines."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Register the project's pipelines.

    The generation and aggregation pipelines have one node per (run, step[, shard]) of the
    active configuration environment (see :mod:`hed.layout`); ``__default__`` is the whole
    chain generation → aggregation → dynamics → metrics → reporting, preceded by ``mini_rl``
    (training) in environments that have one (``conf/mini_dapo``; empty elsewhere), and
    followed by ``rescoring`` where ``rescoring.in_default`` is true (``conf/mini_dapo``).

    Returns:
        A mapping from pipeline names to ``Pipeline`` objects.
    """
    pipelines = find_pipelines(raise_errors=True)
    chain = ["mini_rl", "generation", "aggregation", "dynamics", "metrics", "reporting"]
    if _rescoring_in_default():
        chain.append("rescoring")
    pipelines["__default__"] = sum(
        (pipelines[name] for name in chain if name in pipelines), Pipeline([])
    )
    return pipelines


def _rescoring_in_default() -> bool:
    """Whether the active environment's ``rescoring.in_default`` is true."""
    from hed.layout import active_params

    section = active_params().get("rescoring") or {}
    return isinstance(section, dict) and bool(section.get("in_default"))
