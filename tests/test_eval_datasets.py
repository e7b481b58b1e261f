"""Tests for the evaluation sets (`eval/datasets.py`): field-by-field mapping on small fixtures, bad input, slices."""

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gatehouse.settings import bundled_dir
from gatehouse.eval.datasets import (
    GOLDEN_SET,
    INTENTS,
    CorpusDocument,
    DatasetNotPresent,
    EvalCase,
    EvalSetError,
    available_sets,
    corpus_knowledge_bases,
    file_version,
    load_golden,
    load_mtrag_un,
    load_set,
    load_squad2,
    safe_id,
    stratified_slice,
    write_corpus,
)
from gatehouse.ingest import sample_groups

PROJECT_ROOT = bundled_dir()  # the shipped pipelines, sample KBs and manifest

FIXTURES = Path(__file__).parent / "fixtures" / "eval"
GOLDEN_SMALL = FIXTURES / "golden_small.yml"
MTRAG = FIXTURES / "mtrag_un"
SQUAD = FIXTURES / "squad2_cs224n" / "dev-v2.0.json"
KB = PROJECT_ROOT / "kb"


def write_set(tmp_path: Path, data: dict, name: str = "set.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def retrieve_case(**fields) -> dict:
    case = {"id": "c1", "question": "How do I rotate an API key?", "gold_answer": "Choose Rotate.",
            "gold_sources": ["faq/api-keys.md"], "gold_kb": "faq", "gold_intent": "procedural",
            "gold_route": "retrieve"}
    case.update(fields)
    return case


def mtrag_task(task_id: str, label: str, collection: str = "fiqa", contexts=None, speakers=("user",), **fields):
    task = {
        "task_id": task_id,
        "Collection": collection,
        "answerability": [label],
        "input": [{"speaker": s, "text": f"turn {n} of {task_id}"} for n, s in enumerate(speakers)],
        "targets": [{"speaker": "agent", "text": f"target of {task_id}"}],
        "contexts": contexts if contexts is not None else [],
        "Question Type": ["Factoid"],
        "Multi-Turn": ["N/A"],
    }
    task.update(fields)
    return task


def write_jsonl(tmp_path: Path, tasks: list) -> Path:
    path = tmp_path / "reference.jsonl"
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks), encoding="utf-8")
    return path


# --- data classes and corpus files --------------------------------------------------------------------------------


def test_corpus_document_file_name_source_key_and_text():
    document = CorpusDocument(id="doc-1", kb="handbook", text="Leave is 28 days.", title="Leave: rules",
                              url="https://example.org/leave")
    assert document.file_name == "doc-1.txt"
    assert document.source_key == "handbook/doc-1.txt"
    text = document.file_text()
    assert text.startswith("---\n") and text.endswith("---\nLeave is 28 days.")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front == {"title": "Leave: rules", "url": "https://example.org/leave"}
    assert CorpusDocument(id="d", kb="k", text="plain").file_text() == "plain"
    # A text that looks like front matter itself gets a header, so it is not mistaken for one.
    assert CorpusDocument(id="d", kb="k", text="---\nx: 1\n---\nbody").file_text().startswith("---\ntitle: d\n---\n")


def test_write_corpus_lays_files_out_like_kb(tmp_path):
    corpus = [
        CorpusDocument(id="a", kb="faq", text="A text."),
        CorpusDocument(id="b", kb="faq", text="B text.", tenant="acme", title="B"),
    ]
    written = write_corpus(corpus, tmp_path / "root")
    assert sorted(p.relative_to(tmp_path / "root").as_posix() for p in written) == [
        "faq/a.txt", "tenants/acme/faq/b.txt"]
    groups = {(g.tenant, g.kb): [f.name for f in g.files] for g in sample_groups(tmp_path / "root")}
    assert groups == {(None, "faq"): ["a.txt"], ("acme", "faq"): ["b.txt"]}


def test_write_corpus_rejects_collisions_and_reserved_names(tmp_path):
    with pytest.raises(EvalSetError, match="written twice"):
        write_corpus([CorpusDocument(id="a", kb="faq", text="1"), CorpusDocument(id="a", kb="faq", text="2")],
                     tmp_path)
    with pytest.raises(EvalSetError, match="'tenants' is reserved"):
        write_corpus([CorpusDocument(id="a", kb="tenants", text="1")], tmp_path)
    with pytest.raises(EvalSetError, match="not filesystem-safe"):
        write_corpus([CorpusDocument(id="../a", kb="faq", text="1")], tmp_path)


