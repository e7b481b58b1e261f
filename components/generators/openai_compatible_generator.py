"""An OpenAI-compatible chat generator whose endpoint, model and key come from the environment."""

import os
import time
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.components.generators.chat.openai import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage, StreamingCallbackT
from haystack.tools import ToolsType
from haystack.utils import Secret, deserialize_secrets_inplace

from gatehouse.llm.server import DEFAULT_URL

#: What a local server gets as the key when none is configured (llama.cpp, vLLM and Ollama accept any key).
LOCAL_SERVER_KEY = "not-needed"


@component
class OpenAICompatibleChatGenerator(OpenAIChatGenerator):
    """
    `OpenAIChatGenerator` for any OpenAI-compatible server (llama.cpp's server, vLLM, Ollama, OpenAI).

    Unset values are read from the environment when the component is created, so one YAML serves every
    deployment: `GATEHOUSE_LLM_URL` (base URL; default `http://127.0.0.1:8080/v1`, where `gatehouse llm serve`
    listens), `GATEHOUSE_LLM_MODEL` (default `local-model`; a single-model llama.cpp server accepts any name) and the
    key in `GATEHOUSE_LLM_API_KEY` (without one, local servers get a placeholder key; the environment is never
    written). Each reply's `meta["usage"]` holds the server's `prompt_tokens` and `completion_tokens`, streamed or
    not (a streamed request asks the server for the usage chunk, `stream_options.include_usage`).

    Given a `deadline` (the request's, a `run()` input: `gatehouse serve` passes each ask's), each try waits at most
    the time left divided by the tries allowed (`1 + max_retries`), so the call and its retries end within the
    request's budget; a call made after the deadline raises `TimeoutError` at once.

    Usage:
    ```python
    from haystack.dataclasses import ChatMessage
    from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator

    generator = OpenAICompatibleChatGenerator(generation_kwargs={"temperature": 0.1, "max_tokens": 256})
    reply = generator.run(messages=[ChatMessage.from_user("Hello")])["replies"][0]
    reply.text, reply.meta["usage"]
    ```
    """

    def __init__(
        self,
        *,
        api_base_url: str | None = None,
        model: str | None = None,
        api_key: Secret = Secret.from_env_var("GATEHOUSE_LLM_API_KEY", strict=False),
        generation_kwargs: dict[str, Any] | None = None,
        timeout: float = 60.0,
        max_retries: int = 1,
    ) -> None:
        """
        :param api_base_url: Server base URL; None reads `GATEHOUSE_LLM_URL`, then `http://127.0.0.1:8080/v1`.
        :param model: Model name; None reads `GATEHOUSE_LLM_MODEL`, then `local-model`.
        :param api_key: The server's key; when it resolves to nothing, a placeholder for local servers is sent.
        :param generation_kwargs: Sampling settings passed to the server.
        :param timeout: Request timeout in seconds.
        :param max_retries: Retries of a failed request.
        """
        self.configured_api_base_url = api_base_url
        self.configured_model = model
        self.configured_api_key = api_key
        # `@component` rebuilds the class, so name the parent explicitly instead of using bare super().
        OpenAIChatGenerator.__init__(
            self,
            api_key=api_key if api_key.resolve_value() else Secret.from_token(LOCAL_SERVER_KEY),
            model=model or os.environ.get("GATEHOUSE_LLM_MODEL") or "local-model",
            api_base_url=api_base_url or os.environ.get("GATEHOUSE_LLM_URL") or DEFAULT_URL,
            generation_kwargs=generation_kwargs,
            timeout=timeout,
            max_retries=max_retries,
        )

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage] | str,
        streaming_callback: StreamingCallbackT | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        *,
        tools: ToolsType | None = None,
        tools_strict: bool | None = None,
        deadline: float | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """
        Generate replies; with a `streaming_callback` the server streams and each text chunk reaches the callback.

        :param messages: The chat messages.
        :param streaming_callback: Called with each `StreamingChunk` as the server sends it.
        :param generation_kwargs: Sampling settings for this call, over the configured ones.
        :param tools: Tools the model may call, as `OpenAIChatGenerator.run` takes them.
        :param tools_strict: Strict tool schemas, as `OpenAIChatGenerator.run` takes them.
        :param deadline: `time.monotonic()` by which the request must be answered; None: only `timeout` applies.
        :returns: `replies`, each with `meta["usage"]`.
        """
        return OpenAIChatGenerator.run(self, messages, streaming_callback=streaming_callback, tools=tools,
                                       generation_kwargs=self._call_kwargs(streaming_callback, generation_kwargs,
                                                                           deadline), tools_strict=tools_strict)

    @component.output_types(replies=list[ChatMessage])
    async def run_async(
        self,
        messages: list[ChatMessage] | str,
        streaming_callback: StreamingCallbackT | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        *,
        tools: ToolsType | None = None,
        tools_strict: bool | None = None,
        deadline: float | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """The asynchronous `run`, with the same parameters."""
        return await OpenAIChatGenerator.run_async(
            self, messages, streaming_callback=streaming_callback, tools=tools, tools_strict=tools_strict,
            generation_kwargs=self._call_kwargs(streaming_callback, generation_kwargs, deadline))

    def _call_kwargs(self, streaming_callback: StreamingCallbackT | None, generation_kwargs: dict[str, Any] | None,
                     deadline: float | None) -> dict[str, Any] | None:
        """The call's generation settings: the usage chunk when streaming, a timeout that fits the deadline."""
        if streaming_callback is not None or self.streaming_callback is not None:
            generation_kwargs = {"stream_options": {"include_usage": True}, **(generation_kwargs or {})}
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request's time budget was spent before the language model was called")
            # the OpenAI client takes a per-request `timeout`; each of the 1 + max_retries tries gets its share
            generation_kwargs = {**(generation_kwargs or {}),
                                 "timeout": min(self.timeout, left / (1 + self.max_retries))}
        return generation_kwargs

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component as configured (not as resolved from the environment)."""
        return default_to_dict(
            self,
            api_base_url=self.configured_api_base_url,
            model=self.configured_model,
            api_key=self.configured_api_key.to_dict(),
            generation_kwargs=self.generation_kwargs,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OpenAICompatibleChatGenerator":
        """Deserialise the component."""
        deserialize_secrets_inplace(data["init_parameters"], keys=["api_key"])
        return default_from_dict(cls, data)
