"""Project settings. Kept small: configuration lives in ``conf/``, behaviour in hooks."""

import warnings

from kedro.config import OmegaConfigLoader

from hed.atomic_io import install_atomic_local_writes
from hed.hooks import ProjectHooks
from hed.provenance import ProvenanceHooks

# Every local file a dataset writes appears only when complete (temporary file + rename),
# in the `kedro` process and in the runner's subprocesses, which import these settings too.
install_atomic_local_writes()

# HED's namespaces (`<run>`, `<run>.step_<step>`) name datasets and nodes (DESIGN.md §4); they
# are not kedro-viz groups. That the all-steps nodes sit between one run's nodes ("namespace
# ... is interrupted") and that dataset names hold dots is the design: no warning on every run.
warnings.filterwarnings("ignore", message=r"Namespace '.*' is interrupted by nodes")
warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")

HOOKS = (ProjectHooks(), ProvenanceHooks())

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
