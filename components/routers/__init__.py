"""Gates that route the state: request intake, intent gate, context selector, KB router, quality and answerability gates."""
