"""Gatehouse routers."""
