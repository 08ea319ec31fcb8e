"""pass@1 per step from W&B (online, offline), a CSV, or HED's own graded responses."""
