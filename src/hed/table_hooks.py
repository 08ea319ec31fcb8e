"""Before the first node: refuse an input table that is empty or cut short
(:mod:`hed.io.table_files`), naming the command that writes it again."""

from __future__ import annotations

from typing import Any

from kedro.framework.hooks import hook_impl

from hed.core.command_line import update_command
from hed.io.missing_inputs import producers_of, project_pipelines
from hed.io.table_files import check_input_tables


class TableHooks:
    """Check the tables a run reads before it starts (:func:`check_input_tables`)."""

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Refuse an empty or cut-short input table with
        ``kedro run ... --pipelines <producers>,<asked>`` (:func:`update_command`)."""

        def rewrite(dataset: str) -> str:
            built = project_pipelines(catalog.load("parameters"))
            return update_command(
                producers_of([dataset], built, catalog),
                run_params.get("pipeline_names") or [],
                run_params.get("env"),
                run_params.get("runtime_params"),
            )

        check_input_tables(pipeline, catalog, rewrite)
