"""Document splitting into heading-aware chunks."""
