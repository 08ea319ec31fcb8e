"""Rescoring pipeline: one response set scored teacher-forced by every checkpoint of a run."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
