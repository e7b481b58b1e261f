import pytest

from components.tenant_filter import TenantFilter

PUBLIC = {"field": "meta.tenant", "operator": "==", "value": "public"}


def test_init():
    assert TenantFilter().default_tenant == "public"
    assert TenantFilter(default_tenant="shared").default_tenant == "shared"


def test_to_dict():
    assert TenantFilter(default_tenant="shared").to_dict() == {
        "type": "components.tenant_filter.TenantFilter",
        "init_parameters": {"default_tenant": "shared"},
    }


def test_from_dict():
    assert TenantFilter.from_dict(TenantFilter(default_tenant="x").to_dict()).default_tenant == "x"


def test_run_tenant_pinned():
    out = TenantFilter().run(tenant="globex")["filters"]
    assert out == {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "globex"}]}


@pytest.mark.parametrize("tenant", [None, "", "   "])
def test_run_missing_tenant_is_public(tenant):
    assert TenantFilter().run(tenant=tenant)["filters"] == {"operator": "AND", "conditions": [PUBLIC]}


def test_run_default_tenant_configurable():
    out = TenantFilter(default_tenant="shared").run()["filters"]
    assert out["conditions"][0]["value"] == "shared"


def test_run_tenant_stripped_and_unicode():
    assert TenantFilter().run(tenant="  acme ")["filters"]["conditions"][0]["value"] == "acme"
    assert TenantFilter().run(tenant="müller")["filters"]["conditions"][0]["value"] == "müller"


def test_run_kbs_condition():
    out = TenantFilter().run(tenant="acme", kbs=("faq", "billing"))["filters"]
    assert out["conditions"][1] == {"field": "meta.kb", "operator": "in", "value": ["faq", "billing"]}
    assert len(TenantFilter().run(tenant="acme", kbs=[])["filters"]["conditions"]) == 1


def test_run_extra_filters_and_ed():
    extra = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": "other"},  # cannot widen the tenant
            {"field": "meta.lang", "operator": "==", "value": "en"},
        ],
    }
    out = TenantFilter().run(tenant=None, kbs=["faq"], filters=extra)["filters"]
    assert out["operator"] == "AND"
    assert out["conditions"] == [PUBLIC, {"field": "meta.kb", "operator": "in", "value": ["faq"]}, extra]


def test_run_filters_apply_to_documents():
    from haystack import Document
    from haystack.utils.filters import document_matches_filter

    f = TenantFilter().run(
        tenant="acme",
        filters={"operator": "OR", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "other"}]},
    )["filters"]
    assert not document_matches_filter(f, Document(content="x", meta={"tenant": "other"}))
    f = TenantFilter().run(tenant="acme", kbs=["faq"])["filters"]
    assert document_matches_filter(f, Document(content="x", meta={"tenant": "acme", "kb": "faq"}))
    assert not document_matches_filter(f, Document(content="x", meta={"tenant": "acme", "kb": "hr"}))


@pytest.mark.parametrize("tenant", [123, ["acme"], {"t": 1}])
def test_run_non_string_tenant(tenant):
    with pytest.raises(ValueError, match="tenant must be a string"):
        TenantFilter().run(tenant=tenant)
