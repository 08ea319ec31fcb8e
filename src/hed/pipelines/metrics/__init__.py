"""Metrics pipeline: pass@1 per (run, step) from W&B, a CSV or HED's own generations."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
