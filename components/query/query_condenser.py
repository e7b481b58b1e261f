"""The condenser: a conversational follow-up becomes a standalone question, by rules; an LLM tier is optional."""

import time
from typing import Any, ClassVar

from haystack import component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_for_query
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.query.followup_rules import DEFAULT_CONTEXT_TEMPLATE, FollowUpRules
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.terms import content_words, same_words, stem

DEFAULT_CONDENSE_PROMPT = (
    "Given the conversation so far and a follow-up question, rewrite the follow-up into a standalone search "
    "query that can be understood without the conversation. Output ONLY the standalone query.\n"
    "Conversation:\n{history}\n"
    "Follow-up question: {question}"
)
#: The rules' settings (`FollowUpRules`): the most recent user turns looked at (`max_history_turns`; earlier
#: follow-ups among them are resolved first), the topic taken from the last assistant turn first
#: (`use_assistant_turns`), the longest question that may be a follow-up (`max_condense_words`), the most content
#: terms of a question with a pronoun that is one (`max_reference_content_terms`) and the standalone form of a
#: follow-up with no pronoun or new entity (`context_template`: `{topic}`, `{question}`).
RULES: dict[str, Any] = {"max_history_turns": 2, "use_assistant_turns": False, "max_condense_words": 12,
                         "max_reference_content_terms": 3, "context_template": DEFAULT_CONTEXT_TEMPLATE}
#: The optional LLM tier: its `prompt` (`{history}` and `{question}` replaced) and the longest reply it may give
#: (`max_query_chars`; a longer one is rejected and the rules' question used).
LLM: dict[str, Any] = {"prompt": DEFAULT_CONDENSE_PROMPT, "max_query_chars": 500}


@component
class QueryCondenser(MovedSettings, ChatGeneratorSerialization):
    """
    Makes a follow-up question standalone (before routing), using the conversation history.

    When `state["history"]` is non-empty and the question is conversational (a short follow-up such as "and for the
    free tier?", or a short question that leans on a pronoun such as "how much does it cost?"), it is rewritten into
    a standalone question by rules, without a model (`FollowUpRules`): the topic is the noun phrase of the previous
    user turn that the question asked about ("How do I rotate *an API key*?", "Which *regions* ...", "How much does
    *the basic tier* cost?"); a leading "and"/"so" is dropped, then a new entity ("what about X", "and for X", "and
    the X?") takes the place of the matching phrase of the previous question ("How much does the premium tier
    cost?"); else the first pronoun (it, this, that, they, them, one) becomes the topic ("how do I revoke an API
    key?"); else the question is put in context with `rules.context_template` ("Regarding two-factor
    authentication, what if I lose my phone?"). Earlier follow-ups in the history are resolved the same way first.
    Standalone questions are left unchanged. With a `chat_generator`, its rewrite replaces the rules' one when it
    keeps every content word of the follow-up (the rules remain the fallback: when it fails, or drops what the
    follow-up itself asks, "and how do I revoke it?" rewritten as "rotate api key"). Path `condense_query` only when the query changed; `state["condensed_query"]` holds the
    standalone question.

    Usage:
    ```python
    from gatehouse.components.query.query_condenser import QueryCondenser
    from gatehouse.components.state import new_state

    condenser = QueryCondenser()
    state = new_state("and how do I revoke it?",
                      history=[{"role": "user", "content": "How do I rotate an API key?"}])
    condenser.run(state=state)["state"]["query"]   # "how do I revoke an API key?"
    ```
    """

    #: Settings that moved into `grammar`, `rules` and `llm` (a YAML still naming one is refused with its new place).
    moved_settings: ClassVar[dict[str, str]] = {
        **{name: f"grammar.{name}" for name in (
            "followup_patterns", "pronouns", "noun_pronouns", "leading_connectives", "ellipsis_patterns", "determiners",
            "question_determiners", "prepositions", "auxiliary_verbs", "verb_cues", "definite_article", "stopwords",
            "stemmer_language")},
        **{name: f"rules.{name}" for name in RULES},
        "condense_prompt": "llm.prompt",
        "max_query_chars": "llm.max_query_chars",
    }

    def __init__(
        self,
        *,
        rules: dict[str, Any] | None = None,
        grammar: dict[str, Any] | None = None,
        chat_generator: Any = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        """
        :param rules: How the rules find and rewrite a follow-up (`RULES`: keys and defaults).
        :param grammar: The rules' word lists, patterns, stopwords and stemmer (see `FollowUpRules`); None: English.
        :param chat_generator: Optional Haystack chat generator for an LLM condense tier; None disables it.
        :param llm: The LLM tier's `prompt` and `max_query_chars` (`LLM`: keys and defaults).
        :raises ValueError: On an unknown key of a group or a negative `rules.max_history_turns`.
        """
        self.rules = setting_group("rules", rules, RULES)
        self.grammar = grammar
        self.chat_generator = chat_generator
        self.llm = setting_group("llm", llm, LLM)
        self._followup = FollowUpRules(grammar=grammar, **self.rules)

    def warm_up(self) -> None:
        """Warm up the optional chat generator."""
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    @component.output_types(state=State)
    def run(self, state: State, deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Make the query standalone when it is a follow-up.

        :param state: The request state; reads `query` and `history`.
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM tier's calls fit in it).
        :returns: `state`, a new state with `condensed_query` (and `query`) the standalone question.
        """
        started = time.perf_counter()
        question = str(state.get("query") or "")
        history = [t for t in (state.get("history") or []) if isinstance(t, dict)]
        if not history or not question.strip() or not self._followup.is_followup(question):
            return {"state": advance(state, stage="query_condenser", started=started, condensed_query=question)}

        condensed = self._followup.condense(question, history)
        warning = None
        if self.chat_generator is not None:
            turns = history[-2 * self.rules["max_history_turns"] :] if self.rules["max_history_turns"] else []
            transcript = "\n".join(f"{t.get('role')}: {t.get('content')}" for t in turns)
            prompt = self.llm["prompt"].replace("{history}", transcript).replace("{question}", question)
            try:
                rewrite = ask_for_query(self.chat_generator, prompt, max_chars=self.llm["max_query_chars"],
                                        deadline=deadline)
            except Exception as error:  # noqa: BLE001 - any LLM failure falls back to the rules
                warning = f"query_condenser: LLM condense failed ({type(error).__name__}: {error}); rules used"
            else:
                kept = content_words(rewrite)
                dropped = sorted(w for w in content_words(question, stemmed=False) if stem(w) not in kept)
                if dropped:  # the rewrite lost what the follow-up itself asks: the rules keep it
                    warning = f"query_condenser: the LLM's rewrite left out {', '.join(dropped)}; rules used"
                else:
                    condensed = rewrite
        base = with_validation(state, "confidence_warnings", warning) if warning else state
        changed = not same_words(condensed, question)
        return {"state": advance(base, stage="query_condenser", started=started,
                                 steps=["condense_query"] if changed else [], query=condensed,
                                 condensed_query=condensed)}
