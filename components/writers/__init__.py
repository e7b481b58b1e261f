"""Gatehouse writers."""
