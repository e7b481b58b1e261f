"""Re-scoring and ranking of candidates: best-sentence scorer, optional cross-encoder."""
