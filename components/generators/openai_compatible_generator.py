"""An OpenAI-compatible chat generator whose endpoint and model come from the environment."""

import os
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.components.generators.chat.openai import OpenAIChatGenerator
from haystack.utils import Secret


@component
class OpenAICompatibleChatGenerator(OpenAIChatGenerator):
    """
    `OpenAIChatGenerator` for any OpenAI-compatible server (vLLM, Ollama, llama.cpp's server, OpenAI).

    Unset values are read from the environment when the component is created, so one YAML serves every
    deployment: `GATEHOUSE_LLM_URL` (base URL, e.g. `http://127.0.0.1:8080/v1`), `GATEHOUSE_LLM_MODEL` and
    `GATEHOUSE_LLM_API_KEY` (local servers accept any key; a placeholder is used when it is unset).

    Usage:
    ```python
    from haystack.dataclasses import ChatMessage
    from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator

    generator = OpenAICompatibleChatGenerator(generation_kwargs={"temperature": 0.1, "max_tokens": 256})
    reply = generator.run(messages=[ChatMessage.from_user("Hello")])["replies"][0].text
    ```
    """

    def __init__(
        self,
        *,
        api_base_url: str | None = None,
        model: str | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        timeout: float = 60.0,
        max_retries: int = 1,
    ) -> None:
        """
        :param api_base_url: Server base URL; None reads `GATEHOUSE_LLM_URL`.
        :param model: Model name; None reads `GATEHOUSE_LLM_MODEL` (default `local-model`).
        :param generation_kwargs: Sampling settings passed to the server.
        :param timeout: Request timeout in seconds.
        :param max_retries: Retries of a failed request.
        :raises ValueError: If no base URL is configured.
        """
        self.configured_api_base_url = api_base_url
        self.configured_model = model
        base_url = api_base_url or os.environ.get("GATEHOUSE_LLM_URL")
        if not base_url:
            raise ValueError("No LLM endpoint: set GATEHOUSE_LLM_URL or api_base_url to an OpenAI-compatible server.")
        if not os.environ.get("GATEHOUSE_LLM_API_KEY"):
            os.environ["GATEHOUSE_LLM_API_KEY"] = "not-needed"
        # `@component` rebuilds the class, so name the parent explicitly instead of using bare super().
        OpenAIChatGenerator.__init__(
            self,
            api_key=Secret.from_env_var("GATEHOUSE_LLM_API_KEY"),
            model=model or os.environ.get("GATEHOUSE_LLM_MODEL") or "local-model",
            api_base_url=base_url,
            generation_kwargs=generation_kwargs,
            timeout=timeout,
            max_retries=max_retries,
        )

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component as configured (not as resolved from the environment)."""
        return default_to_dict(
            self,
            api_base_url=self.configured_api_base_url,
            model=self.configured_model,
            generation_kwargs=self.generation_kwargs,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OpenAICompatibleChatGenerator":
        """Deserialise the component."""
        return default_from_dict(cls, data)
