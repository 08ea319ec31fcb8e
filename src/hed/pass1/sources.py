"""pass@1 per training step from its four sources (docs/metrics.md): every public name, in one
place for notebooks and old imports (``from hed.pass1.sources import read_wandb_history``).

Each source has its own module; this one only re-exports them:

* ``wandb`` — :mod:`hed.pass1.wandb_online` (the W&B public API, ``scan_history``);
* ``wandb_offline`` — :mod:`hed.pass1.wandb_offline` (a local ``offline-run-*`` folder);
* ``csv`` — :mod:`hed.pass1.csv_file`;
* ``generated`` — :mod:`hed.pass1.generated` (``pass1_generated`` of ``summary_by_step``);

with the rules both W&B sources share in :mod:`hed.pass1.history`, the key and server in
:mod:`hed.pass1.credentials`, a run's configuration in :mod:`hed.pass1.config` and the pass@1
rows and the figures' choice in :mod:`hed.pass1.selection`. To patch a function in a test,
patch it in its own module.
"""

from hed.pass1.config import (
    EXPORT_DIR,
    SOURCES,
    WANDB_SOURCES,
    RunPass1Config,
    SourceSpec,
    parse_run_config,
)
from hed.pass1.credentials import (
    check_reachable,
    export_wandb_api_key,
    resolve_wandb_api_key,
    wandb_base_url,
)
from hed.pass1.csv_file import read_pass1_csv
from hed.pass1.generated import GENERATED_COLUMN, GENERATED_METRIC, pass1_from_summary
from hed.pass1.history import (
    DEFAULT_METRIC_KEY,
    DEFAULT_STEP_KEY,
    HISTORY_COLUMNS,
    SCALES,
    WANDB_STEP,
    check_pass1_range,
    history_from_rows,
)
from hed.pass1.selection import (
    FIGURE_COLUMNS,
    PASS1_COLUMNS,
    missing_steps,
    select_pass1,
    to_pass1_rows,
    warn_missing_steps,
)
from hed.pass1.wandb_offline import (
    find_offline_run_file,
    iter_offline_history_rows,
    read_wandb_offline_history,
)
from hed.pass1.wandb_online import (
    WandbRunRef,
    default_api_factory,
    parse_run_path,
    read_wandb_history,
    resolve_run,
    wandb_run_ref,
)

__all__ = [
    "DEFAULT_METRIC_KEY",
    "DEFAULT_STEP_KEY",
    "EXPORT_DIR",
    "FIGURE_COLUMNS",
    "GENERATED_COLUMN",
    "GENERATED_METRIC",
    "HISTORY_COLUMNS",
    "PASS1_COLUMNS",
    "SCALES",
    "SOURCES",
    "WANDB_SOURCES",
    "WANDB_STEP",
    "RunPass1Config",
    "SourceSpec",
    "WandbRunRef",
    "check_pass1_range",
    "check_reachable",
    "default_api_factory",
    "export_wandb_api_key",
    "find_offline_run_file",
    "history_from_rows",
    "iter_offline_history_rows",
    "missing_steps",
    "parse_run_config",
    "parse_run_path",
    "pass1_from_summary",
    "read_pass1_csv",
    "read_wandb_history",
    "read_wandb_offline_history",
    "resolve_run",
    "resolve_wandb_api_key",
    "select_pass1",
    "to_pass1_rows",
    "wandb_base_url",
    "wandb_run_ref",
    "warn_missing_steps",
]
