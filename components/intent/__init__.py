"""The intent gate and what only it needs: its rules (routes, keywords, patterns), tiers and settings."""