def test_safe_id():
    assert safe_id("162428-0-349") == "162428-0-349"
    cleaned = safe_id("fin/42 a")
    assert cleaned.startswith("fin_42_a-") and len(cleaned) == len("fin_42_a-") + 8
    assert safe_id("fin/42 a") != safe_id("fin 42/a")


def test_file_version_changes_with_content(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    first = file_version(tmp_path / "a.txt")
    assert len(first) == 12 and first == file_version(tmp_path / "a.txt")
    (tmp_path / "a.txt").write_text("two")
    assert file_version(tmp_path / "a.txt") != first


def test_stratified_slice_hand_computed():
    items = [("big", n) for n in range(6)] + [("mid", n) for n in range(3)] + [("one", 0)]
    chosen = stratified_slice(items, limit=5, stratum=lambda i: i[0], key=lambda i: f"{i[0]}{i[1]}")
    # One per stratum (3), the 2 left shared by spare size: big 5/7*2 = 1.43, mid 2/7*2 = 0.57 -> big 1, then the
    # largest remainder (mid 0.57) 1: big 2, mid 2, one 1.
    assert Counter(i[0] for i in chosen) == {"big": 2, "mid": 2, "one": 1}
    assert chosen == [i for i in items if i in chosen]  # original order
    assert chosen == stratified_slice(items, limit=5, stratum=lambda i: i[0], key=lambda i: f"{i[0]}{i[1]}")
    assert stratified_slice(items, limit=None, stratum=lambda i: i[0], key=str) == items
    assert Counter(i[0] for i in stratified_slice(items, limit=2, stratum=lambda i: i[0], key=str)) == {
        "big": 1, "mid": 1}
    with pytest.raises(ValueError, match="at least 1"):
        stratified_slice(items, limit=0, stratum=lambda i: i[0], key=str)


def test_corpus_knowledge_bases_are_computed_from_the_documents():
    corpus = [CorpusDocument(id=f"t{n}", kb="tax", text=f"Income tax return number {n} and tax deductions.")
              for n in range(4)]
    corpus += [CorpusDocument(id=f"s{n}", kb="space", text=f"The rocket launch number {n} reached orbit.")
               for n in range(4)]
    declarations = corpus_knowledge_bases(corpus, {"tax": "Taxes."})
    assert [d["name"] for d in declarations] == ["space", "tax"]
    space, tax = declarations
    assert {"rocket", "launch", "orbit"} <= set(space["keywords"]) and "tax" not in space["keywords"]
    assert {"tax", "income", "deductions"} <= set(tax["keywords"]) and "rocket" not in tax["keywords"]
    assert "number" not in tax["keywords"]  # in every document of both KBs: not distinctive
    assert tax["description"].startswith("Taxes. Frequent terms: ")
    assert space["description"].startswith("Reference documents of the 'space' collection.")
    assert len(tax["examples"]) == 3 and all(e.startswith("Income tax return number") for e in tax["examples"])


# --- golden (YAML) ----------------------------------------------------------------------------------------------


def test_load_golden_small_field_by_field():
    eval_set = load_golden(GOLDEN_SMALL)
    assert eval_set.name == "golden-small"
    assert eval_set.corpus == [] and eval_set.knowledge_bases == []
    assert eval_set.version == file_version(GOLDEN_SMALL, KB)
    rotate, quasar, code = eval_set.cases
    assert rotate == EvalCase(
        id="rotate-key",
        question="How do I rotate an API key?",
        history=[],
        gold_answer="Open the key's menu, choose Rotate and pick a grace period.",
        gold_sources=["faq/api-keys.md"],
        gold_contexts=["Rotation replaces a key's secret while giving your applications time to switch over."],
        gold_kb="faq",
        gold_intent="procedural",
        gold_route="retrieve",
        answerable=True,
        tenant="public",
        tags=["single-turn", "faq"],
    )
    assert quasar.tenant == "globex"
    assert quasar.history == [{"role": "user", "content": "What is Project Quasar?"},
                              {"role": "assistant", "content": "Globex's Enterprise subscription."}]
    assert quasar.question == "Who is our contact for it?" and quasar.gold_sources == ["faq/globex-contract.md"]
    assert code == EvalCase(id="write-code", question="Write a Python script that calls the API.",
                            gold_intent="out_of_scope", gold_route="refuse", answerable=False, tags=["code"])


def test_load_golden_version_covers_the_knowledge_bases(tmp_path):
    kb = tmp_path / "kb"
    shutil.copytree(KB / "faq", kb / "faq")
    path = write_set(tmp_path, {"kb_root": "kb", "cases": [retrieve_case()]})
    before = load_golden(path).version
    (kb / "faq" / "api-keys.md").write_text("changed", encoding="utf-8")
    assert load_golden(path).version != before


BAD_CASES = [
    ({"gold_sorces": ["faq/api-keys.md"]}, "gold_sorces", "unknown field"),
    ({"gold_intent": "question"}, "gold_intent", "must be one of chitchat"),
    ({"gold_route": "retreive"}, "gold_route", "must be one of retrieve, direct, refuse"),
    ({"answerable": "yes"}, "answerable", "must be true or false"),
    ({"question": "  "}, "question", "non-empty string"),
    ({"history": [{"role": "bot", "content": "hi"}]}, "history[1].role", "must be one of user"),
    ({"history": [{"role": "user"}]}, "history", "exactly the keys role and content"),
    ({"gold_sources": ["api-keys.md"]}, "gold_sources", "not of the form '<kb>/<source>'"),
    ({"gold_sources": ["faq/no-such-file.md"]}, "gold_sources", "does not exist"),
    ({"gold_kb": "ops"}, "gold_kb", "not the knowledge base of any gold source"),
    ({"gold_route": "refuse", "gold_sources": [], "gold_kb": None, "gold_answer": None}, "answerable",
     "must be false when gold_route is refuse"),
    ({"gold_route": "direct"}, "gold_sources", "must be empty when gold_route is direct"),
    ({"gold_route": "direct", "gold_sources": [], "gold_kb": None, "answerable": False, "gold_answer": None},
     "answerable", "must be true when gold_route is direct"),
    ({"answerable": False}, "gold_answer", "must be empty for an unanswerable case"),
    ({"tenant": "acme corp"}, "tenant", "must be a tenant name"),
]


@pytest.mark.parametrize(("changes", "field_name", "problem"), BAD_CASES)
def test_load_golden_bad_case_names_file_case_and_field(tmp_path, changes, field_name, problem):
    path = write_set(tmp_path, {"kb_root": str(KB), "cases": [retrieve_case(id="ok"), retrieve_case(**changes)]})
    with pytest.raises(EvalSetError) as raised:
        load_golden(path)
    message = str(raised.value)
    assert str(path) in message and "case 'c1' (#2)" in message and f"field '{field_name}'" in message
    assert problem in message


def test_load_golden_tenant_sources_resolve_under_tenants(tmp_path):
    case = retrieve_case(gold_sources=["faq/globex-contract.md"], tenant="globex")
    assert load_golden(write_set(tmp_path, {"kb_root": str(KB), "cases": [case]})).cases[0].tenant == "globex"
    with pytest.raises(EvalSetError, match="does not exist"):
        load_golden(write_set(tmp_path, {"kb_root": str(KB), "cases": [dict(case, tenant="public")]}))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("cases: [\n  - {id: a, question: What?}\n", "is not valid YAML"),
        ("- just a list\n", "must be a mapping with a 'cases' list"),
        ("name: x\n", "field 'cases': must be a non-empty list"),
        ("cases: []\nextra: 1\n", "field 'extra': unknown field"),
        ("kb_root: no-such-folder\ncases: [{id: a, question: q}]\n", "field 'kb_root': folder"),
        ("cases: [{id: a, question: q}, {id: a, question: r}]\n", "case 'a' (#2): field 'id': is used by an earlier"),
        ("cases: [{question: q}]\n", "case #1: field 'id': must be a non-empty string"),
    ],
)
def test_load_golden_bad_file(tmp_path, text, problem):
    path = tmp_path / "bad.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(EvalSetError) as raised:
        load_golden(path)
    assert str(path) in str(raised.value) and problem in str(raised.value)


