"""
The intent gate's tiers before the LLM (plain Python, not a component): the knowledge-base profiles, the regular
expressions, the keywords and the labelled examples of `gatehouse.components.intent.intent_gate.IntentGate`,
compiled once from its settings (see `intent_settings` for the groups).
"""

from typing import Any

from gatehouse.components.kb_profile import KBProfile, KBProfiles
from gatehouse.components.tiered_classifier import (
    Decision,
    ExampleIndex,
    KeywordMatcher,
    PatternMatcher,
    decide,
    normalize_text,
)
from gatehouse.components.terms import TermNormaliser, stem, tokenize, tokens
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

#: Words of a request to write code, not of what the code is about.
REQUEST_WORDS = frozenset("write code coding function functions script scripts program snippet snippets example "
                          "examples generate implement create build make show give help".split())


def _short(pattern: str, limit: int = 80) -> str:
    """A pattern quoted for a reason message, shortened to `limit` characters."""
    return repr(pattern if len(pattern) <= limit else pattern[: limit - 3] + "...")


class IntentTiers:
    """
    The profile, regex, keyword and embedding tiers of the route and of the intent; each returns None (or a decision
    that is not confident) to defer to the next.

    ```python
    from gatehouse.components.intent.intent_settings import check_settings

    rules, tuning, _ = check_settings(None, None, None)
    tiers = IntentTiers(rules, tuning, None, max_general_subject_terms=2, min_domain_coverage=0.75)
    tiers.route_by_rules("What is 12 * 7?", domain=None)  # ("direct", "regex", "matched direct pattern ...")
    ```
    """

    def __init__(  # noqa: PLR0913
        self,
        rules: dict[str, Any],
        tuning: dict[str, Any],
        profile_store: LexicalDocumentStore | None,
        max_general_subject_terms: int,
        min_domain_coverage: float,
        include_public: bool = True,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        """
        Compile the tiers.

        :param rules: The gate's checked `rules` (every key present).
        :param tuning: The gate's checked `tuning` (every key present).
        :param profile_store: The lexical store whose KB profiles the profile tier reads; None: no profile tier.
        :param max_general_subject_terms: Most content words besides a general-knowledge cue for it to decide.
        :param min_domain_coverage: Share of a question's content words a KB's vocabulary must hold.
        :param include_public: Whether a tenant also reads the public KBs.
        :param embedding_model: Embedding model for the example tiers; None uses the configured default.
        :param cache_dir: Embedding cache directory; `"off"` disables it.
        :raises ValueError: If a keyword list or an example mapping is malformed.
        """
        self.tuning = tuning
        self.max_general_subject_terms = max_general_subject_terms
        self.min_domain_coverage = min_domain_coverage
        self.include_public = include_public
        self.profiles = KBProfiles(profile_store) if profile_store is not None else None
        self._headings: dict[tuple[str, str, int], set[str]] = {}
        self.route_patterns = PatternMatcher(
            {
                "refuse": rules["refuse_patterns"],
                "code": rules["code_request_patterns"],
                "direct": rules["direct_patterns"],
                "retrieve": rules["retrieve_patterns"],
                "general": rules["general_knowledge_patterns"],
            },
            owner="route patterns",
        )
        self.route_keywords = KeywordMatcher(
            {"retrieve": rules["domain_keywords"], "refuse": rules["refuse_keywords"],
             "direct": rules["general_keywords"]},
            owner="route keywords",
        )
        self.terms = TermNormaliser(rules["stopwords"], None, 1)
        top_k = tuning["examples_top_k"]
        self.route_index = ExampleIndex(
            rules["examples"], embedding_model=embedding_model, cache_dir=cache_dir, top_k=top_k, owner="examples"
        )
        self.intent_patterns = PatternMatcher(rules["intent_patterns"], owner="intent_patterns")
        self.intent_keywords = KeywordMatcher(rules["intent_keywords"], owner="intent_keywords")
        self.intent_index = ExampleIndex(
            rules["intent_examples"], embedding_model=embedding_model, cache_dir=cache_dir, top_k=top_k,
            owner="intent_examples",
        )

    def warm_up(self) -> None:
        """Load the embedding model and embed the labelled examples once."""
        self.route_index.warm_up()
        self.intent_index.warm_up()

    def readable(self, tenant: str | None) -> list[KBProfile]:
        """The profiles of the knowledge bases `tenant` reads (none without a profile store)."""
        return self.profiles.readable(tenant, include_public=self.include_public) if self.profiles else []

    # --- the route -------------------------------------------------------------------------------------------

    def route_by_rules(self, query: str, domain: str | None) -> tuple[str, str, str] | None:
        """Tiers 1 and 2 of the retrieval decision: `(route, tier, reason)` or None to defer."""
        matches = self.route_patterns.matches(query)
        hits = self.route_keywords.hits(query)
        if matches["refuse"]:
            return "refuse", "regex", f"matched refuse pattern {_short(matches['refuse'][0])}"
        if matches["code"]:
            if domain:
                return "retrieve", "profile", f"asks for code with what the knowledge bases document ({domain})"
            return "refuse", "regex", f"matched code request pattern {_short(matches['code'][0])}"
        for route in ("direct", "retrieve"):
            if matches[route]:
                return route, "regex", f"matched {route} pattern {_short(matches[route][0])}"
        if domain:
            return "retrieve", "profile", f"about what the knowledge bases cover ({domain})"
        if matches["general"] and not hits["retrieve"] and self._general(query, self.route_patterns, "general"):
            return "direct", "regex", f"matched general-knowledge pattern {_short(matches['general'][0])}"
        for route in ("retrieve", "refuse", "direct"):
            if hits[route] and (route != "direct" or self._general(query, self.route_keywords, "direct")):
                return route, "keywords", f"{route} keywords: {', '.join(hits[route][:5])}"
        return None

    def _general(self, query: str, matcher: PatternMatcher | KeywordMatcher, label: str) -> bool:
        """Whether a general-knowledge cue leaves at most `max_general_subject_terms` content words."""
        text = normalize_text(query)
        covered = [False] * len(text)
        for start, end in matcher.spans(text, label):
            covered[start:end] = [True] * (end - start)
        rest = "".join(" " if hit else char for char, hit in zip(text, covered))
        subject = [token for token in tokenize(rest) if self.terms.is_content(token)]
        return len(subject) <= self.max_general_subject_terms

    def domain(self, query: str, tenant: str | None) -> str | None:
        """
        Tier 0: which readable knowledge base covers the question's content words (`min_domain_coverage` of them,
        one in a title or heading), as `"<kb>: 3/4 words"`; None when none does or there are no profiles.
        """
        if self.profiles is None:
            return None
        words = [w for w in tokens(query) if self.terms.is_content(w) and w not in REQUEST_WORDS]
        terms = list(dict.fromkeys(stem(w) for w in words if len(w) > 1 or w.isdigit()))
        if not terms:
            return None
        for profile in self.readable(tenant):
            found = {t for t in terms if profile.df(t) > 0}
            if len(found) >= self.min_domain_coverage * len(terms) and found & self._heading_terms(profile):
                return f"{profile.kb}: {len(found)}/{len(terms)} words"
        return None

    def _heading_terms(self, profile: KBProfile) -> set[str]:
        key = (profile.tenant, profile.kb, profile.generation)
        if key not in self._headings:
            self._headings = {k: v for k, v in self._headings.items() if k[:2] != key[:2]}
            self._headings[key] = profile.heading_terms()
        return self._headings[key]

    def route_by_embedding(self, vector: Any) -> tuple[Decision, dict[str, float]]:
        """Tier 3 of the retrieval decision: the decision and the similarity per route."""
        scores = self.route_index.scores(vector)
        return decide(scores, threshold=self.tuning["embedding_threshold"],
                      margin=self.tuning["embedding_margin"]), scores

    # --- the intent ------------------------------------------------------------------------------------------

    def intent_by_rules(self, query: str) -> tuple[str, str] | None:
        """Tiers 1 and 2 of the intent: `(intent, tier)` or None to defer."""
        first = self.intent_patterns.first(query)
        if first is not None:
            return first[0], "regex"
        hits = {label: len(words) for label, words in self.intent_keywords.hits(query).items() if words}
        if hits:
            decision = decide(hits, threshold=1, margin=self.tuning["intent_keyword_margin"])
            if decision.confident and decision.label is not None:
                return decision.label, "keywords"
        return None

    def intent_by_embedding(self, vector: Any) -> Decision:
        """Tier 3 of the intent."""
        return decide(
            self.intent_index.scores(vector),
            threshold=self.tuning["intent_embedding_threshold"],
            margin=self.tuning["intent_embedding_margin"],
        )
