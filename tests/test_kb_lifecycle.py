"""
Knowledge-base lifecycle over real parts (MiniLM, a Qdrant local store and the BM25 store in a temporary data
directory, or a PostgreSQL database; the real `retrieve.yml`): `kb list` counts, `kb delete` and `ingest --prune`
remove documents from both stores so that nothing of them is retrievable while other knowledge bases and tenants stay
untouched — in the library, through the `gatehouse` command and over REST.
"""

import json
import os
from pathlib import Path

import httpx
import pytest
import yaml
from server_process import running_server

from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
from gatehouse.settings import bundled_dir
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore
from gatehouse.cli import main
from gatehouse.ingest import format_summary, ingest, path_groups
from gatehouse.knowledge_bases import KnowledgeBase, KnowledgeBaseCatalogue, KnowledgeBaseNotFoundError
from gatehouse.pipelines import load_pipeline

PROJECT_ROOT = bundled_dir()  # the shipped pipelines, sample KBs and manifest

OFFICE = {
    "parking.md": "# Parking\n\nVisitors park on level two of the Zephyr garage.\n",
    "lunch.md": "# Lunch\n\nThe canteen serves quinoa bowls every Thursday.\n",
}
IT = {"wifi.md": "# Wifi\n\nThe guest wifi password rotates every Monday.\n"}
QUERIES = {"parking.md": "Where do visitors park in the Zephyr garage?", "lunch.md": "When are quinoa bowls served?",
           "wifi.md": "When does the guest wifi password rotate?"}
ADMIN_KEY, ACME_KEY, GLOBEX_KEY = "admin-secret-kb", "acme-secret-kb", "globex-secret-kb"


def write_folder(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A fresh data directory (stores) per test; the session's embedding cache stays shared."""
    monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture(params=["local", "postgres"])
def backend(request, monkeypatch):
    """The stores the pipelines open: the local shard, or a new PostgreSQL database (`GATEHOUSE_POSTGRES_URL`)."""
    if request.param == "postgres":
        monkeypatch.setenv("GATEHOUSE_POSTGRES_URL", request.getfixturevalue("postgres").new_database())
    return request.param


@pytest.fixture
def retrieve(data_dir):
    """The real retrieval pipeline over the test's stores, loaded (and its BM25 index built) before any deletion."""
    retrieval = RetrievalPipeline(pipeline_file="retrieve")
    retrieval.warm_up()
    return retrieval


def retrieved(retrieval, tenant: str) -> set[str]:
    """Every document id the real retrieval pipeline returns to `tenant` for any of the test questions."""
    return {doc.meta["doc_id"] for query in QUERIES.values()
            for doc in retrieval.run(query=query, tenant=tenant, top_k=50)["documents"]}


def catalogue() -> KnowledgeBaseCatalogue:
    return KnowledgeBaseCatalogue.from_index_pipeline(load_pipeline("index"))


def test_kb_delete_removes_one_tenants_kb_from_both_stores_and_nothing_else(tmp_path, backend, retrieve):
    office, it = write_folder(tmp_path / "office", OFFICE), write_folder(tmp_path / "it", IT)
    summary = ingest(path_groups([str(office)], "office", None) + path_groups([str(office)], "office", "acme")
                     + path_groups([str(it)], "it", None), progress=False)
    assert summary.failed == [] and summary.documents_written == 5
    router_view = LexicalDocumentStore()  # another store instance whose metadata counts are cached
    assert retrieved(retrieve, "public") == {"public/office/parking.md", "public/office/lunch.md", "public/it/wifi.md"}
    assert ("public", "office") in router_view.metadata_counts(["tenant", "kb"])
    kbs = catalogue()
    assert kbs.knowledge_bases() == [KnowledgeBase("acme", "office", 2, 2), KnowledgeBase("public", "it", 1, 1),
                                     KnowledgeBase("public", "office", 2, 2)]

    assert kbs.delete(kb="office", tenant="public") == KnowledgeBase("public", "office", 2, 2)

    gone = {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "public"},
                                              {"field": "meta.kb", "operator": "==", "value": "office"}]}
    assert kbs.dense_store.filter_documents(gone) == []
    assert kbs.lexical_store.filter_documents(gone) == []
    assert retrieved(retrieve, "public") == {"public/it/wifi.md"}
    assert retrieved(retrieve, "acme") == {"acme/office/parking.md", "acme/office/lunch.md", "public/it/wifi.md"}
    assert ("public", "office") not in router_view.metadata_counts(["tenant", "kb"])
    assert kbs.knowledge_bases() == [KnowledgeBase("acme", "office", 2, 2), KnowledgeBase("public", "it", 1, 1)]
    with pytest.raises(KnowledgeBaseNotFoundError, match="no knowledge base 'office' for tenant 'public'.*: it"):
        kbs.delete(kb="office", tenant="public")


