"""
The knowledge-base router: picks the knowledge base(s) to search for a query and builds the retrieval filters.
"""

import json
import re
import time
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from haystack import component, logging

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.kb_profile import ENTRY_KEYS, KBProfiles
from gatehouse.components.state import PUBLIC_TENANT, State, advance, with_validation
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.components.retrievers.tenant_filter import TenantFilter
from gatehouse.components.routers.tiered_classifier import (
    ExampleIndex,
    KeywordMatcher,
    PatternMatcher,
    fill_prompt,
    normalize_text,
    parse_labels,
)

logger = logging.getLogger(__name__)

KB_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
KB_KEYS = set(ENTRY_KEYS)
#: The evidence tier's settings and their defaults (see `KBRouter.__init__`).
EVIDENCE_DEFAULTS: dict[str, Any] = {"enabled": False, "margin": 0.05, "lead_below": 0.3}
#: Evidence settings of earlier versions: the evidence is now the first search attempt of `search.yml`.
RETIRED_EVIDENCE_KEYS = ("pipeline", "top_k")

DEFAULT_LLM_PROMPT = """Select the knowledge base that can answer the question.

Knowledge bases:
{knowledge_bases}

Reply with the name of the best knowledge base only. Name two, separated by a comma, only when the question \
clearly needs both.

Question: {query}"""


@dataclass
class _Tiers:
    """A set of KB entries with their keyword, pattern and example tiers."""

    kbs: list[dict[str, Any]]
    keywords: KeywordMatcher
    patterns: PatternMatcher
    index: ExampleIndex

    @property
    def names(self) -> list[str]:
        """The entries' KB names, in order."""
        return [kb["name"] for kb in self.kbs]


