"""Analyses of merged records: step merge, word mass, covariance, correctness, overlap, rescoring
tables."""
