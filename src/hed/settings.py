"""Project settings. Kept small: configuration lives in ``conf/``, behaviour in hooks."""

import warnings

from hed.config.loader import HEDConfigLoader
from hed.core.cpus import set_passive_openmp
from hed.errors import install_short_tracebacks
from hed.hooks import (
    AtomicWritesHooks,
    InputHooks,
    LayoutHooks,
    ProjectHooks,
    ProvenanceHooks,
    ResumeHooks,
    ShardPartsHooks,
)

# Before torch loads its OpenMP runtime (none of the imports above loads torch): idle threads
# sleep instead of spinning against other processes on a shared CPU (hed.core.cpus; a value
# the user set is kept).
set_passive_openmp()

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

# AtomicWritesHooks: every local file a dataset of the run writes appears only when complete
# (temporary file + rename), and a write to an object store (s3://, gs://) that raises half-way
# uploads nothing; fsspec's `file`/`s3`/`gs` protocols are not replaced for other libraries.
# Registered first, so pluggy calls its before_pipeline_run last: after ProjectHooks' checks.
# InputHooks last: its before_pipeline_run runs first (a missing, stale or damaged input is
# refused before the run lock is taken).
HOOKS = (
    AtomicWritesHooks(),
    LayoutHooks(),  # before ProjectHooks: its after_context_created runs after that one's checks
    ProjectHooks(),
    ProvenanceHooks(),
    ShardPartsHooks(),
    ResumeHooks(),
    InputHooks(),
)

# parameters merge key by key: an environment or --params changes only the keys it names
CONFIG_LOADER_CLASS = HEDConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
