"""Converters: files to documents, with bounds on what one file may cost."""
