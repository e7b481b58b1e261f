"""Answer generators: extractive (offline default), LLM-backed, direct (arithmetic, greetings)."""
