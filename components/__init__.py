"""Gatehouse's Haystack components: the gates, stores and stages that `pipelines/*.yml` wire together."""
