"""
Helpers for the optional LLM tier of Gatehouse's gates (plain Python, not a component): serialising a component
with a chat generator the way Haystack's Agent does, and asking the generator one question (or for one query).
"""

import inspect
import re
from copy import deepcopy
from typing import Any

from haystack import default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.dataclasses import ChatMessage
from haystack.utils import deserialize_component_inplace


def chat_generator_to_dict(chat_generator: Any) -> dict[str, Any] | None:
    """
    Serialise an optional chat generator.

    :param chat_generator: A Haystack chat generator component, or None.
    :returns: Its dictionary, or None.
    """
    return component_to_dict(obj=chat_generator, name="chat_generator") if chat_generator is not None else None


def chat_generator_from_init_parameters(data: dict[str, Any]) -> dict[str, Any]:
    """
    A copy of a component dictionary with `init_parameters.chat_generator` deserialised when one is set.

    :param data: A component dictionary as produced by `to_dict()`; it is not modified.
    :returns: The dictionary to pass to `default_from_dict`.
    """
    data = {**data, "init_parameters": dict(data.get("init_parameters") or {})}
    if data["init_parameters"].get("chat_generator") is not None:
        deserialize_component_inplace(data["init_parameters"], key="chat_generator")
    return data


class ChatGeneratorSerialization:
    """
    Haystack's default serialisation (every `__init__` parameter, read from the attribute of the same name) for a
    component with a `chat_generator` parameter, which is serialised as a component, as Haystack's Agent does.
    """

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component (its chat generator too)."""
        names = [name for name in inspect.signature(type(self).__init__).parameters if name != "self"]
        parameters = {name: getattr(self, name) for name in names}
        parameters["chat_generator"] = chat_generator_to_dict(parameters["chat_generator"])
        return default_to_dict(self, **parameters)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Deserialise the component (its chat generator too; `data` is left as it was)."""
        return default_from_dict(cls, chat_generator_from_init_parameters(deepcopy(data)))


def with_deadline(chat_generator: Any, deadline: float | None) -> dict[str, Any]:
    """
    The keyword arguments that give a chat generator's call the request's deadline: `deadline` for a generator whose
    `run` takes one (`OpenAICompatibleChatGenerator`: its tries fit in what is left); none for others or no deadline.

    :param chat_generator: A Haystack chat generator component.
    :param deadline: `time.monotonic()` by which the request must be answered, or None.
    """
    if deadline is None or "deadline" not in inspect.signature(chat_generator.run).parameters:
        return {}
    return {"deadline": deadline}


def ask_chat_generator(
    chat_generator: Any,
    prompt: str,
    *,
    system_prompt: str | None = None,
    history: list[dict[str, Any]] | None = None,
    deadline: float | None = None,
) -> str:
    """
    Send one prompt to a Haystack chat generator and return the text of its first reply.

    :param chat_generator: Any Haystack chat generator component.
    :param prompt: The user message.
    :param system_prompt: An optional system message.
    :param history: Optional earlier turns (`{"role": "user"|"assistant", "content": ...}`) put before the prompt.
    :param deadline: `time.monotonic()` by which the request must be answered (see `with_deadline`), or None.
    :returns: The reply text, stripped.
    :raises RuntimeError: If the generator returns no text reply (callers catch it and fall back).
    :raises TimeoutError: If the deadline has passed (callers catch it and fall back).
    """
    messages: list[ChatMessage] = []
    if system_prompt:
        messages.append(ChatMessage.from_system(system_prompt))
    for turn in history or []:
        content = str(turn.get("content") or "")
        if not content:
            continue
        if turn.get("role") == "assistant":
            messages.append(ChatMessage.from_assistant(content))
        elif turn.get("role") == "user":
            messages.append(ChatMessage.from_user(content))
    messages.append(ChatMessage.from_user(prompt))
    result = chat_generator.run(messages=messages, **with_deadline(chat_generator, deadline))
    replies = (result or {}).get("replies") or []
    text = (replies[0].text or "").strip() if replies and isinstance(replies[0], ChatMessage) else ""
    if not text:
        raise RuntimeError("the chat generator returned no text reply")
    return text


_QUERY_LABEL = re.compile(r"^\s*(standalone\s+query|rewritten\s+query|query|search\s+query)\s*:\s*", re.IGNORECASE)


def ask_for_query(chat_generator: Any, prompt: str, *, max_chars: int, deadline: float | None = None) -> str:
    """
    Ask a Haystack chat generator for a search query: the first non-empty line of its reply, without a `Query:`
    label or quotes.

    :param chat_generator: Any Haystack chat generator component.
    :param prompt: The user message.
    :param max_chars: The longest query accepted.
    :param deadline: `time.monotonic()` by which the request must be answered, or None.
    :returns: The query.
    :raises RuntimeError: If the generator returns no text reply.
    :raises ValueError: If the reply holds no query or a longer one than `max_chars` (callers catch both and fall
        back).
    """
    lines = (_QUERY_LABEL.sub("", line).strip().strip("\"'`").strip()
             for line in ask_chat_generator(chat_generator, prompt, deadline=deadline).splitlines())
    query = next((line for line in lines if line), "")
    if not query or len(query) > max_chars:
        raise ValueError("empty or overlong reply")
    return query
