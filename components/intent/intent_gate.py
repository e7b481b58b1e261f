"""
The intent gate: classifies a query into one of ten intents and decides whether it needs retrieval.
"""

import time
from typing import Any

from haystack import component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.setting_groups import MovedSettings
from gatehouse.components.intent.intent_rules import ROUTES
from gatehouse.components.intent.intent_settings import MOVED_SETTINGS, check_settings
from gatehouse.components.intent.intent_tiers import IntentTiers
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.tiered_classifier import fill_prompt, normalize_text, parse_json_object, parse_labels
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

# The reply format without concrete values: given {"route": "retrieve", "intent": "procedural"} as an example, a
# 0.5B model (qwen0.5b) replied exactly that to every message (`gatehouse bench tiers`).
DEFAULT_LLM_PROMPT = """You classify messages sent to an assistant that answers from these knowledge bases:
{knowledge_bases}

route:
- "retrieve" when answering needs the knowledge bases: anything about what they cover, including how to use or \
write code with what they document. When in doubt, choose "retrieve".
- "direct" for greetings and small talk, arithmetic, common knowledge and general programming syntax.
- "refuse" for requests to perform actions outside this chat, harmful requests, requests to write code unrelated \
to the knowledge bases, and clearly out-of-scope requests.

intent: one of {intents}.

Reply with JSON only, in the form {"route": "...", "intent": "..."}.

Message: {query}"""