@component
class KBRouter(ChatGeneratorSerialization):
    """
    Routes a query to one or two knowledge bases and emits the retrieval filters, always scoped to the tenant.

    Knowledge bases are declared in `knowledge_bases` (adding one is a YAML edit). Each KB is scored in tiers:

    1. lexical: its `keywords` (1 hit each) and regular expression `patterns` (`pattern_weight` hits each); the
       lexical score of a KB is its share of all hits;
    2. embedding: the mean of the `embedding_top_k` highest cosine similarities of the query to the KB's
       description and examples (embedded once per instance);
    3. the two are combined into one score per KB (`keyword_weight`, `embedding_weight`; the embedding score
       alone when no keyword matched), and the best KB wins. KBs within `dual_route_margin` of the best are
       added, up to `max_kbs`. When the best score is below `min_route_score` the top `max_kbs` KBs are searched;
    4. evidence (`evidence.enabled`): when the tiers above are unsure (best score below `min_route_score` or a lead
       below `evidence.lead_below`), the router does not choose: it routes to the candidate KBs (those scoring within
       `lead_below` of the best, every declared one when none scores well, and undeclared KBs holding the caller's
       documents) and leaves the choice to the search's first attempt (`route_pending`): `KBEvidence` keeps the KB
       holding the best-scoring document and those whose best document scores within `evidence.margin` of it, up to
       `max_kbs`, or this routing's own choice when nothing was found;
    5. optional LLM (`chat_generator`): asked when the result is still ambiguous (lead below `llm_margin` or a low
       score) and the evidence is not asked; a failed or unparseable answer keeps the non-LLM result.

    Tenants: a caller reads its own documents and, with `include_public`, the public ones (the same rule as
    `TenantFilter`; keep `include_public` in step with `retrieve.yml`). With a `catalogue_store` (the lexical store),
    only the declared KBs that hold documents the caller may read are candidates, from a (tenant, kb) document count
    that the store caches until its next write. A KB the YAML does not declare but that holds the caller's own
    (non-public) documents is a candidate of the evidence tier only (nothing else can score it), which then always
    runs; it can also be named explicitly. Without a catalogue store every declared KB is a candidate.

    An explicit `state["kb"]` bypasses the scoring; an unknown one goes out on `unknown_kb` with an error. A request
    that reads only the caller's context (mode `constrained-context`) reads no KB, and a multi-part plan's parts are
    searched in every KB the caller may read (or its explicit `kb`): both go on unrouted.

    Usage example:
    ```python
    from gatehouse.components.routers.kb_router import KBRouter
    from gatehouse.components.state import new_state

    router = KBRouter(knowledge_bases=[
        {"name": "faq", "description": "accounts, passwords, billing, API keys", "keywords": ["api key", "refund*"],
         "examples": ["How do I reset my password?"], "threshold": 0.6},
        {"name": "ops", "description": "deployment, docker, monitoring, backups", "keywords": ["docker"],
         "examples": ["How do I back up the gateway?"], "threshold": 0.55},
    ])
    result = router.run(state=new_state("How do I rotate an API key?", tenant="acme"))
    assert result["routed"]["kbs"] == ["faq"]

    # Tenant-aware, with the evidence tier (needs the stores ingested, e.g. by `gatehouse ingest`):
    router = KBRouter(knowledge_bases=[...], catalogue_store=LexicalDocumentStore(),
                      evidence={"enabled": True, "margin": 0.05})
    ```
    """

    def __init__(  # noqa: PLR0913
        self,
        *,
        knowledge_bases: list[dict[str, Any]] | None = None,
        keyword_weight: float = 0.3,
        embedding_weight: float = 0.7,
        pattern_weight: float = 2.0,
        keyword_saturation: float = 2.0,
        embedding_top_k: int = 2,
        dual_route_margin: float = 0.05,
        max_kbs: int = 2,
        min_route_score: float = 0.2,
        default_threshold: float = 0.5,
        default_tenant: str = PUBLIC_TENANT,
        include_public: bool = True,
        catalogue_store: LexicalDocumentStore | None = None,
        evidence: dict[str, Any] | None = None,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        chat_generator: Any = None,
        llm_margin: float = 0.1,
        llm_prompt: str = DEFAULT_LLM_PROMPT,
    ) -> None:
        """
        Create the router.

        :param knowledge_bases: The knowledge bases, each a mapping with `name` (letters, digits, `_`, `-`, `.`),
            `description` (what it covers), optional `keywords` (see `gatehouse.components.routers.tiered_classifier` for the
            syntax), optional `examples` (typical questions), optional `patterns` (regular expressions) and optional
            `threshold` (the retrieval quality threshold of that KB, 0..1; `default_threshold` when absent).
        :param keyword_weight: Weight of the lexical score in the combined score.
        :param embedding_weight: Weight of the embedding score in the combined score.
        :param pattern_weight: How many keyword hits one matching regular expression counts as.
        :param keyword_saturation: The lexical score of a KB is `hits / (hits + keyword_saturation)`, so one weak
            keyword cannot outvote the embedding tier on its own while several hits approach 1.
        :param embedding_top_k: How many best-matching texts (description, examples) of a KB are averaged.
        :param dual_route_margin: KBs whose score is within this margin of the best one are searched too.
        :param max_kbs: The most KBs a query is routed to.
        :param min_route_score: Below this best score the router is unsure and searches the top `max_kbs` KBs.
        :param default_threshold: Threshold of a KB that declares none.
        :param default_tenant: Tenant used in the filters when the state names none.
        :param include_public: Whether a tenant also reads the public tenant's documents (as `TenantFilter`).
        :param catalogue_store: The store whose (tenant, kb) document counts restrict routing to the KBs holding
            documents the caller may read (`metadata_counts`); None considers every declared KB.
        :param evidence: The evidence tier: `enabled` (default false), `margin` (KBs whose best document scores
            within this share of the best KB's are routed to too, default 0.05) and `lead_below` (the tier runs when the
            best KB leads the second by less than this, or scores below `min_route_score`; default 0.3).
        :param embedding_model: Embedding model for `EmbeddingBackend.get`; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        :param chat_generator: Optional Haystack chat generator for the LLM tier; None disables the tier.
        :param llm_margin: The LLM is asked when the best KB leads the second by less than this.
        :param llm_prompt: Prompt for the LLM tier; `{query}` and `{knowledge_bases}` are replaced.
        :raises ValueError: If `knowledge_bases` is empty or malformed, or a number is out of range.
        """
        self.knowledge_bases = deepcopy(knowledge_bases) if knowledge_bases is not None else []
        self.keyword_weight = float(keyword_weight)
        self.embedding_weight = float(embedding_weight)
        self.pattern_weight = float(pattern_weight)
        self.keyword_saturation = float(keyword_saturation)
        self.embedding_top_k = int(embedding_top_k)
        self.dual_route_margin = float(dual_route_margin)
        self.max_kbs = int(max_kbs)
        self.min_route_score = float(min_route_score)
        self.default_threshold = float(default_threshold)
        self.default_tenant = default_tenant
        self.include_public = bool(include_public)
        self.catalogue_store = catalogue_store
        self.evidence = self._validate_evidence(evidence)
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.chat_generator = chat_generator
        self.llm_margin = float(llm_margin)
        self.llm_prompt = llm_prompt

        if self.keyword_saturation <= 0:
            raise ValueError(f"'keyword_saturation' must be positive, got {keyword_saturation}.")
        if self.max_kbs < 1:
            raise ValueError(f"'max_kbs' must be at least 1, got {max_kbs}.")
        if self.keyword_weight < 0 or self.embedding_weight < 0 or self.keyword_weight + self.embedding_weight <= 0:
            raise ValueError("'keyword_weight' and 'embedding_weight' must be non-negative and not both zero.")
        self._kbs = self._validate(self.knowledge_bases, self.default_threshold)
        self.names = [kb["name"] for kb in self._kbs]
        self._tenant_filter = TenantFilter(default_tenant=default_tenant, include_public=self.include_public)
        self._profiles = KBProfiles(catalogue_store) if catalogue_store is not None else None
        self._static = self._tiers(self._kbs)
        self._dynamic: dict[str, _Tiers] = {}

    def _tiers(self, kbs: list[dict[str, Any]]) -> "_Tiers":
        """The keyword, pattern and example tiers of a set of checked KB entries."""
        return _Tiers(
            kbs=kbs,
            keywords=KeywordMatcher({kb["name"]: kb["keywords"] for kb in kbs}, owner="knowledge_bases keywords"),
            patterns=PatternMatcher({kb["name"]: kb["patterns"] for kb in kbs}, owner="knowledge_bases patterns"),
            index=ExampleIndex(
                {kb["name"]: [text for text in (kb["description"], *kb["examples"]) if text]
                 for kb in kbs if kb["description"] or kb["examples"]},
                embedding_model=self.embedding_model, cache_dir=self.cache_dir, top_k=self.embedding_top_k,
                owner="knowledge_bases",
            ),
        )

    def entries(self, tenant: str | None) -> "_Tiers":
        """
        The KB entries a caller's question is scored against: the YAML's `knowledge_bases`, then the entries of the
        caller's readable KBs that bring their own (`kb.yml`, stored at ingest) and are not in the YAML.
        """
        if self._profiles is None:
            return self._static
        own = [profile for profile in self._profiles.readable(tenant, include_public=self.include_public)
               if profile.entry and profile.kb not in self.names]
        if not own:
            return self._static
        key = json.dumps([[profile.kb, profile.entry] for profile in own], sort_keys=True)
        if key not in self._dynamic:
            extra = self._validate([{**profile.entry, "name": profile.kb} for profile in own], self.default_threshold)
            if len(self._dynamic) > 64:
                self._dynamic.clear()
            self._dynamic[key] = self._tiers(self._kbs + extra)
        return self._dynamic[key]

    @staticmethod
    def _validate(knowledge_bases: Any, default_threshold: float) -> list[dict[str, Any]]:
        """Check the declared knowledge bases and return them normalised (all keys present)."""
        if not isinstance(knowledge_bases, list):
            raise ValueError(
                "KBRouter's 'knowledge_bases' must be a list of mappings with 'name' and optional 'description', "
                f"'keywords', 'examples', 'patterns' and 'threshold'; got {knowledge_bases!r}."
            )
        normalised: list[dict[str, Any]] = []
        seen: set[str] = set()
        for position, kb in enumerate(knowledge_bases):
            where = f"knowledge_bases[{position}]"
            if not isinstance(kb, dict):
                raise ValueError(f"{where} must be a mapping, got {type(kb).__name__}.")
            name = kb.get("name")
            if not isinstance(name, str) or not KB_NAME.match(name):
                raise ValueError(f"{where} needs a 'name' of letters, digits, '_', '-' or '.', got {name!r}.")
            where = f"knowledge base '{name}'"
            if name in seen:
                raise ValueError(f"{where} is declared twice in 'knowledge_bases'.")
            seen.add(name)
            unknown = sorted(set(kb) - KB_KEYS)
            if unknown:
                raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(KB_KEYS)}.")
            description = kb.get("description", "")
            if not isinstance(description, str):
                raise ValueError(f"{where}: 'description' must be a string, got {type(description).__name__}.")
            lists = {}
            for key in ("keywords", "examples", "patterns"):
                value = kb.get(key) or []
                if isinstance(value, str) or not isinstance(value, list):
                    raise ValueError(f"{where}: '{key}' must be a list of strings, got {type(value).__name__}.")
                if not all(isinstance(item, str) and item.strip() for item in value):
                    raise ValueError(f"{where}: '{key}' holds an empty or non-string item.")
                lists[key] = list(value)
            if not description.strip() and not lists["examples"] and not lists["keywords"] and not lists["patterns"]:
                raise ValueError(f"{where} needs a 'description', 'examples' or 'keywords' to be routable.")
            threshold = kb.get("threshold", default_threshold)
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
                raise ValueError(f"{where}: 'threshold' must be a number between 0 and 1, got {threshold!r}.")
            normalised.append(
                {"name": name, "description": description.strip(), "threshold": float(threshold), **lists}
            )  # url_base is the ingest's business
        return normalised

    @staticmethod
    def _validate_evidence(evidence: Any) -> dict[str, Any]:
        """The evidence settings with their defaults filled in."""
        if evidence is None:
            evidence = {}
        if not isinstance(evidence, dict):
            raise ValueError(f"'evidence' must be a mapping, got {type(evidence).__name__}.")
        retired = sorted(set(evidence) & set(RETIRED_EVIDENCE_KEYS))
        if retired:
            raise ValueError(
                f"'evidence' no longer takes {retired}: the evidence is the first attempt of the search pipeline "
                "(pipelines/search.yml), which searches the candidate knowledge bases as any attempt does. Remove them."
            )
        unknown = sorted(set(evidence) - set(EVIDENCE_DEFAULTS))
        if unknown:
            raise ValueError(f"'evidence' has unknown keys {unknown}; allowed: {sorted(EVIDENCE_DEFAULTS)}.")
        settings = {**EVIDENCE_DEFAULTS, **evidence}
        if not isinstance(settings["enabled"], bool):
            raise ValueError(f"'evidence.enabled' must be true or false, got {settings['enabled']!r}.")
        for key in ("margin", "lead_below"):
            value = settings[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"'evidence.{key}' must be a non-negative number, got {value!r}.")
            settings[key] = float(value)
        return settings

    def warm_up(self) -> None:
        """
        Load the embedding model, embed the KB descriptions and examples once, warm up the chat generator.
        """
        self._static.index.warm_up()
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def score(self, query: str, tiers: "_Tiers | None" = None) -> tuple[dict[str, float], str]:
        """
        Score every knowledge base with an entry for a query.

        :param query: The query.
        :param tiers: The entries to score (`entries(tenant)`); None: the YAML's.
        :returns: `(score per KB, best first; the tier that drove the scores: keywords, embedding or combined)`.
        """
        tiers = tiers or self._static
        if not tiers.kbs:
            return {}, "none"
        keyword_hits = tiers.keywords.hits(query)
        pattern_hits = tiers.patterns.matches(query)
        hits = {
            name: len(keyword_hits.get(name, [])) + self.pattern_weight * len(pattern_hits.get(name, []))
            for name in tiers.names
        }
        total = sum(hits.values())
        similarity = tiers.index.scores(tiers.index.embed_query(query)) if not tiers.index.empty else {}
        scores: dict[str, float] = {}
        for name in tiers.names:
            embedding = max(similarity.get(name, 0.0), 0.0)
            if total > 0:
                lexical = hits[name] / (hits[name] + self.keyword_saturation) if hits[name] else 0.0
                scores[name] = (self.keyword_weight * lexical + self.embedding_weight * embedding) / (
                    self.keyword_weight + self.embedding_weight
                )
            else:
                scores[name] = embedding
        ranked = dict(sorted(scores.items(), key=lambda item: item[1], reverse=True))
        if total == 0:
            tier = "embedding"
        else:
            lexical_best = max(hits, key=lambda name: hits[name])
            only_one = sum(1 for value in hits.values() if value > 0) == 1
            tier = "keywords" if only_one and lexical_best == next(iter(ranked)) else "combined"
        return {name: round(value, 4) for name, value in ranked.items()}, tier

    def candidates(self, tenant: str | None, names: list[str] | None = None) -> tuple[list[str], list[str]]:
        """
        The knowledge bases a caller's query may be routed to, from the catalogue store's document counts.

        :param tenant: The caller's tenant (None: `default_tenant`).
        :param names: The KBs with an entry (`entries(tenant).names`); None: the YAML's.
        :returns: `(KBs with an entry holding documents the caller may read, in entry order — all of them when there
            is no catalogue store or none holds any; KBs without an entry holding documents the caller may read)`.
        """
        names = self.names if names is None else names
        if self.catalogue_store is None:
            return list(names), []
        readable = self._tenant_filter.tenants(tenant)
        counts = {key: count for key, count in self.catalogue_store.metadata_counts(["tenant", "kb"]).items() if count}
        held = {kb for owner, kb in counts if owner in readable}
        declared = [name for name in names if name in held]
        undeclared = sorted(name for name in held - set(names) if name)
        return declared or ([] if undeclared else list(names)), undeclared

    def _choose(self, scores: dict[str, float]) -> tuple[list[str], bool]:
        """The KBs to search given the scores (best first) and whether the choice is low-confidence."""
        names = list(scores)
        best = scores[names[0]]
        if best < self.min_route_score:
            return names[: self.max_kbs], True
        chosen = [name for name in names if best - scores[name] < self.dual_route_margin]
        return chosen[: self.max_kbs], False

    def _ask_llm(self, query: str, candidates: list[str], descriptions: dict[str, str],
                 deadline: float | None) -> tuple[list[str], str | None]:
        """The candidate KBs chosen by the chat generator (best first) and an error message when it failed."""
        listing = "\n".join(f"- {name}: {descriptions.get(name) or name}" for name in candidates)
        prompt = fill_prompt(self.llm_prompt, query=query, knowledge_bases=listing)
        try:
            reply = ask_chat_generator(self.chat_generator, prompt, deadline=deadline)
        except Exception as error:  # noqa: BLE001 - any generator failure falls back to the non-LLM result
            return [], f"{type(error).__name__}: {error}"
        chosen = parse_labels(reply, candidates)[: self.max_kbs]
        return chosen, None if chosen else f"unparseable reply {reply[:200]!r}"

    def _descriptions(self, tenant: str | None, tiers: "_Tiers") -> dict[str, str]:
        """What each readable KB is about: its entry's description, else the one its profile derived."""
        derived = {p.kb: p.description for p in self._profiles.readable(tenant, include_public=self.include_public)} \
            if self._profiles is not None else {}
        return {**derived, **{kb["name"]: kb["description"] or ", ".join(kb["keywords"]) for kb in tiers.kbs}}

    def _routed(  # noqa: PLR0913
        self,
        state: State,
        started: float,
        kbs: list[str],
        reason: str,
        scores: dict[str, float],
        tiers: "_Tiers",
        pending: dict[str, Any] | None = None,
    ) -> dict[str, State]:
        thresholds = {kb["name"]: kb["threshold"] for kb in tiers.kbs}

        def threshold(names: list[str]) -> float:
            return min([thresholds.get(name, self.default_threshold) for name in names] or [self.default_threshold])

        if pending is not None:  # the search's first attempt chooses among pending["candidates"] (KBEvidence)
            pending = {**pending, "margin": self.evidence["margin"], "max_kbs": self.max_kbs,
                       "thresholds": {name: threshold([name]) for name in pending["candidates"]},
                       "default": {"kbs": list(kbs), "reason": reason, "threshold": threshold(kbs)}}
            kbs = list(pending["candidates"])
        new_state = advance(
            state,
            stage="kb_router",
            started=started,
            steps=[] if pending is not None else [f"route_to_{'+'.join(kbs) or 'all'}"],
            kbs=list(kbs),
            threshold=threshold(kbs),
            route_scores=scores,
            route_evidence={},
            route_reason="evidence" if pending is not None else reason,
            route_pending=pending,
        )
        return {"routed": new_state}

    @component.output_types(routed=State, unknown_kb=State)
    def run(self, state: State, deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Route the query of `state` to knowledge bases.

        :param state: The request state (see `gatehouse.components.state`); reads `query`, `kb`, `tenant`, `mode` and
            `plan`.
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM tier's calls fit in it).
        :returns: `{"routed": state}` with `kbs`, `threshold` (the lowest of the chosen KBs), `route_scores` (per
            candidate KB), `route_reason` (explicit, only, keywords, embedding, combined, low_confidence, evidence or
            llm) and `route_pending` (when the evidence decides: the candidate KBs searched and how to choose among
            them; else None); or `{"unknown_kb": state}` with status `error` when `state["kb"]` names a KB that has no
            entry and holds no document the caller may read. A constrained-context request (with `kbs` empty) and a
            plan go on `routed` unrouted.
        """
        if state.get("mode") == "constrained-context":
            return {"routed": advance(state, kbs=[])}
        if state.get("plan"):
            return {"routed": state}
        started = time.perf_counter()
        tenant = state.get("tenant")
        tiers = self.entries(tenant)
        declared, undeclared = self.candidates(tenant, tiers.names)
        requested = state.get("kb")
        if requested:
            known = tiers.names + undeclared
            wanted = [requested] if isinstance(requested, str) else [str(item) for item in requested]
            wanted = [name.strip() for item in wanted for name in item.split(",") if name.strip()]
            unknown = [name for name in wanted if name not in known]
            if unknown:
                message = (
                    f"Unknown knowledge base {', '.join(repr(name) for name in unknown)}. "
                    f"Known knowledge bases: {', '.join(known) or 'none'}."
                )
                new_state = advance(
                    state, stage="kb_router", started=started, steps=["unknown_kb"], kbs=[], status="error",
                    error_message=message,
                )
                return {"unknown_kb": new_state}
            wanted = list(dict.fromkeys(wanted))
            return self._routed(state, started, wanted, "explicit", {name: 1.0 for name in wanted}, tiers)
        if len(declared) + len(undeclared) <= 1:
            only = declared + undeclared
            return self._routed(state, started, only, "only", {name: 1.0 for name in only}, tiers)

        query = normalize_text(str(state.get("query") or ""))
        all_scores, tier = self.score(query, tiers)
        scores = {name: value for name, value in all_scores.items() if name in declared}
        names = list(scores)
        kbs, low_confidence = self._choose(scores) if scores else (undeclared[: self.max_kbs], True)
        reason = "low_confidence" if low_confidence else tier
        warnings: list[str] = []
        lead = scores[names[0]] - scores[names[1]] if len(names) > 1 else 1.0
        # The KBs the tiers cannot tell apart (all when none scores well) and those without an entry to score.
        close_scores = [name for name in names if scores[names[0]] - scores[name] < self.evidence["lead_below"]]
        searchable = (declared if low_confidence else close_scores) + undeclared
        unsure = low_confidence or lead < self.evidence["lead_below"] or bool(undeclared)
        if self.evidence["enabled"] and query and len(searchable) > 1 and unsure:
            return self._routed(state, started, kbs, reason, scores, tiers, pending={"candidates": searchable})
        if self.chat_generator is not None and (low_confidence or lead < self.llm_margin):
            chosen, error = self._ask_llm(query, declared + undeclared, self._descriptions(tenant, tiers), deadline)
            if error:
                warnings.append(f"kb_router: LLM tier failed ({error}); used the non-LLM routing")
            else:
                kbs, reason = chosen, "llm"
        if low_confidence and reason == "low_confidence" and names:
            warnings.append(
                f"kb_router: no knowledge base scored {self.min_route_score} or more "
                f"(best {names[0]} {scores[names[0]]:.2f}); searching {', '.join(kbs)}"
            )
        result = self._routed(state, started, kbs, reason, scores, tiers)
        if warnings:
            result["routed"] = with_validation(result["routed"], "confidence_warnings", *warnings)
        return result
