"""Gatehouse query."""
