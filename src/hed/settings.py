"""Project settings. Kept small: configuration lives in ``conf/``, behaviour in hooks."""

from kedro.config import OmegaConfigLoader

from hed.hooks import ProjectHooks

HOOKS = (ProjectHooks(),)

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
