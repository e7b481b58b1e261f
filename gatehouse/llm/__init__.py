"""
The local LLM option: `gatehouse llm install` puts a verified GGUF model under the data directory
(`gatehouse.llm.models`), `gatehouse llm serve` runs llama.cpp's OpenAI-compatible server on it through xllamacpp
(`gatehouse.llm.server`), and `gatehouse ask --generator llm` answers with it.
"""
