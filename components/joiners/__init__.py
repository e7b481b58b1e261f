"""Gatehouse joiners."""