def test_ingest_prune_removes_only_documents_whose_file_is_gone(tmp_path, backend, retrieve):
    office, it = write_folder(tmp_path / "office", OFFICE), write_folder(tmp_path / "it", IT)
    groups = path_groups([str(office)], "office", None) + path_groups([str(it)], "it", None)
    ingest(groups + path_groups([str(office)], "office", "acme"), progress=False)
    (office / "lunch.md").unlink()

    kept = ingest(groups, progress=False)
    assert kept.pruned is None and "pruned" not in kept.as_dict() and "pruned" not in format_summary(kept)
    assert "public/office/lunch.md" in retrieved(retrieve, "public")

    pruned = ingest(groups, progress=False, prune_missing=True)
    assert [document.doc_id for document in pruned.pruned] == ["public/office/lunch.md"]
    assert pruned.as_dict()["pruned"] == ["public/office/lunch.md"]
    assert "pruned: 1 documents\n  pruned public/office/lunch.md" in format_summary(pruned)
    assert retrieved(retrieve, "public") == {"public/office/parking.md", "public/it/wifi.md"}
    assert "acme/office/lunch.md" in retrieved(retrieve, "acme")  # another tenant's KB of that name is not pruned
    assert catalogue().knowledge_bases() == [KnowledgeBase("acme", "office", 2, 2), KnowledgeBase("public", "it", 1, 1),
                                             KnowledgeBase("public", "office", 1, 1)]
    assert ingest(groups, progress=False, prune_missing=True).pruned == []


def test_kb_commands(tmp_path, capsys, retrieve):
    office = write_folder(tmp_path / "office", OFFICE)
    assert main(["ingest", str(office), "--kb", "office", "--json"]) == 0
    assert main(["ingest", str(office), "--kb", "office", "--tenant", "acme", "--json"]) == 0
    capsys.readouterr()

    assert main(["kb", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"tenant": "acme", "kb": "office", "documents": 2, "chunks": 2},
        {"tenant": "public", "kb": "office", "documents": 2, "chunks": 2},
    ]
    (office / "parking.md").unlink()
    assert main(["ingest", str(office), "--kb", "office", "--prune"]) == 0
    assert "pruned: 1 documents\n  pruned public/office/parking.md" in capsys.readouterr().out
    assert main(["kb", "list", "--tenant", "public"]) == 0
    assert capsys.readouterr().out.split("\n")[1].split() == ["public", "office", "1", "1"]

    assert main(["kb", "delete", "office"]) == 0
    assert capsys.readouterr().out == "deleted knowledge base office of tenant public: 1 documents, 1 chunks\n"
    assert retrieved(retrieve, "public") == set()
    assert main(["kb", "delete", "office"]) == 2
    assert capsys.readouterr().err == (
        "gatehouse: no knowledge base 'office' for tenant 'public' (its knowledge bases: none)\n")
    assert main(["kb", "list"]) == 0
    assert capsys.readouterr().out.split("\n")[1].split() == ["acme", "office", "2", "2"]
    assert main(["kb", "delete", "office", "--tenant", "acme"]) == 0
    assert main(["kb", "list", "--json"]) == 0
    assert capsys.readouterr().out.endswith("[]\n")


