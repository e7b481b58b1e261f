"""Gatehouse validators."""
