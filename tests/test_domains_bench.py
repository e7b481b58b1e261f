"""The documentation benchmark's set loader and judging rule (the benchmark itself runs nightly)."""

import pytest

from gatehouse.eval.domains_bench import (Case, Part, answer_correct, available_sets, cited, format_table, judge,
                                          load_set, passages_hold, run_benchmark, summarise, token_f1)


def test_the_shipped_sets_load_with_their_mix():
    sets = {path.stem: load_set(path) for path in available_sets()}
    assert set(sets) == {"httpx", "valkey", "prometheus", "18f_handbook", "sample", "poetry"}
    assert sorted(name for name, domain in sets.items() if domain.role == "tune") == ["httpx", "valkey"]
    assert [name for name, domain in sets.items() if domain.role == "heldout"] == ["poetry"]
    for domain in sets.values():
        kinds = [case.kind for case in domain.cases]
        assert len(kinds) >= 40 and kinds.count("follow-up") == kinds.count("multi-part") == 8
        assert kinds.count("unanswerable") >= 8
        assert all(case.history for case in domain.cases if case.kind == "follow-up")
        assert all(len(case.parts) >= 2 for case in domain.cases if case.kind == "multi-part")


def test_a_set_is_named_or_a_yaml_file(tmp_path):
    from gatehouse.eval.domains_bench import set_files

    own = tmp_path / "own.yml"
    own.write_text("name: own\ncorpus: own\ncases: []\n")
    assert [path.stem for path in set_files(["httpx", str(own)])] == ["httpx", "own"]
    assert set_files(None) == available_sets()
    with pytest.raises(ValueError, match="no_such"):
        set_files(["no_such"])


def test_load_set_refuses_a_case_without_a_kind(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("name: bad\ncorpus: bad\ncases:\n  - {id: x, question: \"What?\"}\n")
    with pytest.raises(ValueError, match="kind"):
        load_set(path)


def test_answer_correct_by_words_or_token_f1():
    assert answer_correct("The pool allows **100** connections. [S1]", "100", [])
    assert not answer_correct("It allows 1000 connections.", "100", [])
    assert answer_correct("Use `NO_PROXY` for that.", "NO_PROXY", [])
    assert answer_correct("Set it in the env.", "the NO_PROXY variable", ["env"])
    assert answer_correct("HTTP/1.1 is a mature and battle-hardened transport.", "HTTP/1.1 is a mature, "
                          "battle-hardened transport layer", [])
    assert token_f1("a b c d", "a b") == pytest.approx(2 / 3)
    assert not answer_correct("anything", None, [])


def test_judge_and_summarise():
    response = {"status": "success", "answer": "The default is 5 seconds. [S1]",
                "citations": [{"kb": "docs", "source": "timeouts.md"}]}
    right = Case(id="a", kind="answerable", question="q", answer="5 seconds", sources=["timeouts.md"])
    wrong = Case(id="b", kind="answerable", question="q", answer="10 seconds", sources=["timeouts.md"])
    assert cited(response, ["docs/timeouts.md"]) and not cited(response, ["other.md"])
    assert judge(right, response)["correct"] and not judge(right, response)["wrong_success"]
    assert judge(wrong, response)["wrong_success"]
    unanswerable = Case(id="c", kind="unanswerable", question="q")
    assert judge(unanswerable, {"status": "fallback", "answer": "", "citations": []})["abstained"]
    parts = Case(id="d", kind="multi-part", question="q", parts=[
        Part(question="p1", answer="5 seconds", sources=["timeouts.md"]), Part(question="p2", answerable=False)])
    assert not judge(parts, response)["handled"]  # a missing part with status success
    assert judge(parts, {**response, "status": "partial"})["handled"]
    rows = [{"kind": c.kind, "seconds": 1.0, "usage": {}, "verdict": judge(c, response)} for c in (right, wrong)]
    summary = summarise(rows)
    assert summary["answerable_correct"] == {"n": 2, "hits": 1, "share": 0.5}
    assert summary["wrong_success"]["hits"] == 1 and summary["latency_p50_s"] == 1.0
    assert summary["prompt_tokens_p50"] is None and summary["cached_prompt_share"] is None  # no model ran


def test_summarise_counts_tokens_and_the_share_read_from_the_prompt_cache():
    rows = [{"kind": "answerable", "seconds": 1.0, "verdict": {},
             "usage": {"prompt_tokens": p, "completion_tokens": 10, "cached_prompt_tokens": c}}
            for p, c in ((400, 0), (300, 240), (500, 360))]
    summary = summarise(rows)
    assert summary["prompt_tokens_p50"] == 400 and summary["completion_tokens_p50"] == 10
    assert summary["cached_prompt_share"] == 0.5  # 600 of 1,200


def test_absent_corpus_is_skipped_with_the_reason(tmp_path):
    report = run_benchmark(sets=["prometheus"], corpora=tmp_path / "none", workdir=tmp_path / "work")
    assert report["sets"] == {} and "not found" in report["skipped"]["prometheus"]
    assert "skipped: corpus folder" in format_table({**report, "ingest": {}})
    with pytest.raises(ValueError, match="Unknown domain set"):
        run_benchmark(sets=["nope"], corpora=tmp_path)


def test_the_first_passages_hold_the_answer_when_from_a_gold_file_and_holding_it():
    case = Case(id="a", kind="answerable", question="q", answer="5 seconds", sources=["timeouts.md"])
    gold = {"kb": "docs", "source": "timeouts.md", "text": "The default timeout is 5 seconds."}
    elsewhere = {"kb": "docs", "source": "other.md", "text": "The default timeout is 5 seconds."}
    silent = {"kb": "docs", "source": "timeouts.md", "text": "Timeouts can be configured."}
    assert passages_hold(case, [gold, silent]) == {"first_passage": True, "first_three": True}
    assert passages_hold(case, [elsewhere, silent, gold]) == {"first_passage": False, "first_three": True}
    assert passages_hold(case, [silent, silent, silent, gold]) == {"first_passage": False, "first_three": False}
    response = {"status": "partial", "answer": "Timeouts can be configured. [S1]",
                "citations": [{"kb": "docs", "source": "timeouts.md"}]}
    rows = [{"kind": "answerable", "seconds": 1.0, "usage": {}, "verdict": judge(case, response, [gold])}]
    summary = summarise(rows)
    assert summary["first_passage"]["share"] == 1.0 and summary["answerable_correct"]["share"] == 0.0
    side = {"sets": {"t": {"role": "tune", "generators": {"extractive": {"summary": summary}}}}, "workdir": "w"}
    table = format_table({**side, "baseline": {**side, "python": "py"}})
    assert "| t | tune | this checkout | extractive | 1.00 (1/1) | 1.00 (1/1) | 0.00 (0/1) |" in table
    assert "| t | tune | baseline | extractive |" in table and "first passage" in table.lower()


def test_a_baseline_interpreter_must_exist(tmp_path):
    with pytest.raises(ValueError, match="baseline-python"):
        run_benchmark(sets=["httpx"], corpora=tmp_path, baseline_python=str(tmp_path / "python"))
