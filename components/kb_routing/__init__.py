"""Knowledge-base routing: the router, its candidate KBs, entries, tiers and settings, and the evidence check after search."""
