import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.utils.filters import document_matches_filter

from gatehouse.components.retrievers.tenant_filter import TenantFilter

PUBLIC = {"field": "meta.tenant", "operator": "in", "value": ["public"]}
GLOBEX_AND_PUBLIC = {"field": "meta.tenant", "operator": "in", "value": ["globex", "public"]}


def test_init():
    assert TenantFilter().default_tenant == "public"
    assert TenantFilter().include_public is True
    component = TenantFilter(default_tenant="shared", include_public=False)
    assert component.default_tenant == "shared"
    assert component.include_public is False


def test_to_dict():
    assert component_to_dict(TenantFilter(default_tenant="shared", include_public=False), "component") == {
        "type": "gatehouse.components.retrievers.tenant_filter.TenantFilter",
        "init_parameters": {"default_tenant": "shared", "include_public": False},
    }
    assert component_to_dict(TenantFilter(), "component")["init_parameters"] == {
        "default_tenant": "public",
        "include_public": True,
    }


def test_from_dict():
    restored = component_from_dict(TenantFilter, component_to_dict(TenantFilter(default_tenant="x", include_public=False), "component"), "component")
    assert restored.default_tenant == "x" and restored.include_public is False
    minimal = component_from_dict(TenantFilter, {"type": "gatehouse.components.retrievers.tenant_filter.TenantFilter", "init_parameters": {}}, "component")
    assert minimal.include_public is True


def test_run_tenant_sees_own_and_public():
    out = TenantFilter().run(tenant="globex")["filters"]
    assert out == {"operator": "AND", "conditions": [GLOBEX_AND_PUBLIC]}


def test_run_without_public():
    out = TenantFilter(include_public=False).run(tenant="globex")["filters"]
    assert out == {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "in", "value": ["globex"]}]}


@pytest.mark.parametrize("tenant", [None, "", "   ", "public"])
def test_run_missing_or_public_tenant_is_public_only(tenant):
    assert TenantFilter().run(tenant=tenant)["filters"] == {"operator": "AND", "conditions": [PUBLIC]}


def test_run_default_tenant_configurable():
    assert TenantFilter(default_tenant="shared").run()["filters"]["conditions"][0]["value"] == ["shared", "public"]
    assert TenantFilter(default_tenant="shared", include_public=False).tenants(None) == ["shared"]


def test_run_tenant_stripped_and_unicode():
    assert TenantFilter().run(tenant="  acme ")["filters"]["conditions"][0]["value"] == ["acme", "public"]
    assert TenantFilter().run(tenant="müller")["filters"]["conditions"][0]["value"] == ["müller", "public"]


def test_run_kbs_condition():
    out = TenantFilter().run(tenant="acme", kbs=("faq", "billing"))["filters"]
    assert out["conditions"][1] == {"field": "meta.kb", "operator": "in", "value": ["faq", "billing"]}
    assert len(TenantFilter().run(tenant="acme", kbs=[])["filters"]["conditions"]) == 1


def test_run_extra_filters_and_ed():
    extra = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": "other"},  # cannot widen the tenant set
            {"field": "meta.lang", "operator": "==", "value": "en"},
        ],
    }
    out = TenantFilter().run(tenant=None, kbs=["faq"], filters=extra)["filters"]
    assert out["operator"] == "AND"
    assert out["conditions"] == [PUBLIC, {"field": "meta.kb", "operator": "in", "value": ["faq"]}, extra]


def test_run_filters_apply_to_documents():
    def visible(filters, tenant, kb="faq"):
        return document_matches_filter(filters, Document(content="x", meta={"tenant": tenant, "kb": kb}))

    widening = {"operator": "OR", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "other"}]}
    f = TenantFilter().run(tenant="acme", filters=widening)["filters"]
    assert not visible(f, "other")
    f = TenantFilter().run(tenant="acme", kbs=["faq"])["filters"]
    assert visible(f, "acme") and visible(f, "public")
    assert not visible(f, "other") and not visible(f, "acme", kb="hr")
    f = TenantFilter(include_public=False).run(tenant="acme")["filters"]
    assert visible(f, "acme") and not visible(f, "public")
    f = TenantFilter().run()["filters"]
    assert visible(f, "public") and not visible(f, "acme")


@pytest.mark.parametrize("tenant", [123, ["acme"], {"t": 1}])
def test_run_non_string_tenant(tenant):
    with pytest.raises(ValueError, match="tenant must be a string"):
        TenantFilter().run(tenant=tenant)
