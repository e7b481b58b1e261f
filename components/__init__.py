"""`gatehouse.components`: the Haystack components `pipelines/*.yml` wire together, one per file, grouped by family."""
