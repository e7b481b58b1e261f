"""Gatehouse retrievers."""