@component
class IntentGate(MovedSettings, ChatGeneratorSerialization):
    """
    Classifies the query into an intent and makes the retrieval decision: retrieve, answer directly, or refuse.

    Both decisions are made in tiers, cheapest first; each tier decides only when it is confident, otherwise it
    defers to the next (`gatehouse.components.intent.intent_tiers` holds tiers 0 to 3):

    0. `profile` (with a `profile_store`): a question whose content words a readable knowledge base uses (see
       `profile_store`) is about the documents: it is retrieved, and a request to write code about them too.
    1. `regex`: refuse patterns (external actions, harmful requests), requests for code (refused unless the profile
       tier found them documented), direct patterns (greetings, whole-question arithmetic), retrieve patterns
       ("your", "our", error codes), then general-knowledge patterns (direct unless a domain keyword occurs).
    2. `keywords`: domain keywords (retrieve), refuse keywords, general-knowledge keywords (direct).

    A general-knowledge pattern or keyword sends a question to `direct` only when the rest of the question is
    short: at most `max_general_subject_terms` content words outside the matched cue ("What is the capital of
    *France*?" is direct; "Who was the first *Byzantine mercenary* to *serve* with the *Normans*?" goes on to
    the next tiers, as an encyclopedic question the knowledge bases may answer). Keywords match whole words (a
    trailing `*` any word ending); the out-of-scope intent keywords are phrases with context ("recipe for",
    "song lyrics"), never a bare topic word that an unrelated question may use ("the Song emperor").
    3. `embedding`: cosine similarity to labelled example queries, with a threshold and a margin (`tuning`).
    4. `llm`: an optional chat generator (off by default); failures fall back to the non-LLM result.
    5. `intent`: the intent implies the route (`outcomes.intent_routes`: chitchat -> direct, out_of_scope -> refuse)
       when the intent was decided by one of `outcomes.intent_route_tiers` (regex, keywords, llm).
    6. `default`: `outcomes.default_route` (retrieve) and `outcomes.default_intent` (factual).

    The patterns, keywords and examples of tiers 1 to 3 are `rules` (built in: `intent_rules`); the groups `rules`,
    `tuning` and `outcomes` take the keys of `DEFAULT_RULES`, `DEFAULT_TUNING` and `DEFAULT_OUTCOMES` in
    `intent_settings`, and a key left out keeps its default.

    It writes `intent`, `intent_tier`, `route`, `decision_tier` and `decision_reason` into the state and emits it
    on the output named after the route. The path gets `intent_<intent>_retrieve`, `skip_retrieval` or `refuse`.

    Usage example:
    ```python
    from gatehouse.components.intent.intent_gate import IntentGate
    from gatehouse.components.state import new_state

    gate = IntentGate(rules={"domain_keywords": ["gizmo*"]}, outcomes={"refusal_message": "Ask about gizmos."})
    result = gate.run(state=new_state("How do I reset my password?"))
    assert result["retrieve"]["intent"] == "procedural"
    result = gate.run(state=new_state("What is 12 * 7?"))
    assert "direct" in result
    ```
    """

    moved_settings = MOVED_SETTINGS

    def __init__(  # noqa: PLR0913
        self,
        *,
        rules: dict[str, Any] | None = None,
        tuning: dict[str, float] | None = None,
        outcomes: dict[str, Any] | None = None,
        max_general_subject_terms: int = 2,
        profile_store: LexicalDocumentStore | None = None,
        min_domain_coverage: float = 0.75,
        include_public: bool = True,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        chat_generator: Any = None,
        llm_prompt: str = DEFAULT_LLM_PROMPT,
    ) -> None:
        """
        :param rules: Patterns, keywords and example queries of the route and of the intent, `stopwords`.
        :param tuning: Thresholds and margins of the embedding and keyword tiers, `examples_top_k`.
        :param outcomes: Default and empty-query route and intent, `intent_routes`, `refuse_intent`, `refusal_message`.
        :param max_general_subject_terms: Most content words besides a general-knowledge cue for it to mean `direct`.
        :param profile_store: Lexical store whose KB profiles tell what the caller's KBs cover; None: no profile tier.
        :param min_domain_coverage: Share of a question's content words a readable KB's vocabulary must hold.
        :param include_public: Whether a tenant also reads the public KBs (as the router and the retrieval).
        :param embedding_model: Embedding model for `EmbeddingBackend.get`; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        :param chat_generator: Optional Haystack chat generator for the LLM tier; None disables the tier.
        :param llm_prompt: The LLM tier's prompt; `{query}`, `{intents}` and `{knowledge_bases}` are replaced.
        :raises ValueError: On an unknown key in a group, a malformed list, a bad pattern or an unknown route name.
        """
        self.rules, self.tuning, self.outcomes = check_settings(rules, tuning, outcomes)
        self.max_general_subject_terms = int(max_general_subject_terms)
        self.profile_store = profile_store
        self.min_domain_coverage = float(min_domain_coverage)
        self.include_public = bool(include_public)
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.chat_generator = chat_generator
        self.llm_prompt = llm_prompt
        self._tiers = IntentTiers(self.rules, self.tuning, profile_store, self.max_general_subject_terms,
                                  self.min_domain_coverage, self.include_public, embedding_model, cache_dir)

    @property
    def intents(self) -> list[str]:
        """Every intent the gate may record: those of the rules, then the default, empty-query and refuse intents."""
        rules, outcomes = self.rules, self.outcomes
        refuse = [outcomes["refuse_intent"]] if outcomes["refuse_intent"] else []
        return list(dict.fromkeys([*rules["intent_patterns"], *rules["intent_keywords"], *rules["intent_examples"],
                                   outcomes["default_intent"], outcomes["empty_query_intent"], *refuse]))

    def warm_up(self) -> None:
        """Load the embedding model, embed the labelled examples once and warm up the chat generator, if any."""
        self._tiers.warm_up()
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    # --- the LLM tier ----------------------------------------------------------------------------------------

    def _ask_llm(self, query: str, tenant: str | None,
                 deadline: float | None) -> tuple[str | None, str | None, str | None]:
        """`(route, intent, error)` from the chat generator; unparseable parts are None."""
        listing = "\n".join(f"- {profile.description}" for profile in self._tiers.readable(tenant))
        intents = self.intents
        prompt = fill_prompt(self.llm_prompt, query=query, intents=", ".join(intents),
                             knowledge_bases=listing or "- (none described)")
        try:
            reply = ask_chat_generator(self.chat_generator, prompt, deadline=deadline)
        except Exception as error:  # noqa: BLE001 - any generator failure falls back to the non-LLM result
            return None, None, f"{type(error).__name__}: {error}"
        parsed = parse_json_object(reply) or {}
        route = str(parsed.get("route", "")).strip().lower() or None
        intent = str(parsed.get("intent", "")).strip().lower() or None
        if route not in ROUTES:
            found = parse_labels(reply, list(ROUTES)) if not parsed else []
            route = found[0] if len(found) == 1 else None
        if intent not in intents:
            found = parse_labels(reply, intents) if not parsed else []
            intent = found[0] if len(found) == 1 else None
        error = None if route or intent else f"unparseable reply {reply[:200]!r}"
        return route, intent, error

    @component.output_types(retrieve=State, direct=State, refuse=State)
    def run(self, state: State, deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Classify `state["query"]` and emit the state on the route of the retrieval decision.

        :param state: The request state (see `gatehouse.components.state`); `query` is read.
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM tier's calls fit in it).
        :returns: One of `{"retrieve": state}`, `{"direct": state}` or `{"refuse": state}`, where the new state
            carries `intent`, `intent_tier`, `route`, `decision_tier`, `decision_reason` and, when the embedding
            tier ran, `route_similarity` (similarity per route).
        """
        started = time.perf_counter()
        query = normalize_text(str(state.get("query") or ""))
        warnings: list[str] = []
        similarity: dict[str, float] = {}

        tiers, outcomes = self._tiers, self.outcomes
        if not query:
            route, decision_tier, reason = outcomes["empty_query_route"], "empty", "empty query"
            intent, intent_tier = outcomes["empty_query_intent"], "empty"
        else:
            domain = tiers.domain(query, state.get("tenant"))
            route_rule = tiers.route_by_rules(query, domain)
            intent_rule = tiers.intent_by_rules(query)
            route = decision_tier = reason = None
            intent = intent_tier = None
            if route_rule is not None:
                route, decision_tier, reason = route_rule
            if intent_rule is not None:
                intent, intent_tier = intent_rule

            vector = None
            if route is None and not tiers.route_index.empty:
                vector = tiers.route_index.embed_query(query)
                decision, similarity = tiers.route_by_embedding(vector)
                if decision.confident:
                    route, decision_tier = decision.label, "embedding"
                    reason = f"similar to {decision.label} examples ({decision.score:.2f} vs {decision.second:.2f})"
            if intent is None and not tiers.intent_index.empty:
                vector = tiers.intent_index.embed_query(query) if vector is None else vector
                decision = tiers.intent_by_embedding(vector)
                if decision.confident:
                    intent, intent_tier = decision.label, "embedding"

            if (route is None or intent is None) and self.chat_generator is not None:
                llm_route, llm_intent, error = self._ask_llm(query, state.get("tenant"), deadline)
                if error:
                    warnings.append(f"intent_gate: LLM tier failed ({error}); used the non-LLM result")
                if route is None and llm_route:
                    route, decision_tier, reason = llm_route, "llm", "chosen by the LLM"
                if intent is None and llm_intent:
                    intent, intent_tier = llm_intent, "llm"

            intent_routes, refuse_intent = outcomes["intent_routes"], outcomes["refuse_intent"]
            if intent is None:
                intent, intent_tier = outcomes["default_intent"], "default"
            if route is None and intent_tier in outcomes["intent_route_tiers"] and intent in intent_routes:
                route, decision_tier, reason = intent_routes[intent], "intent", f"implied by intent {intent}"
            if route is None:
                route, decision_tier, reason = outcomes["default_route"], "default", "no tier was confident"
            if route == "refuse" and refuse_intent and intent != refuse_intent:
                intent, intent_tier = refuse_intent, decision_tier
            if route == "retrieve" and decision_tier == "profile" and intent == refuse_intent:
                # a request for code with the documented API
                intent, intent_tier = "procedural", decision_tier

        steps = {"direct": ["skip_retrieval"], "refuse": ["refuse"]}.get(route, [f"intent_{intent}_{route}"])
        updates: dict[str, Any] = {
            "intent": intent,
            "intent_tier": intent_tier,
            "route": route,
            "decision_tier": decision_tier,
            "decision_reason": reason,
        }
        if similarity:
            updates["route_similarity"] = {label: round(score, 4) for label, score in similarity.items()}
        new_state = advance(state, stage="intent_gate", started=started, steps=steps, **updates)
        if warnings:
            new_state = with_validation(new_state, "confidence_warnings", *warnings)
        if route == "refuse":
            new_state = with_validation(
                {**new_state, "status": "refused", "answer": outcomes["refusal_message"]},
                "boundary_violations", f"request refused ({decision_tier}: {reason})",
            )
        return {route: new_state}
