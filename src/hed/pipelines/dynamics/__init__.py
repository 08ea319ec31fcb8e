"""Dynamics: Cov(log π, A) and entropy of correct vs incorrect responses, per (run, step)."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
