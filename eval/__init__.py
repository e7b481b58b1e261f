"""Gatehouse evaluation: evaluation sets, metrics, the LLM judge, reports and the regression verdict."""
