"""Query handling: the condenser of follow-up questions, the quality loop's retry rewriter and the planner."""
