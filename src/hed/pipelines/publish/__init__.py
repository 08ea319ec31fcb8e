"""Publish: copy an environment's final tables, figures and resolved_config into results/."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
