"""Text, document and sentence embedders over one shared embedding backend."""
