"""Gatehouse rankers."""
