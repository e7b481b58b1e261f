"""The quality gate: judges the retrieved context and loops back with a rewritten query when it is weak."""
