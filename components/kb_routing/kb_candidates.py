"""
The knowledge bases a caller's question may be routed to (plain Python, not a component): those holding documents
the caller may read, from the catalogue store's (tenant, kb) document counts, and the entries they are scored with:
`KBRouter`'s `knowledge_bases`, then the entries stored with the caller's readable KBs' profiles (`kb.yml`).

Usage:
```python
from gatehouse.components.retrievers.tenant_filter import TenantFilter
from gatehouse.components.kb_routing.kb_candidates import KBCandidates
from gatehouse.components.kb_routing.kb_router_settings import SCORING_DEFAULTS
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

kbs = KBCandidates([{"name": "faq", "description": "accounts and billing"}], SCORING_DEFAULTS, 0.5,
                   LexicalDocumentStore(), TenantFilter())
tiers = kbs.entries("acme")                 # faq's entry, then those stored with acme's and the public KBs
declared, undeclared = kbs.candidates("acme", tiers.names)   # the KBs holding documents acme may read: with an entry,
                                                             # and without one
```
"""

import json
from typing import Any

from gatehouse.components.kb_profile import KBProfiles
from gatehouse.components.retrievers.tenant_filter import TenantFilter
from gatehouse.components.kb_routing.kb_entries import check_entries
from gatehouse.components.kb_routing.kb_tiers import KBTiers
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore


class KBCandidates:
    """The candidate KBs of a caller and the tiers of their entries (those stored with profiles built once per set)."""

    def __init__(
        self,
        knowledge_bases: list[dict[str, Any]],
        scoring: dict[str, Any],
        default_threshold: float,
        catalogue_store: LexicalDocumentStore | None,
        tenant_filter: TenantFilter,
    ) -> None:
        """
        :param knowledge_bases: The declared entries (checked here, `kb_entries.check_entries`).
        :param scoring: The complete `scoring` settings the entries are scored with.
        :param default_threshold: The threshold of an entry that names none.
        :param catalogue_store: The store of the (tenant, kb) document counts and the profiles; None: only the
            declared entries, every one a candidate.
        :param tenant_filter: The tenants a caller may read (its `include_public` also applies to the profiles).
        :raises ValueError: If an entry is malformed.
        """
        self.static = KBTiers.build(check_entries(knowledge_bases, default_threshold), scoring)
        self.default_threshold = default_threshold
        self.catalogue_store = catalogue_store
        self.tenant_filter = tenant_filter
        self._profiles = KBProfiles(catalogue_store) if catalogue_store is not None else None
        self._dynamic: dict[str, KBTiers] = {}

    def entries(self, tenant: str | None) -> KBTiers:
        """
        The KB entries a caller's question is scored against: the declared ones, then the entries of the caller's
        readable KBs that bring their own (`kb.yml`, stored at ingest) and are not declared.
        """
        if self._profiles is None:
            return self.static
        own = [profile for profile in self._profiles.readable(tenant, include_public=self.tenant_filter.include_public)
               if profile.entry and profile.kb not in self.static.names]
        if not own:
            return self.static
        key = json.dumps([[profile.kb, profile.entry] for profile in own], sort_keys=True)
        if key not in self._dynamic:
            extra = check_entries([{**profile.entry, "name": profile.kb} for profile in own], self.default_threshold)
            if len(self._dynamic) > 64:
                self._dynamic.clear()
            self._dynamic[key] = KBTiers.build(self.static.kbs + extra, self.static.scoring)
        return self._dynamic[key]

    def candidates(self, tenant: str | None, names: list[str] | None = None) -> tuple[list[str], list[str]]:
        """
        The knowledge bases a caller's query may be routed to, from the catalogue store's document counts.

        :param tenant: The caller's tenant (None: the tenant filter's `default_tenant`).
        :param names: The KBs with an entry (`entries(tenant).names`); None: the declared ones.
        :returns: `(KBs with an entry holding documents the caller may read, in entry order — all of them when there
            is no catalogue store or none holds any; KBs without an entry holding documents the caller may read)`.
        """
        names = self.static.names if names is None else names
        if self.catalogue_store is None:
            return list(names), []
        readable = self.tenant_filter.tenants(tenant)
        counts = {key: count for key, count in self.catalogue_store.metadata_counts(["tenant", "kb"]).items() if count}
        held = {kb for owner, kb in counts if owner in readable}
        declared = [name for name in names if name in held]
        undeclared = sorted(name for name in held - set(names) if name)
        return declared or ([] if undeclared else list(names)), undeclared

    def descriptions(self, tenant: str | None, tiers: KBTiers) -> dict[str, str]:
        """What each readable KB is about: its entry's description (else keywords), else the one its profile derived."""
        derived = {p.kb: p.description
                   for p in self._profiles.readable(tenant, include_public=self.tenant_filter.include_public)} \
            if self._profiles is not None else {}
        return {**derived, **{kb["name"]: kb["description"] or ", ".join(kb["keywords"]) for kb in tiers.kbs}}