def test_load_golden_missing_file(tmp_path):
    with pytest.raises(EvalSetError, match="cannot be read"):
        load_golden(tmp_path / "missing.yml")


def test_load_golden_with_its_own_corpus_and_knowledge_bases(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "leave.md").write_text("# Leave\n\nYou get 28 days.", encoding="utf-8")
    data = {
        "corpus": [
            {"id": "leave", "kb": "handbook", "path": "docs/leave.md", "title": "Annual leave"},
            {"id": "expenses", "kb": "handbook", "text": "Expenses are paid within 30 days.", "tenant": "acme"},
        ],
        "knowledge_bases": [{"name": "handbook", "description": "Staff handbook.", "keywords": ["leave"]}],
        "cases": [retrieve_case(gold_sources=["handbook/leave.txt"], gold_kb="handbook")],
    }
    eval_set = load_golden(write_set(tmp_path, data))
    assert eval_set.corpus == [
        CorpusDocument(id="leave", kb="handbook", text="# Leave\n\nYou get 28 days.", title="Annual leave"),
        CorpusDocument(id="expenses", kb="handbook", text="Expenses are paid within 30 days.", tenant="acme"),
    ]
    assert eval_set.knowledge_bases == data["knowledge_bases"]
    first = eval_set.version
    (tmp_path / "docs" / "leave.md").write_text("# Leave\n\nYou get 30 days.", encoding="utf-8")
    assert load_golden(tmp_path / "set.yml").version != first

    data["cases"][0]["gold_sources"] = ["handbook/leave.md"]
    with pytest.raises(EvalSetError, match="'handbook/leave.md' is not a document of the set's corpus"):
        load_golden(write_set(tmp_path, data))


