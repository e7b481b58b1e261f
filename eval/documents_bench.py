"""
`gatehouse bench documents`: real Office, PDF and data files ingested into a fresh knowledge base and asked questions
written before any answer was seen, judged per format; ingest seconds per MB per format beside another checkout's
Gatehouse (a baseline) in the same run.

Ingest figures per format and side: wall seconds per MB of the `ingest` call (pipeline load included), and CPU seconds
per MB net of the start: the CPU of the side's whole process tree (its interpreter, model, pipeline, chunker worker
and converter processes) less that of the same side's ingest of a one-line markdown file (`START_FILE`, measured
first). A set of a few kilobytes measures mostly the start (the start line shows it); CPU time moves little with the
machine's load, which each figure's line prints beside it.

A set is a folder (default `eval/sets/documents/`) with `manifest.yml` (each file's path, format, repository, commit
and licence), `questions.yml` (`cases`: id, kind `answerable` or `unanswerable`, format, file, question, answer,
aliases) and the files. Each side (this checkout, and the baseline's interpreter with `--baseline-python`) runs in
processes of its own (this file run by path with `--worker`, so the baseline runs it against its own `gatehouse`
package), into a data folder of its own: one format's files are ingested at a time, the sides taking turns, so both
see the same machine; then every question is asked through `ask.yml` (answer cache off, the KB named) and searched
through `retrieve.yml` (what the answer step was given).

Judging (printed with the table):
- right: the answer (or an alias), normalised (case, markup, quotes, spaces), is in the answer as whole words, and
  the question's file is cited;
- clean: right, and the answer short: at most `CLEAN_WORDS` words and at most `CLEAN_ROWS` list rows (a table row
  counts its words too), unless the question asks for a list; right but not clean is buried;
- over-long: an answered response (right or wrong, either kind) that is not short, the question not asking for a list
  (a partial answer's notice, the status in words that `ask.yml`'s response builder adds as its last paragraph, is not
  counted: it is the same sentence on every partial answer);
- wrong: answered (not fallback or refused, with a citation) and not right; abstained: not answered;
- present but abstained: abstained on an answerable question whose answer is in the passages retrieved from its file;
- a miss (answerable, not right and clean) is the document side's when the answer is in none of the first
  `PASSAGES` passages retrieved from its file (found, chunked or cut wrongly), else the answer side's;
- unanswerable: abstained is right.

Usage:
```bash
gatehouse bench documents                                                    # this checkout only
gatehouse bench documents --baseline-python /work/main/.venv/bin/python      # beside another checkout
```
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

SET_DIR = Path(__file__).resolve().parent / "sets" / "documents"
KB = "documents"
CLEAN_WORDS = 80
CLEAN_ROWS = 8
PASSAGES = 6  # the passages the answer step reads (answer.yml's assembler.top_k)
START_FILE = "# Start\n\nOne line.\n"  # the ingest whose cost every side pays before its first byte
ABSTAINED = ("fallback", "refused")
_ASKS_LIST = re.compile(r"^\W*(?:list|name (?:all|every|each))\b|\b(?:all|every|each of)\b", re.IGNORECASE)
_MARKERS = re.compile(r"\[\s*S\d+(?:\s*[,;]\s*S\d+)*\s*\]", re.IGNORECASE)
_ROW = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s", re.MULTILINE)


# -- the worker: runs in each side's interpreter, on APIs every version has ----------------------------------------
def _ingest(files: list[str], root: str) -> dict[str, Any]:
    from gatehouse.components.embedders.embedding import EmbeddingBackend
    from gatehouse.ingest import IngestGroup, ingest

    EmbeddingBackend.get().embed(["warm up"], batch_size=1)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    summary = ingest([IngestGroup(kb=KB, tenant=None, root=Path(root), files=[Path(f) for f in files])],
                     progress=False)
    return {"seconds": time.perf_counter() - started, "documents": summary.documents_written,
            "chunks": summary.chunks_written, "failed": summary.failed, "load": load}


def _ask(cases: list[dict[str, Any]], generator: str | None) -> list[dict[str, Any]]:
    import yaml

    from gatehouse.ask import run_ask
    from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline
    from gatehouse.pipelines import load_pipeline, pipeline_path, without_answer_cache

    spec = without_answer_cache(yaml.safe_load(pipeline_path("ask").read_text(encoding="utf-8")))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ask-documents.yml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        pipeline = load_pipeline(path, generator=generator)
    pipeline.warm_up()
    retrieval = RetrievalPipeline(pipeline_file="retrieve")
    retrieval.warm_up()
    out = []
    for case in cases:
        started = time.perf_counter()
        response = run_ask(pipeline, case["question"], kb=KB)
        seconds = time.perf_counter() - started
        passages = retrieval.run(query=case["question"], tenant=None, kbs=[KB])["documents"][:PASSAGES]
        out.append({"answer": response.get("answer") or "", "status": response.get("status"),
                    "citations": [str(c.get("source") or "") for c in response.get("citations") or []],
                    "passages": [{"source": str(d.meta.get("source") or ""), "content": d.content or ""}
                                 for d in passages],
                    "seconds": round(seconds, 2)})
    return out


def _worker(request: dict[str, Any]) -> Any:
    from gatehouse import runtime

    runtime.configure()
    if request["job"] == "ingest":
        return _ingest(request["files"], request["root"])
    return _ask(request["cases"], request.get("generator"))


def _run_side(python: str, data: Path, request: dict[str, Any]) -> Any:
    """
    One worker run of the interpreter `python` over the data folder `data`; an ingest's result gains `cpu`, the CPU
    seconds of the run's whole process tree.
    """
    environment = {**{k: v for k, v in os.environ.items() if k not in ("GATEHOUSE_PIPELINES_DIR",
                                                                         "GATEHOUSE_EMBEDDING_CACHE")},
                   "GATEHOUSE_DATA_DIR": str(data), "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1",
                   "PYTHONWARNINGS": "ignore"}
    before = _children_cpu()
    with tempfile.TemporaryDirectory() as elsewhere:  # not a project folder: each side reads the pipelines it ships
        done = subprocess.run([python, str(Path(__file__).resolve()), "--worker", json.dumps(request)],
                              env=environment, capture_output=True, text=True, check=False, cwd=elsewhere)
    if done.returncode != 0:
        raise RuntimeError(f"{python}: the documents worker failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if request["job"] == "ingest":
        result["cpu"] = _children_cpu() - before
    return result


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's ended children and of the processes they waited for."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- judging --------------------------------------------------------------------------------------------------------
def _normalise(text: str) -> str:
    from gatehouse.eval.domains_bench import normalise

    return normalise(_MARKERS.sub(" ", text))


def contains(text: str, answer: str | None, aliases: list[str]) -> bool:
    """Whether `text` holds the answer or an alias as whole normalised words."""
    haystack = f" {_normalise(text)} "
    return any(wanted and f" {wanted} " in haystack
               for wanted in (_normalise(str(candidate)) for candidate in [answer, *aliases] if candidate))


def asks_list(question: str) -> bool:
    """Whether a question asks for a list (`List ...`, `Name all ...`, `... all / every / each of ...`)."""
    return bool(_ASKS_LIST.search(question))


@lru_cache(maxsize=1)
def partial_notice() -> str:
    """The paragraph `ask.yml`'s response builder adds to a partial answer ("" when it adds none)."""
    import yaml

    from gatehouse.components.builders.response_builder import DEFAULT_PARTIAL_NOTICE
    from gatehouse.pipelines import pipeline_path

    spec = yaml.safe_load(pipeline_path("ask").read_text(encoding="utf-8"))
    for component in (spec.get("components") or {}).values():
        if str(component.get("type", "")).endswith(".ResponseBuilder"):
            return str((component.get("init_parameters") or {}).get("partial_notice", DEFAULT_PARTIAL_NOTICE))
    return ""


