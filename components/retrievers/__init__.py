"""Retrieval: BM25 and dense retrievers, the tenant filter, and retrieve.yml as one SuperComponent."""
