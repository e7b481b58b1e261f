"""Sub-pipelines of the ask pipeline as components."""
