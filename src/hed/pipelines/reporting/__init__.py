"""Reporting: Figure 2 and Figure 3 of the QAE analysis (tables, PNGs) and resolved_config."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
