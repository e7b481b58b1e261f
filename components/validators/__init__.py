"""The citation verifier."""
