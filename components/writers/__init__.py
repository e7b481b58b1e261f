"""Ingestion: the ingest planner and the writer to both stores."""
