"""Before the first node: refuse an input table that is empty or cut short
(:mod:`hed.io.table_files`), naming the command that writes it again."""

from __future__ import annotations

from typing import Any

from kedro.framework.hooks import hook_impl

from hed.core.command_line import update_command
from hed.io.missing_inputs import outputs_of, producers_of, project_pipelines, with_downstream
from hed.io.table_files import check_input_tables


class TableHooks:
    """Check the tables a run reads before it starts (:func:`check_input_tables`)."""

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Refuse an empty or cut-short input table with
        ``kedro run ... --pipelines <producers>,<downstream>,<asked>`` (:func:`update_command`:
        what rewrites it and everything computed from it, its pins dropped)."""

        def rewrite(dataset: str) -> str:
            parameters = catalog.load("parameters")
            built = project_pipelines(parameters)
            writers = with_downstream(producers_of([dataset], built, catalog), built, parameters)
            return update_command(
                writers,
                run_params.get("pipeline_names") or [],
                run_params.get("env"),
                run_params.get("runtime_params"),
                outputs_of(built, writers),
            )

        check_input_tables(pipeline, catalog, rewrite)
