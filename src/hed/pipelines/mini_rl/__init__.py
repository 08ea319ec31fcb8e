"""mini_rl pipeline: a miniature DAPO experiment on CPU (task sets → trained runs, in turn)."""

from .pipeline import TRAINING_MANIFEST, create_pipeline, training_inputs

__all__ = ["TRAINING_MANIFEST", "create_pipeline", "training_inputs"]
