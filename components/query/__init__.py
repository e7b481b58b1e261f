"""Query rewriting: the quality loop's retry rewrite and the condenser of follow-up questions."""
