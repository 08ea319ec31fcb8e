"""Generation: sample responses per (run, step, shard) and record every token's entropy."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
