"""Analyses across steps and runs: pass@k, the entropy–performance fit, runs compared."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
