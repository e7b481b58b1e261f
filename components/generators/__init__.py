"""Gatehouse generators."""