def without_notice(answer: str) -> str:
    """An answer without the partial notice as its last paragraph."""
    notice, text = partial_notice(), answer.rstrip()
    return text[: -len(notice)].rstrip() if notice and text.endswith(notice) else answer


def is_clean(answer: str, question: str) -> bool:
    """At most `CLEAN_WORDS` words and at most `CLEAN_ROWS` list rows (markers not counted), unless the question asks
    for a list."""
    text = _MARKERS.sub(" ", answer)
    return asks_list(question) or (len(text.split()) <= CLEAN_WORDS and len(_ROW.findall(text)) <= CLEAN_ROWS)


def judge(case: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The verdict on one answer (see the module docstring)."""
    answered = result["status"] not in ABSTAINED and bool(result["citations"])
    over_long = answered and not is_clean(without_notice(result["answer"]), case["question"])
    if case["kind"] == "unanswerable":
        return {"answered": answered, "verdict": "abstained" if not answered else "wrong", "side": None,
                "over_long": over_long}
    aliases = [str(alias) for alias in case.get("aliases") or []]
    wanted = case["file"]
    present = any(passage["source"] == wanted and contains(passage["content"], case["answer"], aliases)
                  for passage in result["passages"])
    right = answered and contains(result["answer"], case["answer"], aliases) and wanted in result["citations"]
    if right:
        verdict = "buried" if over_long else "clean"
    else:
        verdict = "wrong" if answered else "abstained"
    side = None if verdict == "clean" else ("answer" if present else "document")
    return {"answered": answered, "verdict": verdict, "present": present, "side": side, "over_long": over_long}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """
    Counts of judged rows (each a case's `kind` with its `judge` verdict): answerable (clean, buried, wrong,
    abstained, present but abstained, misses per side), unanswerable abstained, answered and over-long (either kind).
    """
    answerable = [row for row in rows if row["kind"] == "answerable"]
    unanswerable = [row for row in rows if row["kind"] == "unanswerable"]
    counts = {key: sum(1 for v in answerable if v["verdict"] == key) for key in ("clean", "buried", "wrong",
                                                                                   "abstained")}
    return {"answerable": len(answerable), **counts,
            "present_abstained": sum(1 for v in answerable if v["verdict"] == "abstained" and v["present"]),
            "document_side": sum(1 for v in answerable if v["side"] == "document"),
            "answer_side": sum(1 for v in answerable if v["side"] == "answer"),
            "unanswerable": len(unanswerable),
            "unanswerable_abstained": sum(1 for v in unanswerable if v["verdict"] == "abstained"),
            "answered": sum(1 for v in rows if v["answered"]),
            "over_long": sum(1 for v in rows if v.get("over_long"))}


# -- running --------------------------------------------------------------------------------------------------------
def load_set(folder: str | Path | None = None) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    """
    A document set: its folder, its files (manifest.yml) and its cases (questions.yml).

    :raises FileNotFoundError: When the folder has no manifest.yml or questions.yml.
    :raises ValueError: When a case names a file the manifest does not hold, or has no question or kind.
    """
    import yaml

    root = Path(folder).expanduser().resolve() if folder else SET_DIR
    for name in ("manifest.yml", "questions.yml"):
        if not (root / name).is_file():
            raise FileNotFoundError(f"{root / name} not found: a document set needs manifest.yml and questions.yml")
    files = yaml.safe_load((root / "manifest.yml").read_text(encoding="utf-8"))["files"]
    cases = yaml.safe_load((root / "questions.yml").read_text(encoding="utf-8"))["cases"]
    known = {item["path"] for item in files}
    for case in cases:
        if case.get("kind") not in ("answerable", "unanswerable") or not str(case.get("question") or "").strip() \
                or case.get("file") not in known:
            raise ValueError(f"{root / 'questions.yml'}: case {case.get('id')!r} needs a question, a kind "
                             "(answerable or unanswerable) and a file of the manifest")
    return root, files, cases


def run_benchmark(*, set_dir: str | Path | None = None, baseline_python: str | None = None,
                  generators: list[str] | None = None, workdir: str | Path | None = None,
                  progress: bool = True) -> dict[str, Any]:
    """
    Ingest the set's files format by format on each side, then ask and judge every question.

    :param set_dir: The set's folder (default `eval/sets/documents/`).
    :param baseline_python: The interpreter of another checkout's environment, measured beside this one.
    :param generators: `extractive` (ask.yml's own) and/or generator profiles (`llm`).
    :param workdir: Where the sides' data folders go (default `<data dir>/bench/documents`); emptied first.
    :param progress: Print a line per step on stderr.
    :raises ValueError: If `baseline_python` is not an executable file.
    """
    import shutil

    from gatehouse import settings

    if baseline_python and not os.access(baseline_python, os.X_OK):
        raise ValueError(f"--baseline-python {baseline_python} is not an executable interpreter.")
    root, files, cases = load_set(set_dir)
    sides = {"this checkout": sys.executable, **({"baseline": baseline_python} if baseline_python else {})}
    work = Path(workdir).expanduser().resolve() if workdir else settings.data_dir() / "bench" / "documents"
    formats = sorted({item["format"] for item in files})
    report: dict[str, Any] = {"set": str(root), "workdir": str(work), "generators": generators or ["extractive"],
                              "formats": formats, "sides": {}}
    for name, python in sides.items():
        shutil.rmtree(work / name.replace(" ", "-"), ignore_errors=True)
        start = _start(python, work / f"{name} start".replace(" ", "-"))
        report["sides"][name] = {"ingest": {}, "answers": {}, "start": start}
        if progress:
            print(f"[{name}] start: {start['seconds']:.1f} s, CPU {start['cpu']:.1f} s (load {start['load']:.1f})",
                  file=sys.stderr, flush=True)
    for fmt in formats:
        chosen = [str(root / item["path"]) for item in files if item["format"] == fmt]
        size = sum((root / item["path"]).stat().st_size for item in files if item["format"] == fmt)
        for name, python in sides.items():
            done = _run_side(python, work / name.replace(" ", "-"), {"job": "ingest", "files": chosen,
                                                                      "root": str(root)})
            done["megabytes"] = size / 1e6
            report["sides"][name]["ingest"][fmt] = done
            if progress:
                print(f"[{name}] {fmt}: {len(chosen)} files, {size / 1e6:.2f} MB in {done['seconds']:.1f} s, CPU "
                      f"{done['cpu']:.1f} s, {done['chunks']} chunks, {len(done['failed'])} failed (load "
                      f"{done['load']:.1f})", file=sys.stderr, flush=True)
    for generator in report["generators"]:
        for name, python in sides.items():
            results = _run_side(python, work / name.replace(" ", "-"), {
                "job": "ask", "cases": cases, "generator": None if generator == "extractive" else generator})
            rows = []
            for case, result in zip(cases, results):
                rows.append({**{key: case.get(key) for key in ("id", "kind", "format", "file", "question")},
                             "gold": case.get("answer"), **result, **judge(case, result)})
                if progress:
                    print(f"[{name} {generator}] {case['id']} {rows[-1]['verdict']} {result['status']}",
                          file=sys.stderr, flush=True)
            report["sides"][name]["answers"][generator] = rows
    return report


def _start(python: str, work: Path) -> dict[str, Any]:
    """A side's ingest of `START_FILE` alone into a data folder of its own: what every ingest pays before its files."""
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    (work / "files").mkdir(parents=True)
    (work / "files" / "start.md").write_text(START_FILE, encoding="utf-8")
    return _run_side(python, work / "data", {"job": "ingest", "files": [str(work / "files" / "start.md")],
                                             "root": str(work / "files")})


def net_cpu_per_mb(done: dict[str, Any], start: dict[str, Any]) -> float:
    """CPU seconds per MB of a format's ingest less the side's start (see the module docstring)."""
    return (done["cpu"] - start["cpu"]) / max(done["megabytes"], 1e-9)


def _per_format(rows: list[dict[str, Any]], fmt: str | None) -> dict[str, Any]:
    return summarise([row for row in rows if fmt is None or row["format"] == fmt])


def _share(hits: int, total: int) -> str:
    return f"{hits / total:.2f} ({hits}/{total})" if total else "-"


def format_table(report: dict[str, Any]) -> str:
    """The report as markdown tables (per format, each side and generator) with the judging rule."""
    sides = report["sides"]
    lines = ["Documents benchmark (real files; questions written before any answer was seen)", ""]
    lines += ["| format | files MB | " + " | ".join(f"ingest s/MB ({name}) | CPU s/MB net of start ({name}) | load"
                                                  for name in sides) + " | failed |",
              "| --- | --- | " + " | ".join("--- | --- | ---" for _ in sides) + " | --- |"]
    for fmt in report["formats"]:
        first = next(iter(sides.values()))["ingest"][fmt]
        speeds = [f"{side['ingest'][fmt]['seconds'] / max(side['ingest'][fmt]['megabytes'], 1e-9):.1f} | "
                  f"{net_cpu_per_mb(side['ingest'][fmt], side['start']):.1f} | {side['ingest'][fmt]['load']:.1f}"
                  for side in sides.values()]
        failed = "; ".join(f"{item['source']}: {item['reason']}" for item in first["failed"]) or "-"
        lines.append(f"| {fmt} | {first['megabytes']:.2f} | {' | '.join(speeds)} | {failed} |")
    lines += ["", "start (a one-line markdown file): " + "; ".join(
        f"{name} {side['start']['seconds']:.1f} s, CPU {side['start']['cpu']:.1f} s (load {side['start']['load']:.1f})"
        for name, side in sides.items())]
    if len(sides) == 2:
        this, base = (sum(side["ingest"][f]["seconds"] for f in report["formats"]) for side in sides.values())
        this_cpu, base_cpu = (sum(side["ingest"][f]["cpu"] - side["start"]["cpu"] for f in report["formats"])
                              for side in sides.values())
        cpu_ratio = f"{this_cpu / base_cpu:.2f}" if base_cpu > 0 else "-"
        lines += ["", f"ingest seconds, this checkout / baseline: {this / base:.2f}; CPU net of the start: {cpu_ratio}"]
    for generator in report["generators"]:
        for name, side in sides.items():
            rows = side["answers"][generator]
            lines += ["", f"{name}, {generator}:", "",
                      "| format | answerable | right and clean | right but buried | wrong | abstained | value present "
                      "but abstained | misses: document side / answer side | unanswerable abstained | over-long / answered |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for fmt in [*report["formats"], None]:
                s = _per_format(rows, fmt)
                lines.append(f"| {fmt or 'all'} | {s['answerable']} | {_share(s['clean'], s['answerable'])} | "
                             f"{s['buried']} | {s['wrong']} | {s['abstained']} | {s['present_abstained']} | "
                             f"{s['document_side']} / {s['answer_side']} | "
                             f"{_share(s['unanswerable_abstained'], s['unanswerable'])} | "
                             f"{s['over_long']} / {s['answered']} |")
    lines += ["", f"Judging: right = the answer string or an alias (normalised: case, markup, quotes, spaces) in the "
                  f"answer as whole words and the question's file cited; clean = right and short: at most {CLEAN_WORDS} "
                  f"words and at most {CLEAN_ROWS} list rows, unless the question asks for a list; buried = right, "
                  "not short (a partial answer's notice not counted); over-long = answered (either kind), not short; wrong = answered (not fallback/refused, with a citation), not right; abstained = not "
                  f"answered. A miss is the document side's when the answer is in none of the first {PASSAGES} "
                  "passages retrieved from its file, else the answer side's. Ingest: each format's files in one "
                  "run into a fresh data folder, the sides taking turns."]
    return "\n".join(lines)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--worker":
    print(json.dumps(_worker(json.loads(sys.argv[2]))))
