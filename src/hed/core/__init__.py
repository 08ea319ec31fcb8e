"""Numeric and text definitions: entropy, thresholds, advantages, token text, words, lexicon,
grading.

The bottom layer: imports nothing from HED but :mod:`hed.errors`.
"""
