"""Gatehouse preprocessors."""
