"""Aggregation pipeline: merged step records, exact top-ρ thresholds, words, categories, tables."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
