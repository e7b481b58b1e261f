"""Builders: the labelled passages a generator sees, and the response contract."""