# -- REST -------------------------------------------------------------------------------------------------------------
def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A keyed server with index and retrieve; office for public, acme and globex, it for public, uploaded over HTTP."""
    tmp = tmp_path_factory.mktemp("kb-serve")
    manifest = tmp / "hayhooks.yml"
    manifest.write_text(yaml.safe_dump({
        "pipelines": {"retrieve": {"pipeline": str(PROJECT_ROOT / "pipelines" / "retrieve.yml"), "kind": "retrieve"},
                      "index": {"pipeline": str(PROJECT_ROOT / "pipelines" / "index.yml"), "kind": "index"}},
        "auth": {"keys": [{"env": "KB_TEST_ADMIN", "tenants": ["public"], "admin": True},
                          {"env": "KB_TEST_ACME", "tenants": ["acme"]},
                          {"env": "KB_TEST_GLOBEX", "tenants": ["globex"]}]},
        "mcp": False,
    }), encoding="utf-8")
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp / "data"), "KB_TEST_ADMIN": ADMIN_KEY,
           "KB_TEST_ACME": ACME_KEY, "KB_TEST_GLOBEX": GLOBEX_KEY}
    with running_server(manifest, env=env, workdir=tmp, pipelines=2) as url:
        for key, kb, files in ((ADMIN_KEY, "office", OFFICE), (ADMIN_KEY, "it", IT), (ACME_KEY, "office", OFFICE),
                               (GLOBEX_KEY, "office", OFFICE)):
            upload = [("files", (name, text.encode(), "text/markdown")) for name, text in files.items()]
            response = httpx.post(f"{url}/index/run", files=upload, data={"kb": kb, "wait": "true"},
                                  headers=_auth(key), timeout=120)
            assert response.status_code == 200, response.text
        yield url


def rest_retrieved(url: str, key: str) -> set[str]:
    """Every document id `/retrieve/run` returns to the key's tenant for any of the test questions."""
    found = set()
    for query in QUERIES.values():
        response = httpx.post(f"{url}/retrieve/run", json={"query": query, "top_k": 50}, headers=_auth(key), timeout=60)
        assert response.status_code == 200, response.text
        found |= {document["meta"]["doc_id"] for document in response.json()["result"]["documents"]}
    return found


def kbs_of(url: str, key: str, **params: str) -> list[tuple[str, str, int, int]]:
    response = httpx.get(f"{url}/kbs", params=params, headers=_auth(key))
    assert response.status_code == 200, response.text
    return [(kb["tenant"], kb["kb"], kb["documents"], kb["chunks"]) for kb in response.json()["knowledge_bases"]]


@pytest.mark.parametrize(
    ("method", "path", "key", "status", "message"),
    [
        ("GET", "/kbs", None, 401, "missing or invalid API key"),
        ("DELETE", "/kbs/office", None, 401, "missing or invalid API key"),
        ("GET", "/kbs?tenant=public", ACME_KEY, 403, "may not act for tenant 'public'"),
        ("DELETE", "/kbs/office?tenant=acme", GLOBEX_KEY, 403, "may not act for tenant 'acme'"),
        ("DELETE", "/kbs/office?tenant=public", ACME_KEY, 403, "may not act for tenant 'public'"),
        ("GET", "/kbs?tenant=Not%20A%20Tenant", ADMIN_KEY, 422, "tenant 'Not A Tenant' is not a valid tenant name"),
        ("DELETE", "/kbs/Bad.Name", ADMIN_KEY, 422, "kb 'Bad.Name' is not a valid knowledge base name"),
        ("DELETE", "/kbs/office?tenant=BAD", ADMIN_KEY, 422, "tenant 'BAD' is not a valid tenant name"),
        ("DELETE", "/kbs/astrology?tenant=acme", ADMIN_KEY, 404, "no knowledge base 'astrology' for tenant 'acme'"),
    ],
)
def test_kb_endpoints_refuse_with_a_4xx_naming_the_problem(server, method, path, key, status, message):
    response = httpx.request(method, server + path, headers=_auth(key) if key else {})
    assert response.status_code == status
    assert message in response.json()["detail"]
    assert "Traceback" not in response.text


def test_kb_endpoints_list_and_delete_per_tenant(server):
    assert kbs_of(server, ADMIN_KEY) == [("acme", "office", 2, 2), ("globex", "office", 2, 2), ("public", "it", 1, 1),
                                         ("public", "office", 2, 2)]
    assert kbs_of(server, ACME_KEY) == [("acme", "office", 2, 2)]
    assert kbs_of(server, ADMIN_KEY, tenant="globex") == [("globex", "office", 2, 2)]
    assert rest_retrieved(server, ACME_KEY) >= {"acme/office/parking.md", "acme/office/lunch.md"}

    own = httpx.delete(f"{server}/kbs/office", headers=_auth(ACME_KEY))  # a key's default tenant: its own
    assert own.status_code == 200
    assert own.json() == {"deleted": {"tenant": "acme", "kb": "office", "documents": 2, "chunks": 2}}
    other = httpx.delete(f"{server}/kbs/office", params={"tenant": "globex"}, headers=_auth(ADMIN_KEY))  # admin: any
    assert other.status_code == 200
    assert other.json()["deleted"]["tenant"] == "globex"

    public = {"public/office/parking.md", "public/office/lunch.md", "public/it/wifi.md"}
    assert rest_retrieved(server, ACME_KEY) == public
    assert rest_retrieved(server, GLOBEX_KEY) == public
    assert kbs_of(server, ADMIN_KEY) == [("public", "it", 1, 1), ("public", "office", 2, 2)]
    assert kbs_of(server, ACME_KEY) == []
