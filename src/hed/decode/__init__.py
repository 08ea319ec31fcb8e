"""Decoding: the transformers and vLLM backends, teacher-forced re-scoring, prompts, checkpoints."""
