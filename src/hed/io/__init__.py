"""Catalog datasets, publishing, provenance and the run lock."""
