"""Builds the retrieval filters; every filter it emits pins the set of tenants the caller may read."""

from typing import Any

from haystack import component

from gatehouse.components.state import PUBLIC_TENANT


@component
class TenantFilter:
    """
    Combines the tenant, the knowledge bases and any caller filters into one Haystack filter.

    The tenant condition is always present and names the tenants explicitly: the caller's own and, with
    `include_public`, the public tenant (`gatehouse.components.state.PUBLIC_TENANT`). A request without a tenant sees only the
    default (public) tenant. The caller's own filters are AND-ed after it, so no retrieval can reach another
    tenant's documents whatever they say.

    Usage:
    ```python
    from gatehouse.components.retrievers.tenant_filter import TenantFilter

    filters = TenantFilter().run(tenant="acme", kbs=["faq"])["filters"]
    # {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "in", "value": ["acme", "public"]},
    #                                    {"field": "meta.kb", "operator": "in", "value": ["faq"]}]}
    TenantFilter(include_public=False).tenants("acme")   # ["acme"]
    ```
    """

    def __init__(self, *, default_tenant: str = PUBLIC_TENANT, include_public: bool = True) -> None:
        """
        :param default_tenant: The tenant of requests that name none.
        :param include_public: Whether a tenant also sees the public tenant's documents (the shared documentation).
        """
        self.default_tenant = default_tenant
        self.include_public = include_public

    def tenants(self, tenant: str | None) -> list[str]:
        """
        The tenants a caller may read: its own (the default one when it names none), then the public one.

        :param tenant: The caller's tenant; None or blank means `default_tenant`.
        :returns: The tenant names, without duplicates.
        :raises ValueError: If `tenant` is not a plain string.
        """
        if tenant is not None and not isinstance(tenant, str):
            raise ValueError("tenant must be a string.")
        own = (tenant or "").strip() or self.default_tenant
        return list(dict.fromkeys([own, PUBLIC_TENANT] if self.include_public else [own]))

    @component.output_types(filters=dict[str, Any])
    def run(
        self, tenant: str | None = None, kbs: list[str] | None = None, filters: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """
        Build the filters.

        :param tenant: The caller's tenant; None or empty means the default (public) tenant.
        :param kbs: Knowledge bases to search; None or empty searches all of the tenant's.
        :param filters: Extra Haystack filters, AND-ed with the tenant condition.
        :returns: `filters`.
        :raises ValueError: If `tenant` is not a plain string.
        """
        if isinstance(kbs, str):
            kbs = [kbs]
        conditions: list[dict[str, Any]] = [{"field": "meta.tenant", "operator": "in", "value": self.tenants(tenant)}]
        if kbs:
            conditions.append({"field": "meta.kb", "operator": "in", "value": list(kbs)})
        if filters:
            conditions.append(filters)
        return {"filters": {"operator": "AND", "conditions": conditions}}
