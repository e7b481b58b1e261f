"""Gatehouse: the command line and the helpers that load and run the YAML pipelines."""
