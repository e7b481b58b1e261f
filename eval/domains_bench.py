"""
`gatehouse bench domains`: Gatehouse on documentation nobody on the team wrote.

Each question set of `eval/sets/domains/` names a corpus: a folder of `docs_corpora/` under the shared data folder
(or `--corpora PATH`), or `sample` (the sample knowledge bases). Every corpus present is ingested as its own knowledge
base into one benchmark data folder (`<workdir>/data`), with no KB entry in any YAML: the router, the intent gate and
the other gates know each KB only from what ingest learned of it. Every question then runs through the real ask
pipeline without naming a KB (routed, as a user asks), once per generator (`extractive`, the YAML's own, and `llm`,
the profile of `pipelines/generators/llm.yml`, which needs `gatehouse llm serve`).

The sets were written by people who had read only the corpus, before any answer was seen (`written_by` in each file).
Which set the gates were tuned on is the set's `role: tune`; every other set is reported on.

Judging (printed with the table):
- **answerable correct and cited**: the gold answer (or an alias), normalised (case, markup, quotes, dashes, spaces),
  appears in the answer as whole words, or the token F1 of the gold answer against one of the answer's sentences is at
  least 0.5; and a gold source file is among the citations; and the status is `success` or `partial`.
- **unanswerable abstained**: status `fallback` or `refused`, or an answer with no citation.
- **wrong with status success**: status `success` on an answer judged wrong (an answerable one not correct and cited,
  or an unanswerable one answered), as a share of all answers.
- **multi-part handled**: every answerable part correct (its gold in the answer) with one of its gold files cited, and
  when a part is not answerable, the status is not `success` (the answer says what was not found). A follow-up is
  handled when it is correct and cited.
- **first passage / first three hold the answer** (answerable questions): the passage the answer step ranked first
  (one of the first three) is from a gold file and holds the gold answer by the same rule as an answer. Printed beside
  the share answered right, it is the loss between retrieval and answer.

With `baseline_python` (another checkout's environment), the same benchmark (this file, run by path) runs in that
interpreter against its own Gatehouse, in its own data folder, and both sides are printed in one table.

Usage:
```python
from gatehouse.eval.domains_bench import format_table, run_benchmark

report = run_benchmark(generators=["extractive"], sets=["httpx"], limit=10)
print(format_table(report))
```
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gatehouse import settings
from gatehouse.stats import percentile

SETS_DIR = Path(__file__).resolve().parent / "sets" / "domains"
KINDS = ("answerable", "unanswerable", "follow-up", "multi-part")
SAMPLE_CORPUS = "sample"
F1_THRESHOLD = 0.5
ABSTAINED = ("fallback", "refused")


@dataclass
class Part:
    """One part of a multi-part question."""

    question: str
    answer: str | None = None
    aliases: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    answerable: bool = True


@dataclass
class Case:
    """One question of a domain set."""

    id: str
    kind: str
    question: str
    history: list[dict[str, str]] = field(default_factory=list)
    answer: str | None = None
    aliases: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)


@dataclass
class DomainSet:
    """A question set about one corpus."""

    name: str
    corpus: str
    kb: str | None
    role: str
    cases: list[Case]


def _strings(value: Any) -> list[str]:
    return [str(item) for item in value or []]


def load_set(path: str | Path) -> DomainSet:
    """
    Read one question set (format: `eval/sets/domains/README.md`).

    :raises ValueError: On a case of an unknown kind or without a question.
    """
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    cases = []
    for item in raw.get("cases") or []:
        kind = item.get("kind")
        if kind not in KINDS or not str(item.get("question") or "").strip():
            raise ValueError(f"{path}: case {item.get('id')!r} needs a question and a kind of {', '.join(KINDS)}.")
        parts = [
            Part(question=str(p["question"]), answer=None if p.get("answer") is None else str(p["answer"]),
                 aliases=_strings(p.get("aliases")), sources=_strings(p.get("sources")),
                 answerable=bool(p.get("answerable", True)))
            for p in item.get("parts") or []
        ]
        cases.append(Case(
            id=str(item["id"]), kind=kind, question=str(item["question"]),
            history=[{"role": str(t["role"]), "content": str(t["content"])} for t in item.get("history") or []],
            answer=None if item.get("answer") is None else str(item["answer"]),
            aliases=_strings(item.get("aliases")), sources=_strings(item.get("sources")), parts=parts,
        ))
    return DomainSet(name=str(raw["name"]), corpus=str(raw["corpus"]), kb=raw.get("kb"),
                     role=str(raw.get("role") or "report"), cases=cases)


def available_sets() -> list[Path]:
    """The question sets shipped in `eval/sets/domains/`."""
    return sorted(SETS_DIR.glob("*.yml"))


def set_files(sets: list[str] | None) -> list[Path]:
    """
    The files of the sets asked for: every shipped set, or each named one (`httpx`) or YAML file (`my/set.yml`).

    :raises ValueError: Naming a set that is neither shipped nor a file.
    """
    if not sets:
        return available_sets()
    shipped = {path.stem: path for path in available_sets()}
    files = [Path(name) if name.endswith((".yml", ".yaml")) else shipped.get(name) for name in sets]
    unknown = [name for name, path in zip(sets, files) if path is None or not path.is_file()]
    if unknown:
        raise ValueError(f"Unknown domain set {', '.join(unknown)}; known sets: {', '.join(shipped)} (or a YAML file).")
    return files


# -- judging --------------------------------------------------------------------------------------------------------
_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-", "\u00a0": " "})
_MARKERS = re.compile(r"\[\s*S\d+(?:\s*[,;]\s*S\d+)*\s*\]", re.IGNORECASE)
_WORDS = re.compile(r"[^\W_]+(?:[._/:-][^\W_]+)*")


def normalise(text: str | None) -> str:
    """Case-folded words of a text, markup, citation markers and punctuation between words dropped."""
    text = unicodedata.normalize("NFKC", _MARKERS.sub(" ", text or "")).translate(_QUOTES).casefold()
    return " ".join(_WORDS.findall(text))


def token_f1(gold: str, text: str) -> float:
    """The token F1 of `text` against `gold` (bags of normalised words)."""
    g, t = normalise(gold).split(), normalise(text).split()
    common = sum((Counter(g) & Counter(t)).values())
    if not common:
        return 0.0
    precision, recall = common / len(t), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _sentences(answer: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?:])\s+|\n+", _MARKERS.sub(" ", answer or "")) if s.strip()]


def answer_correct(answer: str, gold: str | None, aliases: list[str]) -> bool:
    """Whether the answer holds the gold answer: as whole normalised words, or at token F1 >= 0.5 in one sentence."""
    if not gold:
        return False
    text = f" {normalise(answer)} "
    for candidate in [gold, *aliases]:
        wanted = normalise(candidate)
        if wanted and f" {wanted} " in text:
            return True
    return any(token_f1(gold, sentence) >= F1_THRESHOLD for sentence in _sentences(answer))


def cited(response: dict[str, Any], sources: list[str]) -> bool:
    """Whether one of the gold files is among the response's citations (by path, with or without its KB folder)."""
    return any(_is_gold(citation, sources) for citation in response.get("citations") or [])


