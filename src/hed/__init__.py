"""HED — High-Entropy Diagnostics for RL-trained LLM checkpoints (a Kedro project)."""

__version__ = "0.1.0"
