"""Input and output guardrails: prompt-injection checks, PII redaction (regex or Presidio), HTML sanitising."""