def _is_gold(reference: dict[str, Any], sources: list[str]) -> bool:
    """Whether a citation or passage (`source`, `kb`) is one of the gold files."""
    wanted = {s.strip("/") for s in sources}
    source = str(reference.get("source") or "").strip("/")
    return source in wanted or f"{reference.get('kb') or ''}/{source}" in wanted


def passages_hold(case: Case, passages: list[dict[str, Any]]) -> dict[str, bool]:
    """
    Whether the first passage, and one of the first three, is from a gold file and holds the gold answer (as an
    answer does: `answer_correct`).

    :param case: An answerable case.
    :param passages: The passages the answer step ranked, best first (`source`, `kb`, `text`).
    """
    holds = [_is_gold(p, case.sources) and answer_correct(str(p.get("text") or ""), case.answer, case.aliases)
             for p in passages[:3]]
    return {"first_passage": any(holds[:1]), "first_three": any(holds)}


def judge(case: Case, response: dict[str, Any], passages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """
    The verdict on one answer: `correct` (answerable kinds), `abstained`, `handled`, `wrong_success`; for an
    answerable question with its `passages` (best first), `first_passage` and `first_three` (`passages_hold`).
    """
    status = response.get("status")
    answer = response.get("answer") or ""
    answered = status not in ABSTAINED and bool(response.get("citations"))
    verdict: dict[str, Any] = {"status": status, "answered": answered}
    if case.kind == "unanswerable":
        verdict["abstained"] = not answered
        verdict["wrong"] = answered
    elif case.kind == "multi-part":
        parts = []
        for part in case.parts:
            if part.answerable:
                parts.append(answered and answer_correct(answer, part.answer, part.aliases)
                             and cited(response, part.sources))
            else:
                parts.append(status != "success")
        verdict["parts"] = parts
        verdict["handled"] = all(parts)
        verdict["wrong"] = not verdict["handled"]
    else:
        correct = answered and answer_correct(answer, case.answer, case.aliases) and cited(response, case.sources)
        verdict["correct"] = correct
        verdict["handled"] = correct
        verdict["wrong"] = answered and not correct
        if case.kind == "answerable" and passages is not None:
            verdict.update(passages_hold(case, passages))
    verdict["wrong_success"] = bool(verdict["wrong"]) and status == "success"
    return verdict


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-kind shares and counts of one set's judged rows."""

    def share(selected: list[dict[str, Any]], key: str) -> dict[str, Any]:
        hits = sum(1 for row in selected if row["verdict"].get(key))
        return {"n": len(selected), "hits": hits, "share": round(hits / len(selected), 3) if selected else None}

    by_kind = {kind: [row for row in rows if row["kind"] == kind] for kind in KINDS}
    latencies = [row["seconds"] for row in rows]
    return {
        "first_passage": share(by_kind["answerable"], "first_passage"),
        "first_three": share(by_kind["answerable"], "first_three"),
        "answerable_correct": share(by_kind["answerable"], "correct"),
        "unanswerable_abstained": share(by_kind["unanswerable"], "abstained"),
        "wrong_success": share(rows, "wrong_success"),
        "multi_turn_handled": share(by_kind["follow-up"] + by_kind["multi-part"], "handled"),
        "follow_up_handled": share(by_kind["follow-up"], "handled"),
        "multi_part_handled": share(by_kind["multi-part"], "handled"),
        "latency_p50_s": round(percentile(latencies, 0.5), 3) if latencies else None,
        "prompt_tokens_p50": _p50([row["usage"].get("prompt_tokens") for row in rows if row.get("usage")]),
        "completion_tokens_p50": _p50([row["usage"].get("completion_tokens") for row in rows if row.get("usage")]),
        "cached_prompt_share": _share_of(rows, "cached_prompt_tokens", "prompt_tokens"),
    }


def _share_of(rows: list[dict[str, Any]], part: str, whole: str) -> float | None:
    """The summed usage `part` over the summed usage `whole` of the rows (None without any `whole`)."""
    total = sum(int((row.get("usage") or {}).get(whole) or 0) for row in rows)
    return round(sum(int((row.get("usage") or {}).get(part) or 0) for row in rows) / total, 3) if total else None


def _p50(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if v is not None]
    return round(percentile(numbers, 0.5), 1) if numbers else None


# -- running --------------------------------------------------------------------------------------------------------
def corpora_root(path: str | Path | None = None) -> Path:
    """The folder holding the documentation corpora: `path`, else `docs_corpora` of the shared data folder."""
    if path:
        return Path(path).expanduser().resolve()
    from gatehouse.eval.datasets import data_root

    return data_root() / "docs_corpora"


def _groups(domain: DomainSet, root: Path) -> list[Any]:
    from gatehouse.ingest import IngestGroup, files_under, sample_groups

    if domain.corpus == SAMPLE_CORPUS:
        return sample_groups()
    folder = root / domain.corpus
    return [IngestGroup(kb=domain.kb or domain.corpus, tenant=None, root=folder, files=files_under(folder))]


#: The component of the ask pipeline whose final state holds the passages the answer was made from.
STATE_COMPONENT = "output_guard"


def _ask(pipeline: Any, case: Case, kb: str | None) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    """The response, the first three passages the answer step ranked (or the documents retrieved) and the seconds."""
    started = time.perf_counter()
    result = pipeline.run({"intake": {"query": case.question, "history": case.history, "kb": kb}},
                          include_outputs_from={STATE_COMPONENT})
    seconds = time.perf_counter() - started
    state = (result.get(STATE_COMPONENT) or {}).get("state") or {}
    ranked = state.get("passages") or state.get("best_documents") or state.get("documents") or []
    passages = [{"kb": (doc.meta or {}).get("kb"), "source": (doc.meta or {}).get("source"),
                 "section": (doc.meta or {}).get("section"), "text": doc.content or ""} for doc in ranked[:3]]
    return result["response"]["response"], passages, seconds


def run_benchmark(
    *,
    generators: list[str] | None = None,
    sets: list[str] | None = None,
    corpora: str | Path | None = None,
    workdir: str | Path | None = None,
    pipeline: str | Path = "ask",
    limit: int | None = None,
    name_kb: bool = False,
    progress: bool = True,
    baseline_python: str | None = None,
) -> dict[str, Any]:
    """
    Ingest every corpus present and ask each set's questions with each generator (on this checkout, and on another
    checkout's Gatehouse when `baseline_python` is given).

    :param generators: `extractive` (ask.yml's own generator) and/or generator profiles (`llm`).
    :param sets: Set names (default: every set in `eval/sets/domains/`).
    :param corpora: The folder of the documentation corpora (default: `docs_corpora` of the shared data folder).
    :param workdir: Where the benchmark's data folder goes (default `<data dir>/bench/domains`; the baseline's in
        its `baseline/` folder).
    :param pipeline: The ask pipeline (name or YAML; the baseline asks its own `ask`).
    :param limit: At most this many cases per set (the first of each kind in turn).
    :param name_kb: Name each set's KB in the request (routing is then not measured).
    :param progress: Print a line per question on stderr.
    :param baseline_python: The interpreter of another checkout's environment, measured in the same run.
    :returns: The report: per set and generator the summary and every row (the baseline's under `baseline`).
    :raises ValueError: If `baseline_python` is not an executable file, or a set is unknown.
    """
    if baseline_python and not os.access(baseline_python, os.X_OK):
        raise ValueError(f"--baseline-python {baseline_python} is not an executable interpreter.")
    work = Path(workdir).expanduser().resolve() if workdir else settings.data_dir() / "bench" / "domains"
    chosen = [str(path) for path in set_files(sets)]
    report = _run_side(generators=generators or ["extractive"], sets=chosen, corpora=str(corpora_root(corpora)),
                       workdir=str(work), pipeline=str(pipeline), limit=limit, name_kb=name_kb, progress=progress)
    if baseline_python:
        report["baseline"] = _baseline(baseline_python, generators=generators or ["extractive"], sets=chosen,
                                       corpora=str(corpora_root(corpora)), workdir=str(work / "baseline"),
                                       pipeline="ask", limit=limit, name_kb=name_kb, progress=progress)
        report["baseline"]["python"] = baseline_python
    return report


def _baseline(python: str, **options: Any) -> dict[str, Any]:
    """`_run_side` in the interpreter `python` (this file run by path, against that environment's Gatehouse)."""
    environment = {**{k: v for k, v in os.environ.items() if k not in ("GATEHOUSE_PIPELINES_DIR", "PYTHONPATH")},
                   "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as elsewhere:  # not a project folder: the side reads the pipelines it ships
        output = Path(elsewhere) / "report.json"
        done = subprocess.run([python, str(Path(__file__).resolve()), "--side", json.dumps(options), str(output)],
                              env=environment, stdout=subprocess.DEVNULL, stderr=None, check=False, cwd=elsewhere)
        if done.returncode != 0:
            raise RuntimeError(f"{python}: the baseline's benchmark failed (status {done.returncode}).")
        return json.loads(output.read_text(encoding="utf-8"))


def _run_side(*, generators: list[str], sets: list[str], corpora: str, workdir: str, pipeline: str,
              limit: int | None, name_kb: bool, progress: bool) -> dict[str, Any]:
    """One side of `run_benchmark`: this process's Gatehouse over the sets (YAML paths), in `workdir`."""
    from gatehouse.eval.retrieval_bench import data_dir
    from gatehouse.ingest import ingest
    from gatehouse.pipelines import load_pipeline, pipeline_path, without_answer_cache

    root = Path(corpora)
    chosen = [load_set(path) for path in sets]
    present, skipped = [], {}
    for domain in chosen:
        if domain.corpus != SAMPLE_CORPUS and not (root / domain.corpus).is_dir():
            skipped[domain.name] = f"corpus folder {root / domain.corpus} not found"
        else:
            present.append(domain)
    work = Path(workdir)
    report: dict[str, Any] = {"corpora": str(root), "workdir": str(work), "generators": generators, "routed": not name_kb,
                              "skipped": skipped, "sets": {}}
    if not present:
        return report
    with data_dir(work / "data"):
        started = time.perf_counter()
        ingested = {}
        for domain in present:
            summary = ingest(_groups(domain, root), progress=False)
            ingested[domain.name] = {"documents_written": summary.documents_written,
                                     "chunks_written": summary.chunks_written, "failed": len(summary.failed)}
        report["ingest"] = {"seconds": round(time.perf_counter() - started, 1), "sets": ingested}
        spec = without_answer_cache(yaml.safe_load(pipeline_path(pipeline).read_text(encoding="utf-8")))
        copy = work / "ask-domains.yml"
        copy.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        for generator in generators:
            loaded = load_pipeline(copy, generator=None if generator == "extractive" else generator)
            loaded.warm_up()
            for domain in present:
                cases = _limited(domain.cases, limit)
                rows = []
                for number, case in enumerate(cases, 1):
                    response, passages, seconds = _ask(loaded, case, domain.kb if name_kb else None)
                    verdict = judge(case, response, passages)
                    rows.append({"id": case.id, "kind": case.kind, "question": case.question,
                                 "gold": case.answer if case.kind != "multi-part" else [p.answer for p in case.parts],
                                 "answer": response.get("answer"), "status": response.get("status"),
                                 "citations": [f"{c.get('kb')}/{c.get('source')}" for c in response.get("citations")
                                               or []],
                                 "passages": passages,
                                 "usage": (response.get("metadata") or {}).get("usage") or {},
                                 "path": response.get("path") or [],
                                 "seconds": round(seconds, 3), "verdict": verdict})
                    if progress:
                        mark = "ok" if verdict.get("correct") or verdict.get("abstained") or verdict.get("handled") \
                            else "--"
                        print(f"[{generator} {domain.name} {number}/{len(cases)}] {mark} {case.id} "
                              f"{response.get('status')} {seconds:.1f}s", file=sys.stderr, flush=True)
                report["sets"].setdefault(domain.name, {"role": domain.role, "corpus": domain.corpus,
                                                        "generators": {}})
                report["sets"][domain.name]["generators"][generator] = {"summary": summarise(rows), "rows": rows}
    return report


def _limited(cases: list[Case], limit: int | None) -> list[Case]:
    """The first `limit` cases taking each kind in turn (all when no limit)."""
    if not limit:
        return cases
    queues = {kind: [c for c in cases if c.kind == kind] for kind in KINDS}
    chosen: list[Case] = []
    while len(chosen) < limit and any(queues.values()):
        for kind in KINDS:
            if queues[kind] and len(chosen) < limit:
                chosen.append(queues[kind].pop(0))
    return chosen


def _cell(entry: dict[str, Any]) -> str:
    if not entry or not entry.get("n"):
        return "-"
    return f"{entry['share']:.2f} ({entry['hits']}/{entry['n']})"


def format_table(report: dict[str, Any]) -> str:
    """
    The report as a markdown table, one row per set, side (this checkout, and the baseline when measured) and
    generator, with the judging rule.
    """
    lines = [
        "Documentation benchmark (questions written apart from the code; every KB known only from its ingest)",
        "",
        "| set | role | side | generator | first passage holds it | first 3 hold it | answerable correct+cited | "
        "unanswerable abstained | wrong 'success' (of all) | follow-up handled | multi-part handled | P50 s | "
        "prompt / completion tokens P50 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    sides = {"this checkout": report, **({"baseline": report["baseline"]} if report.get("baseline") else {})}
    names = list(dict.fromkeys(name for side in sides.values() for name in side["sets"]))
    for name in names:
        for side_name, side in sides.items():
            entry = side["sets"].get(name)
            for generator, result in (entry or {}).get("generators", {}).items():
                s = result["summary"]
                tokens = "-" if s["prompt_tokens_p50"] is None else f"{s['prompt_tokens_p50']:.0f} / " \
                                                                    f"{s['completion_tokens_p50']:.0f}"
                if s.get("cached_prompt_share") is not None:
                    tokens += f" ({s['cached_prompt_share']:.0%} of prompt tokens cached)"
                lines.append(f"| {name} | {entry['role']} | {side_name} | {generator} | "
                             f"{_cell(s.get('first_passage'))} | {_cell(s.get('first_three'))} | "
                             f"{_cell(s['answerable_correct'])} | "
                             f"{_cell(s['unanswerable_abstained'])} | {_cell(s['wrong_success'])} | "
                             f"{_cell(s['follow_up_handled'])} | {_cell(s['multi_part_handled'])} | "
                             f"{s['latency_p50_s']} | {tokens} |")
    for name, reason in report.get("skipped", {}).items():
        lines.append(f"| {name} | skipped: {reason} | | | | | | | | | | | |")
    lines += [
        "",
        "Judging: an answer is correct when the gold answer or an alias, normalised (case, markup, quotes, spaces), is "
        f"in it as whole words, or one of its sentences has token F1 >= {F1_THRESHOLD} against the gold answer; it is "
        "cited when a gold file is among its citations. Abstained: status fallback/refused or no citation. A "
        "multi-part question is handled when every answerable part is correct with a gold file cited and, when a part "
        "is unanswerable, the status is not success. The first passage (one of the first three) holds the answer when "
        "it is from a gold file and holds the gold answer by the same rule: the distance to the correct share is what "
        "the step from passage to answer loses.",
        f"Ingest: {report.get('ingest', {}).get('seconds')} s; data in {report['workdir']}."
        + (f" Baseline: {report['baseline'].get('python')}, data in {report['baseline']['workdir']}."
           if report.get("baseline") else ""),
    ]
    return "\n".join(lines)


if __name__ == "__main__" and sys.argv[1:2] == ["--side"]:
    Path(sys.argv[3]).write_text(json.dumps(_run_side(**json.loads(sys.argv[2]))), encoding="utf-8")
