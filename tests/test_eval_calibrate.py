"""Threshold calibration: the precision/recall choice, reading the score from the path, editing the YAML."""

import shutil

import pytest
import yaml

from gatehouse.settings import bundled_dir
from gatehouse.eval.calibrate import first_attempt_score, propose, write_threshold

PROJECT_ROOT = bundled_dir()  # the shipped pipelines, sample KBs and manifest


def test_first_attempt_score_comes_from_the_path():
    response = {"path": ["start", "route_to_faq", "attempt_0_score_0.42", "rewrite_and_retry", "attempt_1_score_0.70"]}
    assert first_attempt_score(response) == 0.42
    assert first_attempt_score({"path": ["start", "refuse"]}) is None


def test_propose_keeps_a_threshold_that_already_meets_the_target():
    points = [(0.9, True), (0.7, True), (0.5, False)]
    result = propose(points, current=0.6, target_precision=0.9)
    assert result["threshold"] == 0.6
    assert (result["precision"], result["recall"]) == (1.0, 1.0)


def test_propose_raises_a_threshold_that_lets_unanswerable_questions_pass():
    # At 0.4 all four pass: precision 2/4. Candidates: 0.5, 0.6, 0.75, 0.85.
    # 0.6 -> passes 0.7, 0.8, 0.9: precision 2/3; 0.75 -> 0.8, 0.9: 1/2; 0.85 -> 0.9: 1/1, recall 1/2.
    points = [(0.9, True), (0.8, False), (0.7, True), (0.5, False)]
    result = propose(points, current=0.4, target_precision=0.9)
    assert result["threshold"] == 0.85
    assert (result["precision"], result["recall"]) == (1.0, 0.5)
    assert result["current_precision"] == 0.5


def test_propose_falls_back_to_the_best_f1_when_no_threshold_is_precise_enough():
    # Candidates 0.6 (P 2/3, R 1, F1 0.8), 0.7 (P 1/2, R 1/2), 0.85 (P 0/1) -> 0.6.
    points = [(0.9, False), (0.8, True), (0.6, True)]
    result = propose(points, current=0.75, target_precision=0.99)
    assert result["threshold"] == 0.6
    assert result["reason"].startswith("no threshold reaches")


def test_propose_keeps_the_threshold_without_both_labels():
    assert propose([(0.9, True)], current=0.5, target_precision=0.9)["reason"] == (
        "kept: no unanswerable case reached this KB")


def test_write_threshold_edits_the_kb_entry(tmp_path):
    entry = tmp_path / "kb.yml"
    shutil.copyfile(PROJECT_ROOT / "kb" / "product" / "kb.yml", entry)
    before = entry.read_text(encoding="utf-8")
    write_threshold(entry, 0.71)
    after = entry.read_text(encoding="utf-8")
    assert yaml.safe_load(after) == {**yaml.safe_load(before), "threshold": pytest.approx(0.71)}
    assert [line for line in after.splitlines() if line.lstrip().startswith("#")] == [
        line for line in before.splitlines() if line.lstrip().startswith("#")]
    bare = tmp_path / "bare.yml"
    bare.write_text("description: Widgets", encoding="utf-8")
    write_threshold(bare, 0.5)
    assert yaml.safe_load(bare.read_text(encoding="utf-8")) == {"description": "Widgets", "threshold": 0.5}

