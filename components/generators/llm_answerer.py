"""A generator stage backed by any Haystack chat generator, answering only from the numbered passages."""

import time
from typing import Any

from haystack import component, default_from_dict, default_to_dict

from gatehouse.components.chat import ask_chat_generator
from gatehouse.components.generators.extractive_answerer import ExtractiveAnswerer
from gatehouse.components.state import advance, with_validation

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions using ONLY the numbered source passages below. Cite every sentence with the marker of "
    "the passage that supports it, like [S1]. If the passages do not contain the answer, say that you could not "
    "find it in the documentation. Never use outside knowledge.\n\nSOURCES:\n{passages}"
)


@component
class LLMAnswerer:
    """
    Generates a cited answer with a chat model (OpenAI-compatible server, llama.cpp, ...), given as any Haystack
    chat generator in `chat_generator`. Only the final passages and the original question reach the model.

    When the model fails (server down, timeout), the extractive answerer answers instead and a warning says so,
    unless `fallback_to_extractive` is off, in which case the status is `error`.

    Usage:
    ```python
    from gatehouse.components.generators.llm_answerer import LLMAnswerer
    from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator

    answerer = LLMAnswerer(chat_generator=OpenAICompatibleChatGenerator())
    state = answerer.run(state=state_with_passages)["state"]
    ```
    """

    def __init__(
        self,
        *,
        chat_generator: Any,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        passage_template: str = "[{source_id}] {title}: {content}",
        fallback_to_extractive: bool = True,
    ) -> None:
        """
        :param chat_generator: A Haystack chat generator component.
        :param system_prompt: System message; `{passages}` is replaced by the numbered passages.
        :param passage_template: How each passage is written; `{source_id}`, `{title}`, `{content}`.
        :param fallback_to_extractive: Answer extractively when the model fails.
        """
        self.chat_generator = chat_generator
        self.system_prompt = system_prompt
        self.passage_template = passage_template
        self.fallback_to_extractive = fallback_to_extractive
        self._extractive = ExtractiveAnswerer() if fallback_to_extractive else None

    def warm_up(self) -> None:
        """Warm up the chat generator when it has a warm-up step."""
        if hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def _system_prompt(self, state: dict[str, Any]) -> str:
        passages = "\n\n".join(
            self.passage_template.replace("{source_id}", str(doc.meta.get("source_id", "")))
            .replace("{title}", str(doc.meta.get("title") or doc.meta.get("source") or ""))
            .replace("{content}", doc.content or "")
            for doc in state.get("passages") or []
        )
        return self.system_prompt.replace("{passages}", passages)

    @component.output_types(state=dict)
    def run(self, state: dict) -> dict[str, Any]:
        """
        Generate the answer.

        :param state: The state with `passages`.
        :returns: `state` with `answer` and `generator`.
        """
        started = time.perf_counter()
        try:
            question = state.get("original_query") or state["query"]
            answer = ask_chat_generator(self.chat_generator, question, system_prompt=self._system_prompt(state))
        except Exception as error:  # noqa: BLE001 - any model failure degrades to the extractive answer
            reason = f"The language model failed ({type(error).__name__}: {error})."
            if self._extractive is None:
                failed = advance(state, stage="generation", started=started, steps=["generate_llm_failed"],
                                 status="error", error_message=reason, answer="")
                return {"state": failed}
            warned = with_validation(state, "confidence_warnings", reason + " Answered extractively instead.")
            extracted = self._extractive.run(state=warned)["state"]
            return {"state": advance(extracted, stage="generation", started=started, steps=["generate_llm_failed"])}
        return {
            "state": advance(
                state, stage="generation", started=started, steps=["generate_llm"], answer=answer, generator="llm"
            )
        }

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component (the chat generator too)."""
        return default_to_dict(
            self,
            chat_generator=self.chat_generator,
            system_prompt=self.system_prompt,
            passage_template=self.passage_template,
            fallback_to_extractive=self.fallback_to_extractive,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LLMAnswerer":
        """Deserialise the component (the chat generator too)."""
        return default_from_dict(cls, data)
