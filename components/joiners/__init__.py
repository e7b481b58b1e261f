"""Fusion of several retrievers' result lists."""
