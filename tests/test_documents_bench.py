"""gatehouse bench documents: the set it reads, how an answer is judged and how the figures are counted (no model)."""

import pytest
import yaml

from gatehouse.eval.documents_bench import SET_DIR, asks_list, is_clean, judge, load_set, partial_notice, summarise

CASE = {"id": "x-1", "kind": "answerable", "format": "xlsx", "file": "files/xlsx/budget.xlsx",
        "question": "What is the Q4 marketing budget?", "answer": "$12,500", "aliases": ["12500"]}
PASSAGE = {"source": "files/xlsx/budget.xlsx", "content": "- Line: Marketing; Q4: $12,500"}


def result(answer: str, status: str = "success", cited: str = "files/xlsx/budget.xlsx") -> dict:
    return {"answer": answer, "status": status, "citations": [cited] if cited else [], "passages": [PASSAGE]}


def test_the_shipped_set_names_a_manifest_file_for_every_question():
    root, files, cases = load_set()
    assert root == SET_DIR and len(files) >= 20 and len(cases) >= 40
    assert {case["kind"] for case in cases} == {"answerable", "unanswerable"}


def test_load_set_refuses_a_case_whose_file_is_not_in_the_manifest(tmp_path):
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump({"files": [{"path": "files/a.csv", "format": "csv"}]}))
    (tmp_path / "questions.yml").write_text(yaml.safe_dump({"cases": [{**CASE, "file": "files/b.csv"}]}))
    with pytest.raises(ValueError, match="x-1"):
        load_set(tmp_path)
    with pytest.raises(FileNotFoundError, match="manifest.yml"):
        load_set(tmp_path / "missing")


def test_judge_right_needs_the_value_and_its_file_cited_clean_needs_a_short_answer():
    assert judge(CASE, result("Marketing; Q4: $12,500 [S1]"))["verdict"] == "clean"
    assert judge(CASE, result("Q4 was 12500 [S1]"))["verdict"] == "clean"  # an alias
    assert judge(CASE, result("Marketing; Q4: $12,500 [S1]", cited="files/other.csv"))["verdict"] == "wrong"
    dump = "Budget [S1]\n\n" + "\n".join(f"- Line {n}: spend of the region in the quarter $12,500 [S1]"
                                         for n in range(12))
    assert judge(CASE, result(dump))["verdict"] == "buried"  # 12 rows and 110 words, not asked for a list
    missed = judge(CASE, result("I couldn't find it.", status="fallback", cited=""))
    assert (missed["verdict"], missed["present"], missed["side"]) == ("abstained", True, "answer")
    elsewhere = {**CASE, "answer": "$99,000", "aliases": []}
    assert judge(elsewhere, result("No."))["side"] == "document"  # the value is in no passage of its file
    unanswerable = {**CASE, "kind": "unanswerable", "answer": None}
    assert judge(unanswerable, result("I couldn't find it.", status="fallback", cited=""))["verdict"] == "abstained"


def test_a_list_question_lifts_the_length_limit():
    assert asks_list("List the regions with a budget") and asks_list("Which items are in all four quarters?")
    assert not asks_list("What is the Q4 marketing budget?")
    assert is_clean(" ".join(["word"] * 120), "List every line of the budget")
    assert not is_clean(" ".join(["word"] * 120), "What is the budget?")


def test_clean_needs_both_at_most_80_words_and_at_most_8_rows():
    notes = "- " + " ".join(["speaker notes word"] * 75) + " $12,500 [S1]"  # one bullet of 226 words
    assert judge(CASE, result(notes))["verdict"] == "buried"
    wide = "- " + "; ".join(f"Column {n}: value {n}" for n in range(56)) + "; Q4: $12,500 [S1]"  # one row, 56 columns
    assert judge(CASE, result(wide))["verdict"] == "buried" and judge(CASE, result(wide))["over_long"]
    rows = "\n".join(f"- Q{n}: $12,500 [S1]" for n in range(9))  # 9 short rows, 27 words
    assert judge(CASE, result(rows))["verdict"] == "buried"
    assert judge(CASE, result("\n".join(f"- Q{n}: $12,500 [S1]" for n in range(8))))["verdict"] == "clean"
    assert judge({**CASE, "kind": "unanswerable"}, result(notes))["over_long"]  # a wrong answer is over-long too
    within = "Q4 was $12,500 " + "and more words " * 25 + "[S1]"  # 79 words, then the partial notice (not counted)
    assert judge(CASE, result(f"{within}\n\n{partial_notice()}", status="partial"))["verdict"] == "clean"
    assert partial_notice().startswith("Note:")  # ask.yml's response builder's


def test_summarise_counts_per_verdict():
    rows = [{**CASE, **judge(CASE, result(answer, status))} for answer, status in
            [("$12,500 [S1]", "success"), ("No idea", "fallback"), ("$1 [S1]", "partial")]]
    rows.append({**CASE, "kind": "unanswerable", **judge({**CASE, "kind": "unanswerable"}, result("x", "fallback"))})
    summary = summarise(rows)
    assert (summary["answerable"], summary["clean"], summary["abstained"], summary["wrong"]) == (3, 1, 1, 1)
    assert (summary["present_abstained"], summary["answer_side"], summary["unanswerable_abstained"]) == (1, 2, 1)
    assert (summary["answered"], summary["over_long"]) == (2, 0)


def test_the_ingest_table_gives_cpu_per_mb_net_of_each_sides_start_and_the_load():
    from gatehouse.eval.documents_bench import format_table

    def side(start_cpu: float, cpu: float, seconds: float) -> dict:
        return {"start": {"seconds": 2.0, "cpu": start_cpu, "load": 3.0}, "answers": {},
                "ingest": {"md": {"seconds": seconds, "cpu": cpu, "megabytes": 0.5, "load": 4.5, "failed": [],
                                  "chunks": 3, "documents": 1}}}

    report = {"formats": ["md"], "generators": [],
              "sides": {"this checkout": side(10.0, 11.0, 3.0), "baseline": side(8.0, 10.0, 2.5)}}
    table = format_table(report)
    assert "| md | 0.50 | 6.0 | 2.0 | 4.5 | 5.0 | 4.0 | 4.5 | - |" in table
    assert "start (a one-line markdown file): this checkout 2.0 s, CPU 10.0 s (load 3.0); baseline 2.0 s" in table
    assert "ingest seconds, this checkout / baseline: 1.20; CPU net of the start: 0.50" in table
