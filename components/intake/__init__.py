"""Request intake: the first gate, which checks the request and starts the state every other gate reads."""
