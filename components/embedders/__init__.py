"""Gatehouse embedders."""
