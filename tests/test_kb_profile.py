import json

import pytest
from haystack import Document

from gatehouse.components.kb_profile import KBProfiles, build_profile, check_entry, find_abbreviations
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore


def chunk(doc: str, text: str, *, kb: str = "handbook", tenant: str = "public", section: str | None = None,
          title: str | None = None) -> Document:
    return Document(id=f"{tenant}/{kb}/{doc}/{section}/{hash(text)}", content=text,
                    meta={"doc_id": f"{tenant}/{kb}/{doc}", "kb": kb, "tenant": tenant, "title": title or doc,
                          "section": section, "heading_path": [h for h in [section] if h]})


CHUNKS = [
    chunk("leave.md", "Annual leave accrues every pay period. Paid time off (PTO) needs approval.",
          section="Accrual", title="Leave"),
    chunk("leave.md", "Sick leave can be used for medical appointments.", section="Sick leave", title="Leave"),
    chunk("travel.md", "Book travel through the travel system. Per diem covers meals.", section="Booking",
          title="Travel"),
]


@pytest.fixture
def store(tmp_path, monkeypatch) -> LexicalDocumentStore:
    monkeypatch.delenv("GATEHOUSE_ELASTICSEARCH_URL", raising=False)
    lexical = LexicalDocumentStore(local={"path": str(tmp_path / "store")})
    lexical.write_documents(CHUNKS)
    return lexical


def test_find_abbreviations_both_ways():
    text = "Limits are in requests per minute (RPM). SSO (single sign-on) is optional. The (Note) is not one."
    assert find_abbreviations(text) == {"RPM": "requests per minute", "SSO": "single sign-on"}


def test_build_profile_vocabulary_titles_headings_description():
    profile = build_profile("public", "handbook", CHUNKS, generation=7)
    assert profile.documents == 2 and profile.chunks == 3 and profile.generation == 7
    assert profile.df("leav") == 1 and profile.df("travel") == 1 and profile.df("the") == 0
    assert profile.titles == ["Leave", "Travel"]
    assert profile.headings == ["Accrual", "Sick leave", "Booking"]
    assert profile.abbreviations == {"PTO": "Paid time off"}
    assert profile.description == "handbook: 2 documents on Leave; Travel"
    assert {"accrual", "sick", "leav", "travel"} <= profile.heading_terms()


def test_check_entry():
    assert check_entry({"description": "Leave", "keywords": ["pto"], "threshold": 0.5}, where="kb.yml")["threshold"] == 0.5
    with pytest.raises(ValueError, match="unknown keys"):
        check_entry({"descripton": "typo"}, where="kb.yml")
    with pytest.raises(ValueError, match="threshold"):
        check_entry({"threshold": 2}, where="kb.yml")
    with pytest.raises(ValueError, match="keywords"):
        check_entry({"keywords": "leave"}, where="kb.yml")


def test_profiles_are_stored_and_built_again_when_the_kb_changes(store, tmp_path):
    profiles = KBProfiles(store, folder=tmp_path / "profiles")
    first = profiles.get("public", "handbook")
    saved = json.loads((tmp_path / "profiles" / "public" / "handbook.json").read_text())
    assert saved["generation"] == first.generation and saved["documents"] == 2
    assert KBProfiles(store, folder=tmp_path / "profiles").get("public", "handbook").vocabulary == first.vocabulary
    store.write_documents([chunk("badges.md", "Badges are issued at the front desk.", section="Badges")])
    again = profiles.get("public", "handbook")
    assert again.generation != first.generation and again.documents == 3 and again.df("badg") == 1


def test_readable_profiles_per_tenant_and_entries(store, tmp_path):
    store.write_documents([chunk("contract.md", "Our private terms.", kb="terms", tenant="acme")])
    profiles = KBProfiles(store, folder=tmp_path / "profiles")
    assert [p.kb for p in profiles.readable("acme")] == ["terms", "handbook"]
    assert [p.kb for p in profiles.readable("other")] == ["handbook"]
    assert [p.kb for p in profiles.readable("acme", include_public=False)] == ["terms"]
    profiles.set_entry("public", "handbook", {"description": "Staff handbook", "keywords": ["leave"]})
    assert profiles.get("public", "handbook").entry == {"description": "Staff handbook", "keywords": ["leave"]}
    profiles.set_entry("public", "handbook", None)
    assert profiles.get("public", "handbook").entry is None
