"""Project settings. Kept small: configuration lives in ``conf/``, behaviour in hooks."""

import warnings

from hed.config.loader import HEDConfigLoader
from hed.errors import install_short_tracebacks
from hed.hooks import ProjectHooks, ProvenanceHooks, ShardPartsHooks
from hed.records.atomic_io import install_atomic_local_writes
from hed.records.object_store import install_atomic_object_writes

# Every local file a dataset writes appears only when complete (temporary file + rename),
# in the `kedro` process and in the runner's subprocesses, which import these settings too.
install_atomic_local_writes()
# Object stores (s3://, gs://): a write that raises half-way uploads nothing.
install_atomic_object_writes()
# `kedro run` shows HED's one-line errors without Python's traceback (HED_TRACEBACK=1 for it).
install_short_tracebacks()

# HED's namespaces (`<run>`, `<run>.step_<step>`) name datasets and nodes (docs/datasets.md); they
# are not kedro-viz groups. That the all-steps nodes sit between one run's nodes ("namespace
# ... is interrupted") and that dataset names hold dots is the design: no warning on every run.
warnings.filterwarnings("ignore", message=r"Namespace '.*' is interrupted by nodes")
warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
# Kedro 1.7's own config loader calls OmegaConf's deprecated register_new_resolver: not ours
warnings.filterwarnings("ignore", message=r"register_new_resolver\(\) is deprecated")
# The per-(run, step, shard) nodes are functools.partial objects with their function's name
# (update_wrapper); Kedro warns about partials again in every GPURunner child that unpickles one
warnings.filterwarnings("ignore", message=r"The node producing outputs .* 'partial' function")

HOOKS = (ProjectHooks(), ProvenanceHooks(), ShardPartsHooks())

# parameters merge key by key: an environment or --params changes only the keys it names
CONFIG_LOADER_CLASS = HEDConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
