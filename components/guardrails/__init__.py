"""Gatehouse guardrails."""
