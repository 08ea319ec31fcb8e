"""Project settings. Kept small: configuration lives in ``conf/``, behaviour in hooks."""

from kedro.config import OmegaConfigLoader

from hed.atomic_io import install_atomic_local_writes
from hed.hooks import ProjectHooks
from hed.provenance import ProvenanceHooks

# Every local file a dataset writes appears only when complete (temporary file + rename),
# in the `kedro` process and in the runner's subprocesses, which import these settings too.
install_atomic_local_writes()

HOOKS = (ProjectHooks(), ProvenanceHooks())

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
