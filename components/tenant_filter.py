"""Builds the retrieval filters; every filter it emits pins one tenant."""

from typing import Any

from haystack import component, default_from_dict, default_to_dict

from components.state import PUBLIC_TENANT


@component
class TenantFilter:
    """
    Combines the tenant, the knowledge bases and any caller filters into one Haystack filter.

    The tenant condition is always present: a request without a tenant sees only the public tenant, so no
    retrieval can cross tenants whatever the caller's own filters say.

    Usage:
    ```python
    from components.tenant_filter import TenantFilter

    filters = TenantFilter().run(tenant="globex", kbs=["faq"])["filters"]
    # {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "globex"},
    #                                    {"field": "meta.kb", "operator": "in", "value": ["faq"]}]}
    ```
    """

    def __init__(self, *, default_tenant: str = PUBLIC_TENANT) -> None:
        """
        :param default_tenant: The tenant of requests that name none.
        """
        self.default_tenant = default_tenant

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
        if tenant is not None and not isinstance(tenant, str):
            raise ValueError("tenant must be a string.")
        if isinstance(kbs, str):
            kbs = [kbs]
        conditions: list[dict[str, Any]] = [
            {"field": "meta.tenant", "operator": "==", "value": (tenant or "").strip() or self.default_tenant}
        ]
        if kbs:
            conditions.append({"field": "meta.kb", "operator": "in", "value": list(kbs)})
        if filters:
            conditions.append(filters)
        return {"filters": {"operator": "AND", "conditions": conditions}}

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(self, default_tenant=self.default_tenant)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TenantFilter":
        """Deserialise the component."""
        return default_from_dict(cls, data)
