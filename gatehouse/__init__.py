"""Gatehouse: agentic RAG as Haystack pipelines in YAML; its components, stores, command line, serving and evaluation."""
