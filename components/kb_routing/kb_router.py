"""
The knowledge-base router: picks the knowledge base(s) to search for a query and builds the retrieval filters. Its
helpers: `kb_entries` (the entries checked), `kb_router_settings` (the `scoring`, `evidence` and `llm` groups),
`kb_tiers` (the tiers that score the entries) and `kb_candidates` (the KBs a caller may be routed to).
"""

import time
from copy import deepcopy
from typing import Any, ClassVar

from haystack import component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.setting_groups import MovedSettings
from gatehouse.components.state import PUBLIC_TENANT, State, advance, with_validation
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.components.retrievers.tenant_filter import TenantFilter
from gatehouse.components.kb_routing.kb_candidates import KBCandidates
from gatehouse.components.kb_routing.kb_router_settings import MOVED_SETTINGS, check_settings
from gatehouse.components.kb_routing.kb_tiers import KBTiers
from gatehouse.components.tiered_classifier import fill_prompt, normalize_text, parse_labels

@component
class KBRouter(MovedSettings, ChatGeneratorSerialization):
    """
    Routes a query to one or two knowledge bases and emits the retrieval filters, always scoped to the tenant.

    Knowledge bases are declared in `knowledge_bases` (adding one is a YAML edit). Each KB is scored in tiers
    (`kb_tiers`, with the `scoring` settings):

    1. lexical: its `keywords` (1 hit each) and regular expression `patterns` (`scoring.pattern_weight` hits each);
       the lexical score of a KB is `hits / (hits + scoring.keyword_saturation)`;
    2. embedding: the mean of the `scoring.embedding_top_k` highest cosine similarities of the query to the KB's
       description and examples (embedded once per instance);
    3. the two are combined into one score per KB (`scoring.keyword_weight`, `scoring.embedding_weight`; the
       embedding score alone when no keyword matched), and the best KB wins. KBs within `dual_route_margin` of the
       best are added, up to `max_kbs`. When the best score is below `scoring.min_route_score` the top `max_kbs` KBs
       are searched;
    4. evidence (`evidence.enabled`): when the tiers above are unsure (best score below `scoring.min_route_score` or a
       lead below `evidence.lead_below`), the router does not choose: it routes to the candidate KBs (those scoring
       within `lead_below` of the best, every declared one when none scores well, and undeclared KBs holding the
       caller's documents) and leaves the choice to the search's first attempt (`route_pending`): `KBEvidence` keeps
       the KB holding the best-scoring document and those whose best document scores within `evidence.margin` of it,
       up to `max_kbs`, or this routing's own choice when nothing was found;
    5. optional LLM (`chat_generator`): asked when the result is still ambiguous (lead below `llm.margin` or a low
       score) and the evidence is not asked; a failed or unparseable answer keeps the non-LLM result.

    Tenants: a caller reads its own documents and, with `include_public`, the public ones (the same rule as
    `TenantFilter`; keep `include_public` in step with `retrieve.yml`). With a `catalogue_store` (the lexical store),
    only the declared KBs that hold documents the caller may read are candidates, from a (tenant, kb) document count
    that the store caches until its next write (`kb_candidates`). A KB the YAML does not declare but that holds the
    caller's own (non-public) documents is a candidate of the evidence tier only (nothing else can score it), which
    then always runs; it can also be named explicitly. Without a catalogue store every declared KB is a candidate.

    An explicit `state["kb"]` bypasses the scoring; an unknown one goes out on `unknown_kb` with an error. A request
    that reads only the caller's context (mode `constrained-context`) reads no KB, and a multi-part plan's parts are
    searched in every KB the caller may read (or its explicit `kb`): both go on unrouted.

    Usage example:
    ```python
    from gatehouse.components.kb_routing.kb_router import KBRouter
    from gatehouse.components.state import new_state

    router = KBRouter(knowledge_bases=[
        {"name": "faq", "description": "accounts, passwords, billing, API keys", "keywords": ["api key", "refund*"],
         "examples": ["How do I reset my password?"], "threshold": 0.6},
        {"name": "ops", "description": "deployment, docker, monitoring, backups", "keywords": ["docker"],
         "examples": ["How do I back up the gateway?"], "threshold": 0.55},
    ], scoring={"keyword_weight": 0.4})
    result = router.run(state=new_state("How do I rotate an API key?", tenant="acme"))
    assert result["routed"]["kbs"] == ["faq"]

    # Tenant-aware, with the evidence tier (needs the stores ingested, e.g. by `gatehouse ingest`):
    router = KBRouter(knowledge_bases=[...], catalogue_store=LexicalDocumentStore(),
                      evidence={"enabled": True, "margin": 0.05})
    ```
    """

    moved_settings: ClassVar[dict[str, str]] = MOVED_SETTINGS

    def __init__(  # noqa: PLR0913
        self,
        *,
        knowledge_bases: list[dict[str, Any]] | None = None,
        scoring: dict[str, Any] | None = None,
        dual_route_margin: float = 0.05,
        max_kbs: int = 2,
        default_threshold: float = 0.5,
        default_tenant: str = PUBLIC_TENANT,
        include_public: bool = True,
        catalogue_store: LexicalDocumentStore | None = None,
        evidence: dict[str, Any] | None = None,
        chat_generator: Any = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        """
        :param knowledge_bases: Entries by name: `name`, `description`, `keywords`, `examples`, `patterns`, `threshold`.
        :param scoring: How the entries are scored (keys and defaults: `kb_router_settings.SCORING_DEFAULTS`).
        :param dual_route_margin: KBs whose score is within this margin of the best one are searched too.
        :param max_kbs: The most KBs a query is routed to.
        :param default_threshold: The retrieval quality threshold of a KB whose entry names none.
        :param default_tenant: Tenant used in the filters when the state names none.
        :param include_public: Whether a tenant also reads the public tenant's documents (as `TenantFilter`).
        :param catalogue_store: Store whose (tenant, kb) document counts restrict the candidates; None: every entry.
        :param evidence: The evidence tier (keys and defaults: `kb_router_settings.EVIDENCE_DEFAULTS`).
        :param chat_generator: Optional Haystack chat generator for the LLM tier; None disables the tier.
        :param llm: The LLM tier's `margin` and `prompt` (defaults: `kb_router_settings.LLM_DEFAULTS`).
        :raises ValueError: If `knowledge_bases` is malformed, a group has no such setting or a number is out of range.
        """
        self.knowledge_bases = deepcopy(knowledge_bases) if knowledge_bases is not None else []
        self.scoring, self.evidence, self.llm = check_settings(scoring, evidence, llm, max_kbs=max_kbs)
        self.dual_route_margin = float(dual_route_margin)
        self.max_kbs = int(max_kbs)
        self.default_threshold = float(default_threshold)
        self.default_tenant = default_tenant
        self.include_public = bool(include_public)
        self.catalogue_store = catalogue_store
        self.chat_generator = chat_generator
        self._candidates = KBCandidates(self.knowledge_bases, self.scoring, self.default_threshold, catalogue_store,
                                        TenantFilter(default_tenant=default_tenant, include_public=self.include_public))

    @property
    def names(self) -> list[str]:
        """The declared KBs' names, in order."""
        return self._candidates.static.names

    def entries(self, tenant: str | None) -> KBTiers:
        """
        The KB entries a caller's question is scored against: the YAML's `knowledge_bases`, then the entries of the
        caller's readable KBs that bring their own (`kb.yml`, stored at ingest) and are not in the YAML.
        """
        return self._candidates.entries(tenant)

    def warm_up(self) -> None:
        """
        Load the embedding model, embed the KB descriptions and examples once, warm up the chat generator.
        """
        self._candidates.static.index.warm_up()
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def score(self, query: str, tiers: KBTiers | None = None) -> tuple[dict[str, float], str]:
        """
        Score every knowledge base with an entry for a query.

        :param query: The query.
        :param tiers: The entries to score (`entries(tenant)`); None: the YAML's.
        :returns: `(score per KB, best first; the tier that drove the scores: keywords, embedding or combined)`.
        """
        return (tiers or self._candidates.static).score(query)

    def candidates(self, tenant: str | None, names: list[str] | None = None) -> tuple[list[str], list[str]]:
        """
        The knowledge bases a caller's query may be routed to, from the catalogue store's document counts.

        :param tenant: The caller's tenant (None: `default_tenant`).
        :param names: The KBs with an entry (`entries(tenant).names`); None: the YAML's.
        :returns: `(KBs with an entry holding documents the caller may read, in entry order — all of them when there
            is no catalogue store or none holds any; KBs without an entry holding documents the caller may read)`.
        """
        return self._candidates.candidates(tenant, names)

    def _choose(self, scores: dict[str, float]) -> tuple[list[str], bool]:
        """The KBs to search given the scores (best first) and whether the choice is low-confidence."""
        names = list(scores)
        best = scores[names[0]]
        if best < self.scoring["min_route_score"]:
            return names[: self.max_kbs], True
        chosen = [name for name in names if best - scores[name] < self.dual_route_margin]
        return chosen[: self.max_kbs], False

    def _ask_llm(self, query: str, candidates: list[str], descriptions: dict[str, str],
                 deadline: float | None) -> tuple[list[str], str | None]:
        """The candidate KBs chosen by the chat generator (best first) and an error message when it failed."""
        listing = "\n".join(f"- {name}: {descriptions.get(name) or name}" for name in candidates)
        prompt = fill_prompt(self.llm["prompt"], query=query, knowledge_bases=listing)
        try:
            reply = ask_chat_generator(self.chat_generator, prompt, deadline=deadline)
        except Exception as error:  # noqa: BLE001 - any generator failure falls back to the non-LLM result
            return [], f"{type(error).__name__}: {error}"
        chosen = parse_labels(reply, candidates)[: self.max_kbs]
        return chosen, None if chosen else f"unparseable reply {reply[:200]!r}"

    def _routed(  # noqa: PLR0913
        self,
        state: State,
        started: float,
        kbs: list[str],
        reason: str,
        scores: dict[str, float],
        tiers: KBTiers,
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
        if self.chat_generator is not None and (low_confidence or lead < self.llm["margin"]):
            chosen, error = self._ask_llm(query, declared + undeclared, self._candidates.descriptions(tenant, tiers),
                                          deadline)
            if error:
                warnings.append(f"kb_router: LLM tier failed ({error}); used the non-LLM routing")
            else:
                kbs, reason = chosen, "llm"
        if low_confidence and reason == "low_confidence" and names:
            warnings.append(
                f"kb_router: no knowledge base scored {self.scoring['min_route_score']} or more "
                f"(best {names[0]} {scores[names[0]]:.2f}); searching {', '.join(kbs)}"
            )
        result = self._routed(state, started, kbs, reason, scores, tiers)
        if warnings:
            result["routed"] = with_validation(result["routed"], "confidence_warnings", *warnings)
        return result