@pytest.mark.parametrize(
    ("corpus", "knowledge_bases", "problem"),
    [
        ([{"id": "a b", "kb": "k", "text": "t"}], None, "corpus document #1: field 'id'"),
        ([{"id": "a", "kb": "k", "text": "t", "path": "x"}], None, "give exactly one of 'text' or 'path'"),
        ([{"id": "a", "kb": "k", "path": "missing.md"}], None, "field 'path': file"),
        ([{"id": "a", "kb": "k", "text": "t", "author": "me"}], None, "field 'author': unknown field"),
        (None, [{"name": "k"}], "field 'knowledge_bases[1].description'"),
        (None, [{"name": "k", "description": "d", "weight": 1}], "field 'knowledge_bases[1].weight': unknown key"),
    ],
)
def test_load_golden_bad_corpus_or_knowledge_bases(tmp_path, corpus, knowledge_bases, problem):
    data = {"cases": [{"id": "a", "question": "q"}]}
    if corpus is not None:
        data["corpus"] = corpus
    if knowledge_bases is not None:
        data["knowledge_bases"] = knowledge_bases
    with pytest.raises(EvalSetError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        load_golden(write_set(tmp_path, data))


def test_load_golden_limit_is_deterministic_and_stratified_by_first_tag():
    full = load_golden(GOLDEN_SET)
    first = load_golden(GOLDEN_SET, limit=14)
    assert [c.id for c in first.cases] == [c.id for c in load_golden(GOLDEN_SET, limit=14).cases]
    assert len(first.cases) == 14
    assert {c.tags[0] for c in first.cases} == {c.tags[0] for c in full.cases}
    assert [c.id for c in first.cases] == [c.id for c in full.cases if c in first.cases]


# --- the real golden set ----------------------------------------------------------------------------------------


def test_real_golden_set_counts_and_sources():
    eval_set = load_set("golden")
    cases = eval_set.cases
    categories = Counter(case.tags[0] for case in cases)
    assert len(cases) >= 60
    assert categories["single-turn"] >= 36 and categories["follow-up"] >= 6 and categories["direct"] >= 6
    assert categories["out-of-scope"] >= 5 and categories["code"] >= 5 and categories["no-kb-answers"] >= 6
    assert categories["tenant"] >= 2 and categories["multi-part"] >= 18
    assert set(categories) == {"single-turn", "follow-up", "direct", "out-of-scope", "code", "no-kb-answers",
                               "tenant", "multi-part"}
    for case in cases:
        for source in case.gold_sources:
            kb, name = source.split("/", 1)
            base = KB if case.tenant == "public" else KB / "tenants" / case.tenant
            assert (base / kb / name).is_file(), f"{case.id}: {source}"
        category = case.tags[0]
        assert case.gold_intent in INTENTS, case.id
        if category in ("single-turn", "follow-up"):
            assert case.answerable and case.gold_route == "retrieve" and case.gold_answer and case.gold_sources
            assert case.gold_kb in ("faq", "product", "ops")
        if category == "follow-up":
            assert case.history and case.history[-1]["role"] == "assistant"
        if category == "direct":
            assert case.gold_route == "direct" and case.answerable
        if category == "out-of-scope":
            assert case.gold_route == "refuse" and not case.answerable and case.gold_intent == "out_of_scope"
        if category == "code":  # code with what the KBs document: a question about the documents
            assert case.gold_route == "retrieve" and not case.answerable and case.gold_kb in ("faq", "product", "ops")
        if category == "no-kb-answers":
            assert case.gold_route == "retrieve" and not case.answerable and not case.gold_sources
        assert bool(case.gold_parts) == (category == "multi-part"), case.id
    single = [c for c in cases if c.tags[0] == "single-turn"]
    assert {c.gold_kb for c in single} == {"faq", "product", "ops"}
    assert {c.gold_intent for c in single} >= {"procedural", "factual", "comparison", "explanation", "aggregation",
                                               "temporal"}
    tenant = {(c.question, c.tenant): c for c in cases if c.tags[0] == "tenant"}
    for (question, tenant_name), case in tenant.items():
        if tenant_name == "globex":
            assert case.answerable and case.gold_sources == ["faq/globex-contract.md"]
            assert not tenant[(question, "public")].answerable


# --- MTRAG-UN ---------------------------------------------------------------------------------------------------


def test_load_mtrag_un_fixture_field_by_field():
    eval_set = load_mtrag_un(MTRAG)
    assert eval_set.name == "mtrag_un"
    assert eval_set.version == file_version(MTRAG / "reference.jsonl")
    index_fund, which_account, passport = eval_set.cases
    fund_doc = safe_id("fin/42 a")
    assert index_fund == EvalCase(
        id="conv-a<::>3",
        question="Why are its fees low?",
        history=[{"role": "user", "content": "What is an index fund?"},
                 {"role": "assistant", "content": "A fund that holds every stock of an index."}],
        gold_answer="Because it holds the whole index and needs no stock picking.",
        gold_sources=[f"fiqa/{fund_doc}.txt", "fiqa/1001-0-77.txt"],
        gold_contexts=[
            "An index fund holds every stock of an index, so its fees stay low and it needs no stock picking.",
            "A Roth IRA is funded with income that has already been taxed, so withdrawals in retirement are tax free.",
        ],
        gold_kb="fiqa",
        gold_intent="explanation",
        gold_route="retrieve",
        answerable=True,
        tags=["follow-up", "answerability:answerable", "multi-turn:follow-up", "question-type:explanation"],
    )
    assert which_account.history == [] and which_account.answerable is False and which_account.gold_answer is None
    assert which_account.gold_intent is None  # two question types: not mapped
    assert which_account.tags == ["single-turn", "answerability:underspecified", "question-type:comparative",
                                  "question-type:opinion"]
    assert passport.answerable is True and passport.gold_answer.startswith("I do not know the fee")
    assert passport.gold_intent == "procedural" and passport.gold_kb == "govt"
    assert "answerability:partial" in passport.tags
    # The pooled corpus: the Roth IRA passage is shared by two tasks and stored once.
    assert [(d.kb, d.id, d.title) for d in eval_set.corpus] == [
        ("fiqa", "1001-0-77", ""),
        ("fiqa", fund_doc, ""),
        ("govt", "abc123-0-900", "Passport renewal | Travel.gov"),
    ]
    assert {d.source_key for d in eval_set.corpus} == {s for c in eval_set.cases for s in c.gold_sources}
    assert [kb["name"] for kb in eval_set.knowledge_bases] == ["fiqa", "govt"]
    assert all(set(kb) == {"name", "description", "keywords", "examples"} for kb in eval_set.knowledge_bases)
    assert eval_set.knowledge_bases[0]["description"].startswith("Personal finance and investing")


def test_load_mtrag_un_answerability_mapping(tmp_path):
    tasks = [mtrag_task(f"t-{label}", label) for label in ("ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED")]
    cases = load_mtrag_un(write_jsonl(tmp_path, tasks)).cases
    assert [(c.answerable, c.gold_answer) for c in cases] == [
        (True, "target of t-ANSWERABLE"), (True, "target of t-PARTIAL"), (False, None), (False, None)]


@pytest.mark.parametrize(
    ("task", "field_name", "problem"),
    [
        (mtrag_task("t1", "MAYBE"), "answerability", "must be one of ANSWERABLE"),
        (mtrag_task("t1", "ANSWERABLE", speakers=("user", "agent")), "input", "last turn must be the user's"),
        (mtrag_task("t1", "ANSWERABLE", speakers=("user", "robot")), "input[2].speaker", "must be user or agent"),
        (mtrag_task("t1", "ANSWERABLE", Collection="bad name"), "Collection", "knowledge base name"),
        (mtrag_task("t1", "ANSWERABLE", targets=[]), "targets", "non-empty list"),
        (mtrag_task("t1", "ANSWERABLE", contexts=[{"text": "x"}]), "contexts[1].document_id", "non-empty string"),
    ],
)
def test_load_mtrag_un_bad_task_names_file_task_and_field(tmp_path, task, field_name, problem):
    path = write_jsonl(tmp_path, [mtrag_task("t0", "ANSWERABLE"), task])
    with pytest.raises(EvalSetError) as raised:
        load_mtrag_un(path)
    message = str(raised.value)
    assert str(path) in message and "task 't1' (line 2)" in message and f"field '{field_name}'" in message
    assert problem in message


def test_load_mtrag_un_bad_file(tmp_path):
    with pytest.raises(EvalSetError, match="file not found"):
        load_mtrag_un(tmp_path)
    path = tmp_path / "reference.jsonl"
    path.write_text('{"task_id": "t0"\n', encoding="utf-8")
    with pytest.raises(EvalSetError, match="line 1: is not valid JSON"):
        load_mtrag_un(tmp_path)
    context = {"document_id": "d1", "text": "one"}
    tasks = [mtrag_task("t0", "ANSWERABLE", contexts=[context]),
             mtrag_task("t1", "ANSWERABLE", contexts=[dict(context, text="two")])]
    with pytest.raises(EvalSetError, match="document 'd1' has a different text"):
        load_mtrag_un(write_jsonl(tmp_path, tasks))
    with pytest.raises(EvalSetError, match="field 'task_id': is used by an earlier task"):
        load_mtrag_un(write_jsonl(tmp_path, [mtrag_task("t0", "ANSWERABLE"), mtrag_task("t0", "PARTIAL")]))


def test_load_mtrag_un_limit_is_deterministic_stratified_and_shrinks_the_corpus(tmp_path):
    tasks = []
    for collection in ("fiqa", "govt"):
        for label, count in (("ANSWERABLE", 6), ("UNANSWERABLE", 2)):
            for n in range(count):
                doc = {"document_id": f"{collection}-{label}-{n}", "text": f"passage {n} of {collection}"}
                tasks.append(mtrag_task(f"{collection}-{label}-{n}", label, collection, contexts=[doc]))
    path = write_jsonl(tmp_path, tasks)
    full = load_mtrag_un(path)
    assert len(full.corpus) == 16
    sliced = load_mtrag_un(path, limit=6)
    assert [c.id for c in sliced.cases] == [c.id for c in load_mtrag_un(path, limit=6).cases]
    strata = Counter((c.gold_kb, c.answerable) for c in sliced.cases)
    # One per stratum (4), the 2 left to the two large strata: fiqa/govt answerable 2 each, unanswerable 1 each.
    assert strata == {("fiqa", True): 2, ("govt", True): 2, ("fiqa", False): 1, ("govt", False): 1}
    assert {d.source_key for d in sliced.corpus} == {s for c in sliced.cases for s in c.gold_sources}


# --- SQuAD 2.0 --------------------------------------------------------------------------------------------------


def test_load_squad2_fixture_field_by_field():
    eval_set = load_squad2(SQUAD)
    assert eval_set.name == "squad2" and eval_set.version == file_version(SQUAD)
    assert [(d.id, d.kb, d.title) for d in eval_set.corpus] == [
        ("Steam_engine-000", "squad", "Steam engine"), ("Steam_engine-001", "squad", "Steam engine"),
        ("Warsaw-000", "squad", "Warsaw")]
    assert [c.id for c in eval_set.cases] == ["se-1", "se-2", "se-3", "se-4", "se-5", "wa-1", "wa-2"]
    first, impossible = eval_set.cases[:2]
    paragraph = "A steam engine is a heat engine that performs mechanical work using steam as its working fluid."
    assert first == EvalCase(
        id="se-1",
        question="What does a steam engine use as its working fluid?",
        gold_answer="steam",
        gold_sources=["squad/Steam_engine-000.txt"],
        gold_contexts=[paragraph],
        gold_kb="squad",
        gold_route="retrieve",
        answerable=True,
        tags=["single-turn", "answerability:answerable", "article:steam-engine"],
    )
    assert impossible.answerable is False and impossible.gold_answer is None
    assert impossible.tags == ["single-turn", "answerability:unanswerable", "article:steam-engine"]
    assert [kb["name"] for kb in eval_set.knowledge_bases] == ["squad"]
    description = eval_set.knowledge_bases[0]["description"]
    assert description.startswith("Wikipedia paragraphs (SQuAD 2.0) on: Steam engine, Warsaw")


def test_load_squad2_limit_takes_whole_paragraphs_across_articles():
    sliced = load_squad2(SQUAD, limit=5)
    # Round robin over articles: Steam_engine-000 (3 questions), Warsaw-000 (2), then the limit is reached.
    assert [d.id for d in sliced.corpus] == ["Steam_engine-000", "Warsaw-000"]
    assert [c.id for c in sliced.cases] == ["se-1", "se-2", "se-3", "wa-1", "wa-2"]
    assert [c.id for c in load_squad2(SQUAD, limit=5).cases] == [c.id for c in sliced.cases]
    # A paragraph cut short keeps answerable and unanswerable questions alternating.
    two = load_squad2(SQUAD, limit=2)
    assert [c.id for c in two.cases] == ["se-1", "se-2"] and {c.answerable for c in two.cases} == {True, False}
    with pytest.raises(ValueError, match="at least 1"):
        load_squad2(SQUAD, limit=0)


def test_load_squad2_sample_is_even_over_the_articles_of_a_split_and_keeps_the_whole_corpus():
    mixed = load_squad2(SQUAD, sample=4, seed=0)
    assert [(c.id, c.answerable) for c in mixed.cases] == [("se-2", False), ("se-4", True), ("wa-1", True),
                                                           ("wa-2", False)]
    assert [c.id for c in load_squad2(SQUAD, sample=4, seed=0).cases] == [c.id for c in mixed.cases]
    assert len(mixed.corpus) == 3  # every paragraph, not only the sampled questions' ones
    # tune = the 1st, 3rd... article in file order, report = the 2nd, 4th...: the splits never share an article.
    tune = load_squad2(SQUAD, sample=4, articles="tune", seed=0)
    report = load_squad2(SQUAD, sample=4, articles="report", seed=0)
    assert {c.id[:2] for c in tune.cases} == {"se"} and {c.id[:2] for c in report.cases} == {"wa"}
    assert Counter(c.answerable for c in tune.cases) == {True: 2, False: 2}
    # Warsaw has one question of each kind: the sample is smaller than asked rather than unbalanced.
    assert Counter(c.answerable for c in report.cases) == {True: 1, False: 1}
    assert {c.id for c in load_squad2(SQUAD, sample=4, articles="tune", seed=1).cases} <= {"se-1", "se-2", "se-3",
                                                                                          "se-4", "se-5"}
    with pytest.raises(ValueError, match="Unknown SQuAD article split 'odd'"):
        load_squad2(SQUAD, sample=4, articles="odd")
    with pytest.raises(ValueError, match="at least 2"):
        load_squad2(SQUAD, sample=1)


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(is_impossible="no"),
         "question 'se-1' (article 'Steam_engine'): field 'is_impossible': must be true or false"),
        (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(answers=[]),
         "question 'se-1' (article 'Steam_engine'): field 'answers'"),
        (lambda d: d["data"][1]["paragraphs"][0]["qas"][0].update(id="se-1"),
         "question 'se-1' (article 'Warsaw'): field 'id': is used by an earlier question"),
        (lambda d: d["data"][1]["paragraphs"][0].update(context=""),
         "article 'Warsaw' paragraph #1: field 'context'"),
        (lambda d: d.update(data=[]), "field 'data': must be a non-empty list"),
    ],
)
def test_load_squad2_bad_input(tmp_path, mutate, problem):
    data = json.loads(SQUAD.read_text(encoding="utf-8"))
    mutate(data)
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(EvalSetError) as raised:
        load_squad2(path)
    assert str(path) in str(raised.value) and problem in str(raised.value)


