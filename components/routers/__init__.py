"""Gates that route the state: request intake, intent gate, KB router, quality gate, answer cache."""