def test_load_squad2_unreadable(tmp_path):
    with pytest.raises(EvalSetError, match="cannot be read"):
        load_squad2(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(EvalSetError, match="is not valid JSON"):
        load_squad2(tmp_path / "bad.json")


# --- registry ---------------------------------------------------------------------------------------------------


def test_registry_reports_missing_data_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_EVAL_DATA", str(tmp_path))
    infos = {info.name: info for info in available_sets()}
    assert set(infos) == {"golden", "mtrag_un", "squad2"}
    assert infos["golden"].present and infos["golden"].path == GOLDEN_SET
    for name in ("mtrag_un", "squad2"):
        assert not infos[name].present and str(tmp_path) in infos[name].reason
        with pytest.raises(DatasetNotPresent) as raised:
            load_set(name)
        assert raised.value.name == name and raised.value.reason == infos[name].reason
    with pytest.raises(ValueError, match="Unknown evaluation set 'scifact'"):
        load_set("scifact")


def test_registry_resolves_the_data_folder_from_the_environment(monkeypatch):
    monkeypatch.setenv("GATEHOUSE_EVAL_DATA", str(FIXTURES))
    assert all(info.present for info in available_sets())
    assert [c.id for c in load_set("mtrag_un").cases] == ["conv-a<::>3", "conv-b<::>1", "conv-c<::>1"]
    assert len(load_set("squad2", limit=2).cases) == 2
    assert load_set("golden", path=GOLDEN_SMALL).name == "golden-small"
    assert load_set("mtrag_un", path=MTRAG / "reference.jsonl").version == file_version(MTRAG / "reference.jsonl")


# --- the real shared data (skipped when absent) -----------------------------------------------------------------

SHARED = {info.name: info for info in available_sets()}


@pytest.mark.skipif(not SHARED["mtrag_un"].present, reason=f"MTRAG-UN not present: {SHARED['mtrag_un'].reason}")
def test_real_mtrag_un():
    eval_set = load_set("mtrag_un")
    assert len(eval_set.cases) == 507 and len(eval_set.corpus) == 1152
    assert Counter(c.gold_kb for c in eval_set.cases) == {"govt": 157, "clapnq": 142, "ibmcloud": 131, "fiqa": 77}
    assert Counter(c.answerable for c in eval_set.cases) == {True: 285 + 47, False: 97 + 78}
    assert [kb["name"] for kb in eval_set.knowledge_bases] == ["clapnq", "fiqa", "govt", "ibmcloud"]
    assert all(len(kb["keywords"]) == 15 for kb in eval_set.knowledge_bases)
    corpus_keys = {d.source_key for d in eval_set.corpus}
    assert all(set(c.gold_sources) <= corpus_keys for c in eval_set.cases)
    quick = load_set("mtrag_un", limit=40)
    assert len(quick.cases) == 40 and len({(c.gold_kb, c.tags[1]) for c in quick.cases}) == 16
    assert [c.id for c in quick.cases] == [c.id for c in load_set("mtrag_un", limit=40).cases]


@pytest.mark.skipif(not SHARED["squad2"].present, reason=f"SQuAD 2.0 not present: {SHARED['squad2'].reason}")
def test_real_squad2():
    eval_set = load_set("squad2")
    assert len(eval_set.cases) == 6078 and len(eval_set.corpus) == 646
    assert sum(c.answerable for c in eval_set.cases) == 2910
    quick = load_set("squad2", limit=50)
    assert len(quick.cases) == 50 and {c.answerable for c in quick.cases} == {True, False}
    assert len(quick.corpus) <= 6 and len({d.title for d in quick.corpus}) == len(quick.corpus)
