"""The `rag` command: thin typer commands that parse flags, make one call to
the library (`rag_cli.project.Project`), and render the result.

Exit codes: 0 success, 1 the work failed, 2 bad usage or bad input.
Heavy imports happen inside the commands, so `rag --help` is instant.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.errors import Interrupted, RagError

app = typer.Typer(
    name="rag",
    help="Retrieval-augmented generation in the shell: chunk, embed, index, search, rerank, ask, eval.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _print_version(value: bool) -> None:
    if value:
        from rag_cli import __version__

        typer.echo(f"rag-cli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Retrieval-augmented generation in the shell: chunk, embed, index, search, rerank, ask, eval."""


ProjectOpt = Annotated[Optional[Path], typer.Option("-p", "--project", help="Project folder (env RAG_PROJECT; default ./.rag)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout, nothing else.")]
QuietOpt = Annotated[bool, typer.Option("-q", "--quiet", help="No progress or summaries on stderr.")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="Bi-encoder: a model folder or a default name (config: model.embedder)")]
PrecisionOpt = Annotated[Optional[str], typer.Option(
    "--precision", help="int8 or fp32, for a default model (config: model.precision)",
    callback=lambda value: value.lower() if value else value)]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="CPU cores for the models (that many batches at once); 0 = all cores (config: model.threads)")]
StrategyOpt = Annotated[Optional[str], typer.Option("--strategy", help="recursive | fixed | markdown | code | sentence | parent-child | semantic (config: chunk.strategy)")]
SizeOpt = Annotated[Optional[int], typer.Option("--size", help="Chunk size in --unit (config: chunk.size)")]
OverlapOpt = Annotated[Optional[int], typer.Option("--overlap", help="Overlap in --unit, < size (config: chunk.overlap)")]
UnitOpt = Annotated[Optional[str], typer.Option("--unit", help="tokens (of the embedder's tokenizer) | chars (config: chunk.unit)")]
HnswMOpt = Annotated[Optional[int], typer.Option("--hnsw-m", help="HNSW graph degree M (config: index.hnsw_m)")]
EfConstructionOpt = Annotated[Optional[int], typer.Option("--ef-construction", help="HNSW build beam (config: index.hnsw_ef_construction)")]
EfOpt = Annotated[Optional[int], typer.Option("--ef", help="HNSW query beam (raised to k) (config: index.hnsw_ef)")]
FormatOpt = Annotated[str, typer.Option("--format", help="auto (by extension) | markdown | text | html | pdf | docx | code | beir")]
WaitOpt = Annotated[Optional[float], typer.Option("--wait", help="Seconds to wait for another writer of the project, then exit 1; 0 = fail at once (config: lock.wait)")]
KeepOpt = Annotated[Optional[int], typer.Option("--keep", help="Old index generations kept for `rag rollback` (config: index.keep)")]
FilterOpt = Annotated[Optional[list[str]], typer.Option("--filter", help="Only chunks whose fields match; repeat to AND: doc_id='guides/*', path='*.md', 'date>=2025-01-01', 'tags in \\[api,cli]', 'year<2020' (chunk columns, path, title, n_chars, front-matter keys)")]
ProviderOpt = Annotated[Optional[str], typer.Option("--provider", help="onnxruntime execution provider: cpu, cuda or coreml, if onnxruntime has it (config: model.provider)")]


def _stderr():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)  # messages never hard-wrapped (paths stay greppable)


def _stdout():
    from rich.console import Console

    return Console(soft_wrap=True)


def _error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is printed verbatim (no rich markup, no control characters)."""
    from rich.text import Text

    from rag_cli.safe_text import plain

    _stderr().print(Text.assemble(("error:", "bold red"), " ", plain(message)))


def handle_errors(fn):
    """Turn RagError into a message on stderr and its exit code (1 or 2)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RagError as exc:
            _error(str(exc))
            raise typer.Exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            what = str(exc) if isinstance(exc, Interrupted) else "the previous files are intact"
            _stderr().print(f"interrupted; {what}" if what else "interrupted", highlight=False, markup=False)
            raise typer.Exit(130)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as exc:  # a bug or an environment problem: say so, exit 1
            if os.environ.get("RAG_DEBUG"):
                raise
            _error(f"{type(exc).__name__}: {exc} (set RAG_DEBUG=1 for the traceback)")
            raise typer.Exit(1)

    return wrapper


def _json_safe(obj):
    """`obj` with every float NaN or +-inf replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "to_dict"):  # a typed result (rag_cli.results)
        return _json_safe(obj.to_dict())
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _emit_json(obj) -> None:
    """Print `obj` as strict JSON: a NaN or infinite float is written as null."""
    sys.stdout.write(json.dumps(_json_safe(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n")


def _note(message: str) -> None:
    """A plain message on stderr (printed verbatim: no markup, no highlighting; ids and names from user
    files in it made plain text by `rag_cli.safe_text.plain`)."""
    from rag_cli.safe_text import plain

    _stderr().print(plain(message), highlight=False, markup=False)


def _warn(message: str) -> None:
    """A message on stderr in yellow (printed verbatim, made plain text as `_note`)."""
    from rag_cli.safe_text import plain_text

    _stderr().print(plain_text(message, style="yellow"))


@contextlib.contextmanager
def _progress(quiet: bool):
    """Yield the library's progress callback (task, done, total), rendered as
    a rich progress bar on stderr, or None when quiet or stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    tasks: dict[str, int] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=_stderr(), transient=True) as bar:
        def update(task: str, done: int, total: int | None) -> None:
            if task not in tasks:
                tasks[task] = bar.add_task(task, total=total)
            bar.update(tasks[task], completed=done, total=total)

        yield update


# --------------------------------------------------------------------------- init
@app.command()
@handle_errors
def init(
    directory: Annotated[Optional[Path], typer.Argument(help="Project folder (default: -p, RAG_PROJECT or ./.rag)")] = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No report line.")] = False,
):
    """Write rag.toml with the default config (every key is also a flag).

    An existing rag.toml is kept as it is (and checked).
    """
    from rag_cli.project import Project

    p = Project.open(directory or project)
    cfg, created = p.init()
    if json_out:
        _emit_json({"project": str(p.root), "config": cfg.to_dict(), "created": created})
    elif not quiet:
        state = "written with the defaults" if created else "kept (already there)"
        _stdout().print(f"{p.config_path}: {state}", highlight=False, markup=False)


# --------------------------------------------------------------------------- chunk
@app.command()
@handle_errors
def chunk(
    sources: Annotated[list[str], typer.Argument(help="Files, folders (recursive) or globs; or a BEIR corpus.jsonl(.gz) with --format beir")],
    fmt: FormatOpt = "auto",
    encoding: Annotated[Optional[str], typer.Option("--encoding", help="Text encoding of every text file (e.g. gbk, big5, cp1252); default: UTF-8, else detected")] = None,
    strategy: StrategyOpt = None,
    size: SizeOpt = None,
    overlap: OverlapOpt = None,
    unit: UnitOpt = None,
    context_sentences: Annotated[Optional[int], typer.Option("--context-sentences", help="sentence: sentences on each side given to `ask` as context (config: chunk.context_sentences)")] = None,
    parent_size: Annotated[Optional[int], typer.Option("--parent-size", help="parent-child: parent size in --unit, > --size (config: chunk.parent_size)")] = None,
    breakpoint_percentile: Annotated[Optional[float], typer.Option("--breakpoint-percentile", help="semantic: break where the sentence distance exceeds this percentile, 0-100 (config: chunk.breakpoint_percentile)")] = None,
    model: ModelOpt = None,
    precision: PrecisionOpt = None,
    wait: WaitOpt = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Load documents and split them into chunks: docs.parquet, chunks.parquet."""
    from rag_cli.project import Project

    p = Project.open(project)
    with _progress(quiet or json_out) as progress:
        summary = p.chunk(sources, format=fmt, strategy=strategy, size=size, overlap=overlap, unit=unit,
                          context_sentences=context_sentences, parent_size=parent_size,
                          breakpoint_percentile=breakpoint_percentile, model=model, precision=precision,
                          encoding=encoding, wait=wait, progress=progress)
    if json_out:
        return _emit_json(summary)
    if quiet:
        return
    cfg = p.config.chunk
    parents = f" (+ {summary['n_parents']} parents -> {p.parents_path})" if summary["n_parents"] else ""
    _note(f"{summary['n_docs']} documents -> {summary['n_chunks']} chunks{parents} "
          f"({cfg.strategy}, size {cfg.size}, overlap {cfg.overlap} {cfg.unit}) "
          f"in {summary['seconds']:.1f}s -> {p.chunks_path}")
    if summary["n_oversized"]:
        _note(f"{summary['n_oversized']} chunk(s) exceed the size: each is one unbreakable unit")
    for warning in summary["warnings"]:
        _warn(warning)
    _note_skipped(summary["skipped"])


def _note_skipped(skipped: list[dict]) -> None:
    """The files a chunking pass skipped, and why (the first 20)."""
    for s in skipped[:20]:
        _note(f"skipped {s['path']}: {s['reason']}")
    if len(skipped) > 20:
        _note(f"... and {len(skipped) - 20} more skipped")


# --------------------------------------------------------------------------- embed
@app.command()
@handle_errors
def embed(
    model: ModelOpt = None,
    precision: PrecisionOpt = None,
    threads: ThreadsOpt = None,
    provider: ProviderOpt = None,
    on_truncate: Annotated[Optional[str], typer.Option(
        "--on-truncate", help="A chunk longer than the model's max_length: warn (name it) | error (exit 2, nothing written) (config: model.on_truncate)")] = None,
    wait: WaitOpt = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Embed chunks.parquet with an ONNX bi-encoder: embeddings.parquet (only new or changed chunks)."""
    from rag_cli.project import Project

    p = Project.open(project)
    with _progress(quiet or json_out) as progress:
        summary = p.embed(model=model, precision=precision, threads=threads, provider=provider,
                          on_truncate=on_truncate, wait=wait, progress=progress)
    if json_out:
        return _emit_json({k: v for k, v in summary.items() if k != "model"})
    if quiet:
        return
    for warning in summary["model_warnings"]:
        _warn(warning)
    if summary["rebuilt_unreadable"]:
        _warn(f"the old embeddings could not be read and were rebuilt: {summary['rebuilt_unreadable']}")
    _note(f"{_embedded(summary)}, {summary['n_reused']} reused, in {summary['seconds']:.1f}s "
          f"with {summary['model']} ({summary['fingerprint']}) -> {p.embeddings_path}")
    if summary["truncation"]:
        _warn(f"{summary['truncation']}: use a smaller `rag chunk --size`")


# --------------------------------------------------------------------------- index
@app.command()
@handle_errors
def index(
    hnsw_m: HnswMOpt = None,
    ef_construction: EfConstructionOpt = None,
    ef: EfOpt = None,
    k1: Annotated[Optional[float], typer.Option("--k1", help="BM25 k1 (config: index.bm25_k1)")] = None,
    b: Annotated[Optional[float], typer.Option("--b", help="BM25 b (config: index.bm25_b)")] = None,
    bm25_method: Annotated[Optional[str], typer.Option("--bm25-method", help="BM25 variant: lucene | robertson | atire | bm25l | bm25+ (config: index.bm25_method)")] = None,
    keep: KeepOpt = None,
    wait: WaitOpt = None,
    rollback_: Annotated[bool, typer.Option("--rollback", help="Make the previous index generation current again (as `rag rollback`)")] = False,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Build a new generation of index/: hnswlib (cosine) over the embeddings and bm25s over the chunk texts."""
    from rag_cli.project import Project

    p = Project.open(project)
    if rollback_:
        return _rolled_back(p.rollback(wait=wait), json_out, quiet)
    with _progress(quiet or json_out) as progress:
        summary = p.index(hnsw_m=hnsw_m, hnsw_ef_construction=ef_construction, hnsw_ef=ef, bm25_k1=k1, bm25_b=b,
                          bm25_method=bm25_method, keep=keep, wait=wait, progress=progress)
    if json_out:
        _emit_json(summary)
    elif not quiet:
        _note(f"indexed {summary['n_chunks']} chunks (dim {summary['dim']}) in {summary['seconds']:.1f}s "
              f"-> {p.index_dir / summary['generation']}")


# --------------------------------------------------------------------------- build, update, rollback, status
@app.command()
@handle_errors
def build(
    sources: Annotated[list[str], typer.Argument(help="Files, folders (recursive) or globs; or a BEIR corpus with --format beir (remembered in rag.toml for `rag update`)")],
    fmt: FormatOpt = "auto",
    strategy: StrategyOpt = None,
    size: SizeOpt = None,
    overlap: OverlapOpt = None,
    unit: UnitOpt = None,
    model: ModelOpt = None,
    precision: PrecisionOpt = None,
    threads: ThreadsOpt = None,
    hnsw_m: HnswMOpt = None,
    ef_construction: EfConstructionOpt = None,
    ef: EfOpt = None,
    keep: KeepOpt = None,
    wait: WaitOpt = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """chunk + embed + index in one command under one lock; the sources are remembered for `rag update`."""
    from rag_cli.project import Project

    p = Project.open(project)
    with _progress(quiet or json_out) as progress:
        out = p.build(sources, format=fmt, strategy=strategy, size=size, overlap=overlap, unit=unit, model=model,
                      precision=precision, threads=threads, hnsw_m=hnsw_m, hnsw_ef_construction=ef_construction,
                      hnsw_ef=ef, keep=keep, wait=wait, progress=progress)
    if json_out:
        return _emit_json({k: {kk: vv for kk, vv in v.items() if kk != "model"} for k, v in out.items()})
    if not quiet:
        c, e, i = out["chunk"], out["embed"], out["index"]
        _note(f"{c['n_docs']} documents -> {c['n_chunks']} chunks; {e['n_embedded']} embedded, {e['n_reused']} "
              f"reused; index {i['generation']} ({i['n_chunks']} chunks) -> {p.index_dir}")
        _note_skipped(c.get("skipped", []))


@app.command()
@handle_errors
def update(
    keep: KeepOpt = None,
    wait: WaitOpt = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Rescan the sources of `rag build`: rechunk new and changed documents, embed new texts, update the index."""
    from rag_cli.project import Project

    p = Project.open(project)
    with _progress(quiet or json_out) as progress:
        out = p.update(keep=keep, wait=wait, progress=progress)
    if json_out:
        return _emit_json(out)
    if quiet:
        return
    c, e, i = out["chunk"], out["embed"], out["index"]
    if out["full_rechunk"]:
        _warn(f"every document was rechunked: {out['full_rechunk']}")
    if i["full"]:
        _warn(f"the index was rebuilt in full: {i['full']}")
    _note(_update_line(out) + f" in {c.get('seconds', 0) + e['seconds'] + i['seconds']:.1f}s")


def _count(n: int, word: str) -> str:
    """`1 text`, `2 texts`, `1 query`, `3 queries`."""
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def _embedded(summary: dict) -> str:
    """`N chunks embedded`, with the distinct texts (what the progress bar counts) when fewer."""
    n, texts = summary["n_embedded"], summary.get("n_texts_embedded", summary["n_embedded"])
    return f"{_count(n, 'chunk')} embedded" + (f" ({_count(texts, 'distinct text')})" if texts != n else "")


def _update_line(out: dict) -> str:
    """One line summing up an `update` result (documents, chunks, chunks embedded, generation)."""
    c, e, i = out["chunk"], out["embed"], out["index"]
    return (f"documents: {c['docs_added']} added, {c['docs_changed']} changed, {c['docs_removed']} removed, "
            f"{c['docs_unchanged']} unchanged; chunks: {c['chunks_added']} added, {c['chunks_removed']} removed; "
            f"{_embedded(e)}; "
            + (f"index unchanged ({i['generation']})" if i["unchanged"] else
               f"index {i['generation']}: {i['vectors_added']} vectors added, {i['vectors_deleted']} deleted"))


@app.command()
@handle_errors
def watch(
    sources: Annotated[Optional[list[str]], typer.Argument(help="Files, folders or globs to keep indexed (default: those remembered by `rag build`)")] = None,
    debounce: Annotated[float, typer.Option("--debounce", help="Seconds without changes before a batch of changes is applied as one update")] = 2.0,
    fmt: FormatOpt = "auto",
    strategy: StrategyOpt = None,
    size: SizeOpt = None,
    overlap: OverlapOpt = None,
    unit: UnitOpt = None,
    model: ModelOpt = None,
    precision: PrecisionOpt = None,
    keep: KeepOpt = None,
    wait: WaitOpt = None,
    project: ProjectOpt = None,
    quiet: QuietOpt = False,
):
    """Build (or update) the index, then apply each batch of file changes as one `rag update` until Ctrl-C or SIGTERM."""
    import time

    from rag_cli.project import Project

    p = Project.open(project)
    say = (lambda m: None) if quiet else (lambda m: _note(f"{time.strftime('%H:%M:%S')} {m}"))

    def started(out: dict) -> None:
        if "chunk" in out and "docs_added" not in out["chunk"]:  # a build
            say(f"built: {out['chunk']['n_docs']} documents, index {out['index']['generation']}")
        else:
            say(f"up to date: {_update_line(out)}")
        say(f"watching {', '.join(p.config.sources.paths)} (debounce {debounce:g} s); Ctrl-C stops")

    def failed(exc: Exception) -> None:
        _error(f"{exc} (still watching)")

    try:
        n = p.watch(sources or [], debounce=debounce, format=fmt, strategy=strategy, size=size, overlap=overlap,
                    unit=unit, model=model, precision=precision, keep=keep, wait=wait, on_start=started,
                    on_batch=lambda b: say(f"{len(b)} change(s): {', '.join(f'{c} {Path(f).name}' for c, f in b[:5])}"
                                           + (" ..." if len(b) > 5 else "")),
                    on_update=lambda out: out["index"]["unchanged"] or say(_update_line(out)), on_error=failed)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the normal way to stop watching
        say("stopped; the current index generation is complete")
        return
    say(f"stopped after {n} update(s)")


@app.command()
@handle_errors
def rollback(
    wait: WaitOpt = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Make the previous index generation current again."""
    from rag_cli.project import Project

    _rolled_back(Project.open(project).rollback(wait=wait), json_out, quiet)


def _rolled_back(out: dict, json_out: bool, quiet: bool) -> None:
    if json_out:
        return _emit_json(out)
    if not quiet:
        _note(f"index rolled back: {out['from']} -> {out['to']}")


@app.command()
@handle_errors
def status(
    verify: Annotated[bool, typer.Option("--verify", help="Also hash every file of every index generation against its files.json (without it: sizes only); exit 2 if one is damaged")] = False,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Only the stale and damaged lines (nothing when up to date).")] = False,
):
    """Documents, chunks, vectors, index generations, disk use, stale stages (with the command to refresh each) and damaged files."""
    from rag_cli.project import Project

    st = Project.open(project).status(verify=verify)
    failed = [g["verified"] for g in st["generations"] if g.get("verified")]
    failed += [d for d in st["damaged"] if d not in failed]
    if json_out:
        _emit_json(st)
        if failed:
            raise typer.Exit(2)
        return
    lines = [] if quiet else _status_lines(st)
    for s in st["stale"]:
        lines.append(f"stale: {s['stage']} ({s['why']}): run `{s['command']}`")
        for kind, paths in s.get("files", {}).items():
            lines += [f"  {kind}: {path}" for path in paths]
    lines += [f"damaged: {d}" for d in st["damaged"] if not verify]
    if not st["stale"] and not st["damaged"] and not quiet:
        lines.append("up to date")
    if verify and not quiet:
        n_ok = sum(1 for g in st["generations"] if not g["verified"])
        lines.append(f"verified {n_ok} of {len(st['generations'])} generations")
    out = _stdout()
    for line in lines:
        out.print(line, highlight=False, markup=False)
    for problem in failed if verify else ():
        _error(problem)
    if failed:
        raise typer.Exit(2)


def _status_lines(st: dict) -> list[str]:
    """The report part of `rag status` (counts, generations, models, disk), one line each."""
    def count(n, what):
        return f"no {what}" if n is None else f"{n} {what}"

    lines = [f"project {st['project']}: {count(st['documents'], 'documents')}, {count(st['chunks'], 'chunks')}, "
             f"{count(st['vectors'], 'vectors')}"]
    if not st["generations"]:
        lines.append("index: none built yet")
    for g in st["generations"]:
        mark = "*" if g["current"] else " "
        if g["damaged"] and g["n_chunks"] is None:
            lines.append(f"{mark} {g['name']}  damaged")
        else:
            lines.append(f"{mark} {g['name']}  {g['time']}  {g['command']:<8} {g['n_chunks']} chunks  "
                         f"{_size(g['bytes'] or 0)}" + ("  damaged" if g["damaged"] else ""))
    fp = st["model_fingerprints"]
    short = {k: v[:12] if v else "-" for k, v in fp.items()}
    lines.append(f"embedder fingerprint: {short['embeddings']} (embeddings and index)" if fp["embeddings"] == fp["index"]
                 else f"embedder fingerprint: embeddings {short['embeddings']}, index {short['index']}")
    lines.append(f"disk: {_size(sum(st['disk_bytes'].values()))}")
    if st["sources"]:
        lines.append(f"sources: {', '.join(st['sources'])}")
    return lines


# --------------------------------------------------------------------------- search
@app.command()
@handle_errors
def search(
    query: Annotated[Optional[str], typer.Argument(help="One query; or use --queries FILE")] = None,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Query file (JSONL _id/text or query_id/query, or TSV): writes a run")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="dense | sparse | hybrid (config: search.mode)")] = None,
    k: Annotated[Optional[int], typer.Option("-k", help="Results per query (config: search.k)")] = None,
    filter_: FilterOpt = None,
    rrf_k: Annotated[Optional[int], typer.Option("--rrf-k", min=0, help="RRF constant k in 1/(k + rank) (config: search.rrf_k)")] = None,
    candidates: Annotated[Optional[int], typer.Option("--candidates", min=1, help="Hybrid: hits per retriever before fusion (config: search.candidates)")] = None,
    fusion: Annotated[Optional[str], typer.Option("--fusion", help="Hybrid: rrf | minmax | zscore (weighted sums of normalised scores) (config: search.fusion)")] = None,
    dense_weight: Annotated[Optional[float], typer.Option("--dense-weight", help="minmax/zscore: weight of the dense scores, 0-1 (config: search.dense_weight)")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Run name: runs/NAME.parquet (default: the query file's stem-mode)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="parquet | trec (for --queries)")] = "parquet",
    level: Annotated[str, typer.Option("--level", help="chunk | doc: one run row per chunk, or per document (MaxP) (for --queries)")] = "chunk",
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the run here instead of runs/NAME")] = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Search the index: one query prints a table (or --json); --queries writes a run."""
    from rag_cli.project import Project, check_name, one_of

    one_of("a QUERY argument", query, "--queries FILE", queries)
    check_name(name)
    p = Project.open(project)
    opts = {"mode": mode, "k": k, "filter": filter_, "rrf_k": rrf_k, "candidates": candidates, "fusion": fusion,
            "dense_weight": dense_weight}
    if query is not None:
        res = p.search(query, **opts)
        rows = [_hit_json(h) for h in res.hits]
        _report_queries_truncated(res.n_queries_truncated, res.max_length, quiet)
        if json_out:
            _emit_json({"query": query, "mode": res.mode, "results": rows,
                        "n_queries_truncated": res.n_queries_truncated})
        else:
            _print_hits(query, res.mode, rows)
        return
    with _progress(quiet or json_out) as progress:
        run = p.search_queries(queries, **opts, name=name, format=fmt, output=output, level=level, progress=progress)
    _report_queries_truncated(run.n_queries_truncated, run.max_length, quiet)
    _report_escaped(run.escaped_ids, quiet)
    if json_out:
        _emit_json({"run": str(run.path), "mode": run.mode, "k": run.k, "n_queries_truncated": run.n_queries_truncated,
                    "escaped_ids": list(run.escaped_ids)})
    elif not quiet:
        _note(f"run written: {run.path}")


def _report_escaped(ids, quiet: bool, limit: int = 5) -> None:
    """Say on stderr which ids a TREC run holds percent-encoded (they contain whitespace)."""
    if ids and not quiet:
        from rag_cli.store.runs import trec_field

        shown = ", ".join(f"{i!r} -> {trec_field(i)!r}" for i in ids[:limit])
        more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
        _warn(f"{len(ids)} id(s) contain whitespace and are written percent-encoded in the TREC run "
              f"(urllib.parse.unquote gives them back): {shown}{more}")


def _report_queries_truncated(n: int, max_length: int | None, quiet: bool) -> None:
    """Say on stderr how many queries the bi-encoder cut to its max_length (never cut silently)."""
    if n and not quiet:
        _warn(f"{n} quer{'y was' if n == 1 else 'ies were'} longer than the bi-encoder's max_length "
              f"({max_length} tokens) and cut before encoding; only the first tokens were searched")


def _hit_json(h) -> dict:
    return {"rank": h.rank, "chunk_id": h.chunk_id, "doc_id": h.doc_id, "score": round(h.score, 6),
            "stage": h.stage, "text": h.text}


def _score_digits(scores: list[float], least: int = 4, most: int = 17) -> int:
    """Decimals (from `least` up to `most`) that print distinct scores distinctly."""
    distinct = set(scores)
    for digits in range(least, most + 1):
        if len({f"{x:.{digits}f}" for x in distinct}) == len(distinct):
            return digits
    return most


def _print_hits(query: str, mode: str, rows: list[dict], score_scale: str | None = None) -> None:
    """The hits as a table; every text from a document or the user is plain (`rag_cli.safe_text`)."""
    from rich.table import Table

    from rag_cli.safe_text import plain, plain_text

    digits = _score_digits([r["score"] for r in rows])
    scale = f" (scores: {score_scale})" if score_scale else ""
    table = Table(title=plain_text(f"{mode} results for: {query}{scale}"), show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("chunk")
    table.add_column("text", overflow="fold")
    for r in rows:
        text = " ".join(plain(r["text"]).split())
        table.add_row(str(r["rank"]), f"{r['score']:.{digits}f}", plain_text(r["chunk_id"]),
                      plain_text(text[:200] + ("…" if len(text) > 200 else "")))
    _stdout().print(table)
    if not rows:
        _note("no results")


# --------------------------------------------------------------------------- rerank
@app.command()
@handle_errors
def rerank(
    query: Annotated[Optional[str], typer.Argument(help="One query (retrieved from the index first); or use --run FILE")] = None,
    run: Annotated[Optional[Path], typer.Option("--run", help="A Parquet run to rerank (from `rag search --queries`)")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Cross-encoder model folder (config: model.reranker)")] = None,
    candidates: Annotated[int, typer.Option("--candidates", help="Top-N of the run to rescore")] = 100,
    top_n: Annotated[int, typer.Option("--top-n", "-k", help="Results kept per query")] = 10,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Retrieval mode for a single QUERY")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Run name: runs/NAME.parquet (default: RUN-rerank)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="parquet | trec")] = "parquet",
    probability: Annotated[bool, typer.Option("--sigmoid", help="Scores as sigmoid(logit), a probability in [0, 1] (same order)")] = False,
    min_score: Annotated[Optional[float], typer.Option("--min-score", help="Drop results scoring below this (logit, or probability with --sigmoid)")] = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Rescore the top-N of a search with an ONNX cross-encoder (raw logits, higher is better)."""
    from rag_cli.project import Project, check_name, one_of

    one_of("a QUERY argument", query, "--run FILE", run)
    check_name(name)
    p = Project.open(project)
    with _progress(quiet or json_out) as progress:
        if query is not None:
            res = p.rerank(query, model=model, candidates=candidates, top_n=top_n, mode=mode, sigmoid=probability,
                           min_score=min_score, progress=progress)
        else:
            res = p.rerank_run(run, model=model, candidates=candidates, top_n=top_n, name=name, format=fmt,
                               sigmoid=probability, min_score=min_score, progress=progress)
    if res.n_pairs_truncated and not (quiet or json_out):
        _warn(f"{res.n_pairs_truncated} (query, passage) pair(s) were longer than the cross-encoder's "
              f"max_length ({res.reranker_max_length} tokens); their passages were cut")
    if query is not None:
        _report_queries_truncated(res.n_queries_truncated, res.max_length, quiet)
        # full precision: probabilities near 1 differ past the 6th decimal
        shown = [{**_hit_json(h), "score": float(h.score)} for h in res.hits]
        if json_out:
            _emit_json({"query": query, "mode": "rerank", "score_scale": res.score_scale, "results": shown,
                        "n_queries_truncated": res.n_queries_truncated})
        else:
            _print_hits(query, "rerank", shown, score_scale=res.score_scale)
    elif json_out:
        from rag_cli.store.runs import read_run

        _report_escaped(res.escaped_ids, quiet)
        _emit_json({"run": str(res.path), "queries": len({r.query_id for r in read_run(res.path)}),
                    "score_scale": res.score_scale})
    elif not quiet:
        _report_escaped(res.escaped_ids, quiet)
        _note(f"reranked run written: {res.path} (scores: {res.score_scale})")


# --------------------------------------------------------------------------- ask
@app.command()
@handle_errors
def ask(
    question: Annotated[Optional[str], typer.Argument(help="A question; or use --queries FILE")] = None,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Query file: writes answers/NAME.parquet")] = None,
    k: Annotated[Optional[int], typer.Option("-k", help="Evidence chunks given to the generator (config: ask.k)")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Retrieval mode (config: search.mode)")] = None,
    min_score: Annotated[Optional[float], typer.Option("--min-score", help="Refuse below this bi-encoder cosine of the best evidence (config: ask.min_score)")] = None,
    min_coverage: Annotated[Optional[float], typer.Option("--min-coverage", help="Refuse below this idf-weighted share of question terms in the evidence, unless the cosine reaches ask.strong_score (config: ask.min_coverage)")] = None,
    strong_score: Annotated[Optional[float], typer.Option("--strong-score", help="A cosine at or above this answers without the --min-coverage check (config: ask.strong_score)")] = None,
    max_sentences: Annotated[Optional[int], typer.Option("--max-sentences", min=1, help="Sentences at most in an extractive answer (config: ask.max_sentences)")] = None,
    generator: Annotated[Optional[str], typer.Option("--generator", help="extractive | openai (an OpenAI-compatible server) | llama-cpp (a local GGUF, the llm extra) (config: ask.generator)")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="openai: the server's API root, e.g. http://127.0.0.1:8080/v1 (config: generator.base_url)")] = None,
    llm_model: Annotated[Optional[str], typer.Option("--llm-model", help="openai: the model name sent; llama-cpp: a .gguf path, empty = Gemma 3 270M (config: generator.model)")] = None,
    api: Annotated[Optional[str], typer.Option("--api", help="openai: chat | completions (base models) (config: generator.api)")] = None,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="openai: NAME of the environment variable holding the API key (config: generator.api_key_env)")] = None,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="openai: seconds per request (config: generator.timeout)")] = None,
    max_retries: Annotated[Optional[int], typer.Option("--max-retries", help="openai: retries after a connection error, timeout, 429 or 5xx (config: generator.max_retries)")] = None,
    temperature: Annotated[Optional[float], typer.Option("--temperature", help="LLM sampling temperature (config: generator.temperature)")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", help="LLM answer length at most, tokens (config: generator.max_tokens)")] = None,
    context_tokens: Annotated[Optional[int], typer.Option("--context-tokens", help="LLM token budget of the sources; the lowest-ranked evidence is cut first (config: generator.context_tokens)")] = None,
    rewrite: Annotated[Optional[str], typer.Option("--rewrite", help="none | multi-query | hyde: the LLM generator rewrites the question, each rewrite's retrieval fused with the question's by RRF (config: ask.rewrite)")] = None,
    gate: Annotated[Optional[str], typer.Option("--gate", help="on | off: off refuses nothing itself (the generator may) and still records the gate's signals, for `rag eval --tune refusal` (config: ask.gate)")] = None,
    min_rerank_score: Annotated[Optional[float], typer.Option("--min-rerank-score", help="With model.reranker: refuse below this best cross-encoder logit; 0 = off (config: ask.min_rerank_score)")] = None,
    grade: Annotated[Optional[str], typer.Option("--grade", help="off | llm: the LLM generator first judges whether the sources answer the question and refuses if not (CRAG) (config: ask.grade)")] = None,
    stream: Annotated[bool, typer.Option("--stream", help="Print the answer as the LLM generator writes it (one QUESTION; not with --json or --queries)")] = False,
    filter_: FilterOpt = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Answers name: answers/NAME.parquet (default: the query file's stem)")] = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Answer from the indexed sources only, with numbered citations; refuse without evidence."""
    from rag_cli.project import Project, check_name, one_of

    one_of("a QUESTION argument", question, "--queries FILE", queries)
    check_name(name)
    if stream and (json_out or queries is not None):
        from rag_cli.errors import BadInput

        raise BadInput(f"--stream prints one answer as it is written; it cannot be combined with "
                       f"{'--json' if json_out else '--queries'} (drop --stream, or that flag)")
    p = Project.open(project)
    llm = {"base_url": base_url, "model": llm_model, "api": api, "api_key_env": api_key_env, "timeout": timeout,
           "max_retries": max_retries, "temperature": temperature, "max_tokens": max_tokens,
           "context_tokens": context_tokens}
    opts = {"k": k, "mode": mode, "min_score": min_score, "min_coverage": min_coverage,
            "strong_score": strong_score, "max_sentences": max_sentences, "filter": filter_,
            "generator": generator, "llm": llm, "rewrite": rewrite, "gate": gate,
            "min_rerank_score": min_rerank_score, "grade": grade}
    rule = min_rerank_score if min_rerank_score is not None else p.config.ask.min_rerank_score
    if rule and not p.config.model.reranker:
        where = "--min-rerank-score" if min_rerank_score is not None else f"ask.min_rerank_score in {p.config_path}:"
        _warn(f"{where} {rule:g} has no effect without a reranker (config model.reranker; "
              "set one with `rag rerank --model DIR`)")
    if question is not None:
        streamer = _AnswerStream(question) if stream else None
        try:
            res = p.ask(question, **opts, on_text=streamer)
        except BaseException as exc:
            if streamer is not None:
                streamer.end_line()  # a message after a partial answer starts on its own line
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Interrupted):
                raise Interrupted("") from exc  # one question writes no file: just "interrupted"
            raise
        _report_queries_truncated(res.n_queries_truncated, res.max_length, quiet)
        if json_out:
            _emit_json({**_answer_json(res), "n_queries_truncated": res.n_queries_truncated})
        else:
            _print_answer(res, streamed=streamer is not None and streamer.started)
            _report_answer_checks(res, quiet)
        return
    with _progress(quiet or json_out) as progress:
        out = p.ask_queries(queries, **opts, name=name, progress=progress)
    _report_queries_truncated(out["n_queries_truncated"], out["max_length"], quiet)
    if json_out:
        _emit_json({"answers": str(out["answers"]), "n": out["n"], "refused": out["refused"],
                    "n_queries_truncated": out["n_queries_truncated"]})
    elif not quiet:
        _note(f"{out['n']} answers ({out['refused']} refused) -> {out['answers']}")


def _answer_json(res) -> dict:
    from rag_cli.generate.citations import statements

    by_number = {e.number: e for e in res.evidence}
    cited = [by_number[n] for n in dict.fromkeys(n for st in statements(res.answer.text) for n in st.citations)
             if n in by_number] if not res.answer.refused else []
    return {
        "question": res.question,
        "answer": res.answer.text,
        "refused": res.answer.refused,
        "citations": res.answer.citations,
        "statements": [] if res.answer.refused else [
            {"text": st.text, "citations": st.citations, "uncited": st.uncited}
            for st in statements(res.answer.text)],
        "sources": [_source_json(e) for e in cited],
        "best_score": round(res.best_score, 6),
        "coverage": round(res.coverage, 6),
        "reason": res.reason,
        "generator": res.answer.generator,
        "latency_ms": round(res.latency_ms, 1),
        "timings": {k: round(v, 1) for k, v in res.timings.items()},
        **({"rewrites": res.rewrites} if res.rewrites else {}),
        **({"grade": res.grade} if res.grade else {}),
        "n_citations_removed": res.answer.n_citations_removed,
        "n_evidence_cut": res.answer.n_evidence_cut,
        "evidence": [{"n": e.number, "chunk_id": e.chunk_id, "doc_id": e.doc_id, "score": round(e.score, 6),
                      **({"rerank_score": round(e.rerank_score, 6)} if e.rerank_score is not None else {}),
                      "text": e.text, **({"context": e.context} if e.context else {})} for e in res.evidence],
    }


def _source_json(e) -> dict:
    """A cited source: its number, chunk, document (the path) and title (headings, or the doc id)."""
    return {"n": e.number, "chunk_id": e.chunk_id, "doc_id": e.doc_id,
            "title": " > ".join(e.title_path) if e.title_path else e.doc_id, "score": round(e.score, 6)}


class _AnswerStream:
    """`on_text` of `rag ask --stream`: "Q: question" and "A: " before the
    first piece, then each piece (already plain) as it comes."""

    def __init__(self, question: str):
        self.question, self.started = question, False

    def __call__(self, piece: str) -> None:
        from rich.text import Text

        from rag_cli.safe_text import plain

        if not self.started:
            self.started = True
            _stdout().print(Text.assemble(("Q:", "bold"), " ", plain(self.question), "\n", ("A:", "bold"), " "),
                            end="")
        sys.stdout.write(piece)
        sys.stdout.flush()

    def end_line(self) -> None:
        """End a partial answer's line (before an error or interrupt message)."""
        if self.started:
            sys.stdout.write("\n")
            sys.stdout.flush()


def _print_answer(res, streamed: bool = False) -> None:
    """Question, answer and cited sources; all document text is plain (`rag_cli.safe_text`).
    `streamed`: the question and answer were printed already (`_AnswerStream`), only end the line."""
    from rich.text import Text

    from rag_cli.safe_text import plain

    out = _stdout()
    if streamed:
        out.print()
    else:
        out.print(Text.assemble(("Q:", "bold"), " ", plain(res.question)))
        out.print(Text.assemble(("A:", "bold"), " ", plain(res.answer.text)))
    cited = set(res.answer.citations)
    if cited:
        out.print(Text("Sources:", style="bold"))
        for e in res.evidence:
            if e.chunk_id in cited:
                src = _source_json(e)
                out.print(Text(plain(f"  [{e.number}] {src['title']}  {e.chunk_id}  (cosine {e.score:.3f})")))
    elif res.answer.refused:
        out.print(Text(plain(f"({res.reason})")))


def _report_answer_checks(res, quiet: bool) -> None:
    """Say on stderr what the citation check removed and what the token budget cut."""
    if quiet:
        return
    if res.answer.n_citations_removed:
        _warn(f"{res.answer.n_citations_removed} citation(s) of numbers that were not among the sources "
              "were removed from the answer")
    if res.answer.n_evidence_cut:
        _note(f"{res.answer.n_evidence_cut} lowest-ranked evidence chunk(s) left out of the prompt to fit "
              "generator.context_tokens")


# --------------------------------------------------------------------------- eval
@app.command("eval")
@handle_errors
def eval_(
    qrels: Annotated[Optional[Path], typer.Option("--qrels", help="Qrels: BEIR TSV (query-id corpus-id score) or TREC 4-column")] = None,
    run: Annotated[Optional[Path], typer.Option("--run", help="A run (Parquet or TREC); or give --queries to search now")] = None,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Query file: search it first (with --mode, down to max(--ks) distinct documents per query: 100 by default) into runs/QUERIES-MODE.parquet")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Retrieval mode with --queries (config: search.mode)")] = None,
    ks: Annotated[Optional[str], typer.Option("--ks", help="Cutoffs, comma-separated (default 1,5,10,20,100)")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Report name: eval/NAME.json (default: RUN-QRELS, the two files' stems)")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the JSON report here (with --run no project folder is needed)")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="Compare the RUNS given as arguments (the first is the baseline): mean difference, randomisation and t-test p-values (Holm), win/tie/loss")] = False,
    runs: Annotated[Optional[list[Path]], typer.Argument(help="Run files for --compare")] = None,
    permutations: Annotated[Optional[int], typer.Option("--permutations", help="Random sign flips of the randomisation test (--compare, --perturb, --tune fusion; default 10000)")] = None,
    funnel: Annotated[bool, typer.Option("--funnel", help="With --queries: per query, the layer where the gold first goes missing, and ANN recall (needs the project index)")] = False,
    answers: Annotated[Optional[Path], typer.Option("--answers", help="Score answers/NAME.parquet (from `rag ask --queries`) against --gold: EM, F1, has-answer, citation precision/recall, refusals, latency")] = None,
    gold: Annotated[Optional[Path], typer.Option("--gold", help="Gold answers for --answers: JSONL {\"_id\": query id, \"answers\": [...]}")] = None,
    judge: Annotated[bool, typer.Option("--judge", help="With --answers: also RAGAS faithfulness and answer relevancy, judged by an LLM (--gold then optional)")] = False,
    judge_generator: Annotated[Optional[str], typer.Option("--judge-generator", help="--judge: openai | llama-cpp, set up by \\[generator] (default: ask.generator)")] = None,
    judge_repeats: Annotated[Optional[int], typer.Option("--judge-repeats", help="--judge: times the whole judging is repeated (mean ± sd over them; default 3)")] = None,
    judge_temperature: Annotated[Optional[float], typer.Option("--judge-temperature", help="--judge: sampling temperature, repeat r seeded r (0: identical repeats; default 0.3)")] = None,
    judge_base_url: Annotated[Optional[str], typer.Option("--judge-base-url", help="--judge with openai: the server's API root (config: generator.base_url)")] = None,
    judge_model: Annotated[Optional[str], typer.Option("--judge-model", help="--judge: openai model name, or llama-cpp .gguf path (config: generator.model)")] = None,
    judge_api: Annotated[Optional[str], typer.Option("--judge-api", help="--judge with openai: chat | completions (config: generator.api)")] = None,
    tune: Annotated[Optional[str], typer.Option("--tune", help="fusion: grid-search the hybrid fusion on --queries/--qrels (the train split) for nDCG@10 and write the winner to rag.toml; refusal: grid-search the refusal gate's thresholds on --answers/--unanswerable (recorded with `rag ask --gate off`) and write them to rag.toml \\[ask]")] = None,
    unanswerable: Annotated[Optional[Path], typer.Option("--unanswerable", help="Answers to made-unanswerable questions (see --make-unanswerable): with --answers/--gold, adds refusal and false-answer rates on them and the false-refusal rate on --answers; with --tune refusal, the train split's")] = None,
    max_false_refusal: Annotated[Optional[float], typer.Option("--max-false-refusal", help="--tune refusal: the largest false-refusal rate allowed on the answerable questions (default 0.05)")] = None,
    test_answers: Annotated[Optional[Path], typer.Option("--test-answers", help="--tune refusal: the test split's answerable answers (recorded with --gate off)")] = None,
    test_unanswerable: Annotated[Optional[Path], typer.Option("--test-unanswerable", help="--tune refusal: the test split's made-unanswerable answers")] = None,
    test_queries: Annotated[Optional[Path], typer.Option("--test-queries", help="--tune: the test split's queries, scored apart from the tuning")] = None,
    test_qrels: Annotated[Optional[Path], typer.Option("--test-qrels", help="--tune: the test split's qrels")] = None,
    perturb: Annotated[Optional[list[str]], typer.Option("--perturb", help="With --queries: re-run the queries changed (case = upper and lower, upper, lower, typo, punct) and report the loss")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed of --perturb typo, of the randomisation tests (--compare, --perturb) and of --make-unanswerable (default 0)")] = None,
    make_unanswerable: Annotated[Optional[int], typer.Option("--make-unanswerable", help="N: write the made-unanswerable variant of --corpus into -o DIR: the gold documents (--qrels) of N questions of --queries removed (corpus.jsonl, queries.jsonl, removed.json; --seed)")] = None,
    corpus: Annotated[Optional[Path], typer.Option("--corpus", help="--make-unanswerable: the corpus, BEIR JSONL (.gz too)")] = None,
    md: Annotated[Optional[Path], typer.Option("--md", help="Also write a Markdown summary of the report to this file")] = None,
    plots: Annotated[Optional[Path], typer.Option("--plots", help="Also draw PNG plots of the report into this folder (needs matplotlib: the plot extra)")] = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Recall@k, Hit@k, MRR@k, nDCG@k, P@k, MAP and R-precision of a run against qrels, as trec_eval
    computes them (document level by best chunk, MaxP)."""
    from rag_cli.errors import BadInput
    from rag_cli.evaluate.report import parse_cutoffs
    from rag_cli.project import Project

    _check_eval_mode({"--qrels": qrels, "--run": run, "--queries": queries, "--mode": mode, "--ks": ks,
                      "--name": name, "-o": output, "--compare": compare, "RUNS (arguments)": runs,
                      "--permutations": permutations, "--funnel": funnel, "--answers": answers, "--gold": gold,
                      "--judge": judge, "--judge-generator": judge_generator, "--judge-repeats": judge_repeats,
                      "--judge-temperature": judge_temperature, "--judge-base-url": judge_base_url,
                      "--judge-model": judge_model, "--judge-api": judge_api, "--tune": tune,
                      "--unanswerable": unanswerable, "--max-false-refusal": max_false_refusal,
                      "--test-answers": test_answers, "--test-unanswerable": test_unanswerable,
                      "--test-queries": test_queries, "--test-qrels": test_qrels, "--perturb": perturb,
                      "--seed": seed, "--make-unanswerable": make_unanswerable, "--corpus": corpus, "--md": md,
                      "--plots": plots})
    ks = "1,5,10,20,100" if ks is None else ks
    permutations = 10000 if permutations is None else permutations
    seed = 0 if seed is None else seed
    cutoffs = parse_cutoffs(ks)
    if make_unanswerable is not None or corpus is not None:
        out = Project.make_unanswerable(make_unanswerable, corpus=corpus, queries=queries, qrels=qrels,
                                        output=output, seed=seed)
        if json_out:
            _emit_json(out)
        elif not quiet:
            _note(f"{_count(out['n_questions'], 'question')} made unanswerable: "
                  f"{_count(len(out['removed_docs']), 'document')} removed, {out['n_docs_kept']} kept -> {output}")
        return
    p = Project.open(project)
    if tune == "refusal":
        given = _given(max_false_refusal=max_false_refusal)  # else the library's default
        report, path = p.tune_refusal(answers, unanswerable, test_answers=test_answers,
                                      test_unanswerable=test_unanswerable, name=name, output=output, md=md,
                                      plots=plots, **given)
        return _show_report(p, report, path, _print_refusal_tuning, json_out, quiet, md, plots)
    if answers is not None or gold is not None or judge:
        llm = {"base_url": judge_base_url, "model": judge_model, "api": judge_api}
        with _progress(quiet or json_out) as progress:
            given = _given(judge_repeats=judge_repeats, judge_temperature=judge_temperature)
            report, path = p.evaluate_answers(answers, gold, judge=judge, judge_generator=judge_generator, llm=llm,
                                              name=name, output=output, unanswerable=unanswerable, md=md,
                                              plots=plots, progress=progress, **given)
        if report.get("n_chunks_not_in_project") and not quiet:
            _warn(f"{report['n_chunks_not_in_project']} chunk id(s) cited or given as evidence in {answers} are not "
                  f"in this project's chunks ({p.chunks_path}): their citations and has-answer count as missing. "
                  "Recorded before the project was rebuilt, or in another project (-p)?")
        if report.get("evidence_changed") and not quiet:
            _warn(f"the chunks cited or given as evidence in {answers} had other texts when they were answered than "
                  f"this project's ({p.chunks_path}) now: recorded in another project (-p), or before the documents "
                  "changed? has-answer and citation precision are measured on the current texts")
        if report.get("recorded_gate_off") and not quiet:
            _warn(f"{' and '.join(report['recorded_gate_off'])}: no question was refused by the refusal gate, "
                  "though the gate of this project's [ask] settings refuses some: recorded with `rag ask --gate "
                  "off`? The refusal rates are then the generator's alone, not those of `rag ask`")
        if json_out and not quiet:
            _warn_answer_checks(report)
        return _show_report(p, report, path, _print_answer_metrics, json_out, quiet, md, plots)
    if tune is not None:
        with _progress(quiet or json_out) as progress:
            report, path = p.tune_fusion(queries, qrels, test_queries=test_queries, test_qrels=test_qrels,
                                         permutations=permutations, name=name, output=output, md=md, plots=plots,
                                         progress=progress)
        return _show_report(p, report, path, _print_tuning, json_out, quiet, md, plots)
    if perturb:
        from rag_cli.evaluate.perturb import expand_kinds

        try:
            kinds = expand_kinds(perturb)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        with _progress(quiet or json_out) as progress:
            report, path = p.perturb(qrels, queries, kinds, mode=mode, ks=cutoffs, seed=seed,
                                     permutations=permutations, name=name, output=output, md=md, plots=plots,
                                     progress=progress)
        return _show_report(p, report, path, _print_perturb, json_out, quiet, md, plots)
    if compare:
        report, path = p.compare(qrels, runs or [], ks=cutoffs, permutations=permutations, seed=seed, name=name,
                                 output=output, md=md, plots=plots)
        if not quiet:
            for check in report["run_checks"]:
                _warn_run_checks(check, run=check["run"])
        return _show_report(p, report, path, _print_comparison, json_out, quiet, md, plots)
    if funnel:
        with _progress(quiet or json_out) as progress:
            report, path = p.funnel(qrels, queries, name=name, output=output, md=md, plots=plots,
                                    progress=progress)
        return _show_report(p, report, path, _print_funnel, json_out, quiet, md, plots)
    with _progress(quiet or json_out) as progress:
        report, path = p.evaluate(qrels, run=run, queries=queries, mode=mode, ks=cutoffs, name=name, output=output,
                                  md=md, plots=plots, progress=progress)
    if queries is not None:
        _report_queries_truncated(report["n_queries_truncated"], report["max_length"], quiet)
    if json_out:
        if not quiet:
            _warn_run_checks(report, given_run=run is not None)
        _emit_json(report)
    else:
        _print_report(report, path, quiet, given_run=run is not None)
    _eval_extras(p, report, path, md, plots, quiet)


# Each mode of `rag eval`: (label, the flags it needs and what it says when one is missing, the flags it takes
# besides -p, --json and -q). `_check_eval_mode` rejects a missing flag or one the mode does not take.
_EVAL_OUTPUT = ("--name", "-o", "--md", "--plots")
_EVAL_MODES: dict[str, tuple[str, tuple[str, ...], str, tuple[str, ...]]] = {
    "make-unanswerable": (
        "--make-unanswerable N (write a made-unanswerable corpus into -o DIR)",
        ("--make-unanswerable", "--corpus", "--queries", "--qrels", "-o"),
        "--make-unanswerable N needs --corpus FILE, --queries FILE, --qrels FILE and -o DIR",
        ("--make-unanswerable", "--corpus", "--queries", "--qrels", "-o", "--seed")),
    "tune-refusal": (
        "--tune refusal", ("--answers", "--unanswerable"),
        "--tune refusal needs --answers FILE and --unanswerable FILE (answers recorded with "
        "`rag ask --queries ... --gate off`)",
        ("--tune", "--answers", "--unanswerable", "--max-false-refusal", "--test-answers", "--test-unanswerable",
         "--name", "-o", "--md")),
    "tune-fusion": (
        "--tune fusion", ("--queries", "--qrels"),
        "--tune fusion needs --queries FILE and --qrels FILE (the train split)",
        ("--tune", "--queries", "--qrels", "--test-queries", "--test-qrels", "--permutations", *_EVAL_OUTPUT)),
    "judge": (
        "--answers with --judge", ("--answers",), "--judge needs --answers FILE (from `rag ask --queries`)",
        ("--answers", "--gold", "--judge", "--judge-generator", "--judge-repeats", "--judge-temperature",
         "--judge-base-url", "--judge-model", "--judge-api", "--unanswerable", "--name", "-o", "--md")),
    "answers": (
        "--answers (scoring answers)", ("--answers", "--gold"),
        "--answers FILE needs --gold FILE (gold answers) and/or --judge (an LLM judge)",
        ("--answers", "--gold", "--unanswerable", "--name", "-o", "--md")),
    "perturb": (
        "--perturb", ("--queries", "--qrels"), "--perturb needs --queries FILE (searched as given and changed) "
        "and --qrels FILE",
        ("--perturb", "--queries", "--qrels", "--mode", "--ks", "--seed", "--permutations", *_EVAL_OUTPUT)),
    "compare": (
        "--compare", ("--qrels",), "--compare needs --qrels FILE (relevance judgements) and the run files as "
        "arguments",
        ("--compare", "RUNS (arguments)", "--qrels", "--ks", "--permutations", "--seed", *_EVAL_OUTPUT)),
    "funnel": (
        "--funnel", ("--queries", "--qrels"), "--funnel needs --queries FILE (the funnel searches them now) and "
        "--qrels FILE",
        ("--funnel", "--queries", "--qrels", *_EVAL_OUTPUT)),
    "run": (
        "--qrels with --run or --queries (scoring a run)", ("--qrels",),
        "--qrels FILE is needed (relevance judgements), unless you score answers with --answers/--gold",
        ("--qrels", "--run", "--queries", "--mode", "--ks", *_EVAL_OUTPUT)),
}
_EVAL_ONLY_SOME = {"--md": "writes no Markdown summary", "--plots": "draws no plots"}


def _given(**options) -> dict:
    """The options given on the command line (not None): the library's defaults stand for the rest."""
    return {k: v for k, v in options.items() if v is not None}


def _check_eval_mode(flags: dict) -> str:
    """The mode of `rag eval` that `flags` ({flag: value; None or False when
    not given}) select, in order: make-unanswerable, tune (after its value is
    checked), answers/judge, perturb, compare, funnel, run. Raises BadInput
    naming the flags that mode needs and lacks, and the given flags it does
    not take (`_EVAL_MODES`), before anything is read or written."""
    from rag_cli.errors import BadInput

    given = [f for f, v in flags.items() if v is not None and v is not False and v != []]
    tune = flags["--tune"]
    if tune is not None and tune not in ("fusion", "refusal"):
        raise BadInput(f"--tune {tune!r}: 'fusion' or 'refusal' can be tuned")
    if "--make-unanswerable" in given or "--corpus" in given:
        mode = "make-unanswerable"
    elif tune is not None:
        mode = f"tune-{tune}"
    elif any(f in given for f in ("--answers", "--gold", "--judge")):
        mode = "judge" if flags["--judge"] else "answers"
    elif "--perturb" in given:
        mode = "perturb"
    elif "--compare" in given or "RUNS (arguments)" in given:
        if not flags["--compare"]:
            raise BadInput(f"unexpected argument(s) {' '.join(map(str, flags['RUNS (arguments)']))}: run files as "
                           "arguments need --compare")
        mode = "compare"
    elif "--funnel" in given:
        mode = "funnel"
    else:
        mode = "run"
    label, needed, needs, accepted = _EVAL_MODES[mode]
    missing = [f for f in needed if f not in given]
    wrong = [f for f in given if f not in accepted]
    if not missing and not wrong:
        return mode
    if mode in ("answers", "judge") and missing == ["--answers"] and not wrong:
        selected = [f for f in ("--gold", "--judge") if f in given]
        raise BadInput(f"{' and '.join(selected)} score{'s' if len(selected) == 1 else ''} answers: give --answers "
                       f"FILE too (answers/NAME.parquet, "
                       f"written by `rag ask --queries`)")
    if mode in ("answers", "judge") and "--answers" in missing and wrong:
        selected = [f for f in ("--gold", "--judge") if f in given]
        raise BadInput(f"{' and '.join(selected)} belong{'s' if len(selected) == 1 else ''} to rag eval --answers "
                       f"(scoring answers), which needs --answers FILE (from `rag ask --queries`); {', '.join(wrong)} "
                       f"select{'s' if len(wrong) == 1 else ''} another mode (--qrels with --run or --queries: "
                       f"scoring a run). Leave out {' and '.join(selected)}, or give --answers FILE and leave out "
                       f"{', '.join(wrong)}")
    if len(wrong) == 1 and wrong[0] in _EVAL_ONLY_SOME:
        what = f"rag eval {label} {_EVAL_ONLY_SOME[wrong[0]]} ({wrong[0]})"
    else:
        what = f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not belong to rag eval {label}"
    if mode == "answers" and any(f.startswith("--judge-") for f in wrong):
        what += " (the --judge-* flags need --judge)"
    what += f"; that mode takes {', '.join(accepted)} (and -p, --json, -q). Leave out {', '.join(wrong)}"
    raise BadInput(needs + (f"; and {what}" if wrong else "") if missing else what)


def _show_report(p, report: dict, path: Path | None, printer, json_out: bool, quiet: bool, md: Path | None,
               plots: Path | None) -> None:
    """Print a report (`printer`, or its JSON), then write its Markdown summary and plots when asked for."""
    if json_out:
        _emit_json(report)
    else:
        printer(report, path, quiet)
    _eval_extras(p, report, path, md, plots, quiet)


def _eval_extras(p, report: dict, path: Path | None, md: Path | None, plots: Path | None, quiet: bool) -> None:
    """The Markdown summary and the PNG plots of an eval report, when asked for."""
    if md is None and plots is None:
        return
    written = p.eval_summaries(report, md=md, plots=plots, name=path.stem if path is not None else "eval")
    if not quiet:
        for f in written:
            _note(f"written: {f}")


def _print_report(report: dict, path: Path, quiet: bool, *, given_run: bool = True) -> None:
    from rich.table import Table

    from rag_cli.safe_text import plain_text

    means = report["metrics"]
    table = Table(title=plain_text(f"{report['run']}: {_count(report['n_queries'], 'query')} ({report['level']} level)"))
    table.add_column("metric")
    ks = sorted({int(m.split("@")[1]) for m in means if "@" in m})
    labels = {"recall": "Recall", "hit": "Hit", "mrr": "MRR", "ndcg": "nDCG", "precision": "P", "map": "MAP"}
    names = [n for n in labels if any(m.startswith(n + "@") for m in means)]
    for kk in ks:
        table.add_column(f"@{kk}", justify="right")
    for n in names:
        table.add_row(labels[n], *(f"{means[f'{n}@{kk}']:.4f}" if f"{n}@{kk}" in means else "" for kk in ks))
    _stdout().print(table)
    whole = {"map": "MAP", "rprec": "R-precision"}
    line = ", ".join(f"{label} {means[n]:.4f}" for n, label in whole.items() if n in means)
    if line:
        _stdout().print(f"whole run: {line}", highlight=False)
    if quiet:
        return
    _warn_run_checks(report, given_run=given_run)
    if path is not None:
        _note(f"written: {path}")
    else:
        _note("no project folder: the report was not written (give -o FILE to keep it)")


def _print_comparison(report: dict, path: Path | None, quiet: bool) -> None:
    from rich.table import Table

    from rag_cli.safe_text import plain_text

    def short(name: str) -> str:  # the file stem: the columns stay apart and narrow
        return name.rsplit(".", 1)[0] if name.endswith((".parquet", ".trec")) else name

    for comp in report["comparisons"]:
        base, run = short(comp["baseline"]), short(comp["run"])
        table = Table(title=plain_text(f"baseline {base} vs {run}: {_count(report['n_queries'], 'query')}; diff = {run} − "
                                       f"{base} (p: two-sided, Holm-corrected across {len(comp['metrics'])} metrics)"))
        table.add_column("metric", no_wrap=True)
        for col in (base, run, "diff", "p rand", "p t-test", "W/T/L"):
            table.add_column(plain_text(col), justify="right", overflow="fold")
        for m, r in comp["metrics"].items():
            table.add_row(m, f"{r['baseline']:.4f}", f"{r['run']:.4f}", f"{r['mean_diff']:+.4f}",
                          f"{r['p_randomisation_holm']:.4f}", f"{r['p_t_test_holm']:.4f}",
                          f"{r['wins']}/{r['ties']}/{r['losses']}")
        _stdout().print(table)
    if path is not None and not quiet:
        _note(f"written: {path}")


def _print_answer_metrics(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    if "counts" in report:
        c = report["counts"]
        table = Table(title=f"answers: {c['n_questions']} questions with gold answers ({c['n_refused']} refused)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for m, v in report["metrics"].items():
            table.add_row(m, "n/a" if v is None else (f"{v:.1f}" if m.endswith("_ms") else f"{v:.4f}"))
        for m in ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate"):
            if "refusal" in report:
                v = report["refusal"][m]
                table.add_row(m, "n/a" if v is None else f"{v:.4f}")
        _stdout().print(table)
    if "judge" in report:
        _print_judge(report["judge"])
    if quiet:
        return
    _warn_answer_checks(report)
    _note(f"written: {path}")


def _warn_answer_checks(report: dict) -> None:
    """On stderr (with or without --json): questions without an answer row,
    rows without gold, and judge outputs that could not be parsed."""
    if report.get("missing_answers"):
        _warn(f"{len(report['missing_answers'])} question(s) of the gold file have no answer row: "
              + _ids(report["missing_answers"]))
    if report.get("no_gold"):
        _warn(f"{len(report['no_gold'])} answer row(s) have no gold answer and were not scored: "
              + _ids(report["no_gold"]))
    if "judge" not in report:
        return
    c = report["judge"]["counts"]
    bad = {k: sum(v) for k, v in c["unparsed"].items() if sum(v)}
    if bad or sum(c["question_generations_unparsed"]):
        _warn("judge outputs that could not be parsed (all repeats): "
              + ", ".join(f"{k} {v}" for k, v in bad.items())
              + f"; question generations {sum(c['question_generations_unparsed'])}")
    if c["missing_contexts"]:
        _warn(f"{len(c['missing_contexts'])} evidence chunk(s) are not in chunks.parquet and were left out of "
              "the judge's context: " + _ids(c["missing_contexts"]))


def _print_judge(judge: dict) -> None:
    """The judge's table (mean ± sd over repeats)."""
    from rich.table import Table

    from rag_cli.evaluate.markdown import judge_model_line
    from rag_cli.safe_text import plain_text

    c = judge["counts"]
    table = Table(title=plain_text(f"LLM judge: {c['n_judged']} answers judged ({c['n_refused']} refused, not "
                                   f"judged), {c['n_repeats']} repeat(s); {judge_model_line(judge['model'])}"))
    for col in ("metric", "mean", "sd", "repeats"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for m, r in judge["metrics"].items():
        table.add_row(m, "n/a" if r["mean"] is None else f"{r['mean']:.4f}",
                      "n/a" if r["sd"] is None else f"{r['sd']:.4f}",
                      " ".join("n/a" if v is None else f"{v:.4f}" for v in r["repeats"]))
    _stdout().print(table)


def _print_tuning(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    best = report["best"]
    setting = ", ".join(f"{k} {v}" for k, v in best.items())
    metric = report["metric"]
    table = Table(title=f"fusion tuned on train ({report['train']['n_queries']} queries) for {metric}: {setting}")
    for col in ("split", "RRF k=60", "tuned", "diff", "p rand (Holm)"):
        table.add_column(col, justify="left" if col == "split" else "right")
    t = report["train"]
    table.add_row("train", f"{t['default']:.4f}", f"{t['best']:.4f}", f"{t['best'] - t['default']:+.4f}", "")
    if report["test"]:
        row = report["test"]["comparison"]["metrics"][metric]
        table.add_row(f"test ({report['test']['n_queries']})", f"{row['baseline']:.4f}", f"{row['run']:.4f}",
                      f"{row['mean_diff']:+.4f}", f"{row['p_randomisation_holm']:.4f}")
    _stdout().print(table)
    if not quiet:
        _note(f"written: {report['written_to']} (search.fusion) and {path}")


def _print_refusal_tuning(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    setting = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in report["best"].items())
    table = Table(title=f"refusal gate tuned on train for false refusals <= {report['max_false_refusal']:g}"
                        f"{'' if report['target_met'] else ' (target not met)'}: {setting}")
    for col in ("split", "setting", "refused unanswerable", "false answers", "false refusals"):
        table.add_column(col, justify="left" if col in ("split", "setting") else "right")
    for split in ("train", "test"):
        for which in ("current", "tuned"):
            if report[split] is None:
                continue
            r = report[split][which]
            table.add_row(f"{split} ({r['n_answerable']}+{r['n_unanswerable']})", which,
                          *("n/a" if r[m] is None else f"{r[m]:.4f}"
                            for m in ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate")))
    _stdout().print(table)
    if not quiet:
        _note(f"written: {report['written_to']} ([ask] thresholds) and {path}")


def _print_perturb(report: dict, path: Path, quiet: bool) -> None:
    """One row per metric (they are many: every metric at every cutoff), one
    column per kind of change with its loss; the table stays narrow."""
    from rich.table import Table

    kinds = report["perturbations"]
    table = Table(title=f"perturbed queries ({report['n_queries']}, mode {report['mode']}): changed - original")
    table.add_column("metric")
    table.add_column("original", justify="right")
    for kind in kinds:
        table.add_column(kind, justify="right")
    table.add_row("queries changed", "", *(str(r["n_changed"]) for r in kinds.values()), end_section=True)
    for m, v in report["original"].items():
        table.add_row(m, f"{v:.4f}", *(f"{r['loss'][m]:+.4f}" for r in kinds.values()))
    _stdout().print(table)
    if not quiet:
        _note(f"written: {path}")


def _print_funnel(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    n = report["n_queries"]
    c = report["counts"]
    table = Table(title=f"funnel: {n} queries with a relevant document (k {report['params']['k']}, "
                        f"candidates {report['params']['candidates']})")
    table.add_column("where the gold is missing")
    table.add_column("queries", justify="right")
    table.add_column("share", justify="right")
    rows = [("not in sparse candidates", c["not_in_sparse"]), ("not in dense candidates", c["not_in_dense"])]
    labels = {"retrieval": "first lost: in neither candidate list", "fusion": "first lost: in fusion",
              "rerank": "first lost: dropped by rerank", "evidence": "first lost: cut from the evidence",
              "citation": "first lost: not cited", "none": "reached the last layer measured"}
    measured = set(report["layers_measured"]) | {"retrieval", "none"}
    rows += [(labels[s], v) for s, v in c["first_missing"].items()
             if s in measured or (s == "citation" and "cited" in measured)]
    for label, v in rows:
        table.add_row(label, str(v), f"{v / n:.1%}" if n else "")
    _stdout().print(table)
    _stdout().print("ANN recall (HNSW vs exact): " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.4f}'}" for k, v in report["ann"].items()),
                    highlight=False)
    if not quiet:
        _note(f"written: {path}")


def _ids(ids: list, shown: int = 10) -> str:
    return ", ".join(map(str, ids[:shown])) + (f", ... ({len(ids) - shown} more)" if len(ids) > shown else "")


def _warn_run_checks(report: dict, run: str | None = None, *, given_run: bool = True) -> None:
    """Say on stderr what trec_eval would have done silently: queries scored 0
    or ignored (by id), repeated rows, ties ordered by id, and (for a run file
    the user gave, `given_run`) a run shallower than the largest k; each line
    led by "RUN: " when `run` is given (one run of several)."""
    n = report["n_queries"]
    lead = f"{run}: " if run else ""
    depth, ks = report.get("run_depth", 0), report.get("ks") or [0]
    if given_run and 0 < depth < max(ks):
        _warn(f"{lead}the run holds at most {depth} document{'s' if depth != 1 else ''} per query, fewer than "
              f"k = {max(ks)}: metrics at a larger k count only those (P@{max(ks)} <= {depth / max(ks):.3g}); "
              f"search deeper or leave out that k (--ks)")
    if report.get("queries_missing_from_run"):
        ids = report["queries_missing_from_run"]
        _warn(f"{lead}{len(ids)} of {n} qrels queries are not in the run and score 0 "
              f"(is it the run and qrels of the same query set?): {_ids(ids)}")
    if report.get("queries_without_relevant"):
        ids = report["queries_without_relevant"]
        _warn(f"{len(ids)} qrels quer{'y has' if len(ids) == 1 else 'ies have'} no relevant document "
              f"(relevance >= 1) and score 0: {_ids(ids)}")
    if report.get("run_queries_not_in_qrels"):
        ids = report["run_queries_not_in_qrels"]
        _warn(f"{lead}{len(ids)} run quer{'y is' if len(ids) == 1 else 'ies are'} not in the qrels and ignored: {_ids(ids)}")
    dups = report.get("duplicates") or {}
    if dups.get("n"):
        ex = ", ".join(f"{q}/{c}" for q, c in dups["examples"])
        _warn(f"{lead}{dups['n']} repeated (query, id) row(s) counted once, at their best score; e.g. {ex}")
    ties = report.get("ties") or {}
    if ties.get("n_groups"):
        _note(f"ties: {ties['n_ids']} ids in {ties['n_groups']} groups of equal score "
              f"({ties['n_queries']} queries) ordered by id, descending, as trec_eval orders them")


# --------------------------------------------------------------------------- models
models_app = typer.Typer(
    name="models",
    help="List, describe, check, quantise and fetch ONNX model folders.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(models_app, name="models")
NameArg = Annotated[str, typer.Argument(help="A model folder, a default name, or a Hugging Face id fetched by `rag models pull`")]


def _size(n: int) -> str:
    """Bytes as `12.3 MB` (or `4.5 kB` below 1 MB); decimal units."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


@models_app.command("list")
@handle_errors
def models_list(project: ProjectOpt = None, json_out: JsonOpt = False):
    """The default models, the cache folder and its size, pulled models, and the project's models."""
    from dataclasses import asdict

    from rag_cli.models.manage import list_models
    from rag_cli.project import Project

    p = Project.open(project)
    res = list_models(p.root, asdict(p.config.model) if p.config_path.is_file() else None)
    if json_out:
        return _emit_json(res)
    out = _stdout()
    c = res["cache"]
    out.print(f"cache: {c['path']} ({_size(c['bytes'])})", highlight=False, markup=False)
    out.print("defaults:", highlight=False)
    for d in res["defaults"]:
        state = "converted" if d["converted"] else ("not converted yet" if d["installed"] else "packages missing")
        out.print(f"  {d['name']}  {d['kind']}  {state}  [{', '.join(d['precisions']) or '-'}]  {d['path']}",
                  highlight=False, markup=False)
    if res["cached"]:
        out.print("pulled:", highlight=False)
        for m in res["cached"]:
            out.print(f"  {m['name']}  [{', '.join(m['precisions']) or '-'}]  {_size(m['bytes'])}  {m['path']}",
                      highlight=False, markup=False)
    pr = res["project"]
    if pr:
        out.print(f"project {pr['path']}:", highlight=False, markup=False)
        for role in ("embedder", "reranker"):
            w = pr[role]
            extra = f" ({pr['precision']})" if role == "embedder" else ""
            out.print(f"  {role}  {w['value'] or '-'}{extra}  {w['status']}  {w['path'] or ''}",
                      highlight=False, markup=False)


@models_app.command("info")
@handle_errors
def models_info(name: NameArg, precision: PrecisionOpt = "int8", json_out: JsonOpt = False):
    """Kind, dimension, max_length, pooling, prefixes, graph inputs/outputs, fingerprint, files, precision."""
    from rag_cli.models.manage import model_info

    res = model_info(name, precision or "int8")
    if json_out:
        return _emit_json(res)
    out = _stdout()
    keys = ["name", "path", "kind", "kind_source", "dim", "n_logits", "max_length", "pooling", "pooled_in_graph",
            "normalize", "query_prefix", "passage_prefix", "onnx_file", "query_onnx_file", "precision", "fingerprint"]
    for k in keys:
        if res.get(k) is not None:
            out.print(f"{k:15} {res[k]!r}" if isinstance(res[k], str) and k.endswith("prefix") else f"{k:15} {res[k]}",
                      highlight=False, markup=False)
    for k in ("inputs", "outputs"):
        shown = ", ".join(f"{v['name']} {v['type'].lower()} {v['shape']}" for v in res[k])
        out.print(f"{k:15} {shown}", highlight=False, markup=False)
    for f in res["onnx_files"]:
        role = f"  (query graph of {f['query_graph_of']})" if f.get("query_graph_of") else ""
        out.print(f"{'file':15} {f['path']}  {f['precision']}  {_size(f['bytes'])}{role}", highlight=False, markup=False)
    for w in res["warnings"]:
        _stderr().print(f"[yellow]warning:[/] {w}", highlight=False)


@models_app.command("verify")
@handle_errors
def models_verify(name: NameArg, precision: PrecisionOpt = "int8", json_out: JsonOpt = False):
    """Load a model and check it ranks a relevant passage above an irrelevant one (English, Chinese); exit 1 if not."""
    from rag_cli.models.manage import verify_model

    res = verify_model(name, precision or "int8")
    if json_out:
        _emit_json(res)
    else:
        out = _stdout()
        queries = f", queries on {res['query_onnx_file']}" if res.get("query_onnx_file") else ""
        out.print(f"{res['name']} ({res['kind']}, {res['onnx_file']}, {res['precision']}{queries}): {res['score']}s",
                  highlight=False, markup=False)
        for c in res["checks"]:
            mark = "ok" if c["ok"] else "FAIL"
            out.print(f"  {c['lang']}  relevant {c['relevant_score']:.4f}  irrelevant {c['irrelevant_score']:.4f}  "
                      f"{mark}  ({c['query']})", highlight=False, markup=False)
    if not res["ok"]:
        if not json_out:
            _error("sanity check failed: a relevant passage did not score above an irrelevant one")
        raise typer.Exit(1)


@models_app.command("quantize")
@handle_errors
def models_quantize(
    directory: Annotated[Path, typer.Argument(help="A model folder with a float32 model.onnx or onnx/model.onnx")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Write a complete int8 model folder here (default: add model_quantized.onnx to DIRECTORY)")] = None,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="Fused graphs: each FFN's outlier channels in float32, the rest of the FFN int8 (the default model's recipe; docs/models.md)")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Dynamic int8 quantisation (per channel): writes model_quantized.onnx beside the float32 graph (and, for an embedder, its query graph model_quantized_query.onnx)."""
    from rag_cli.models.manage import quantize_model

    res = quantize_model(directory, out, calibrate=calibrate)
    if json_out:
        _emit_json(res)
    elif not quiet:
        a = res["agreement"]
        _stderr().print(
            f"{res['onnx_file']}: {_size(res['bytes_fp32'])} -> {_size(res['bytes_int8'])} "
            f"({len(res['fp32_matmuls'])} MatMuls kept in float32)"
            + (f", query graph {res['query_onnx_file']}" if res.get("query_onnx_file") else "")
            + f"; {a['metric']}: {a['value']:.4f} -> {res['path']}",
            highlight=False, markup=False,
        )
        if "shadowed_by" in res:
            _stderr().print(f"note: --precision int8 picks {res['shadowed_by']} in this folder, not {res['onnx_file']}; "
                            "use --out DIR for a folder of its own", highlight=False, markup=False)


@models_app.command("pull")
@handle_errors
def models_pull(
    hf_id: Annotated[str, typer.Argument(help="Hugging Face model id with an ONNX export, e.g. Xenova/ms-marco-MiniLM-L-6-v2")],
    revision: Annotated[Optional[str], typer.Option("--revision", help="Branch, tag or commit")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Folder to write (default: the cache, where --model HF_ID finds it)")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Download an ONNX export (graphs, tokenizer, config) from the Hugging Face Hub (needs huggingface_hub, the hub extra; online)."""
    from rag_cli.models.manage import pull_model

    res = pull_model(hf_id, revision, out)
    if json_out:
        _emit_json(res)
    elif not quiet:
        _stderr().print(f"{res['id']}: {len(res['files'])} files, {_size(res['bytes'])}, "
                        f"[{', '.join(res['precisions'])}] -> {res['path']}", highlight=False, markup=False)


def _terminated(signum, frame) -> None:
    """SIGTERM (cron timeouts, `kill`): unwind like Ctrl-C, so that temporary
    files are removed and nothing half-written is renamed into place."""
    raise KeyboardInterrupt


def main() -> None:
    """Entry point of `rag` and `python -m rag_cli`.

    Once the command has finished (its files written and renamed, the project
    lock released, its output flushed) the process ends with `os._exit`: the
    interpreter's teardown would only free memory (the tokenizer alone takes
    a quarter of a second to free; docs/startup.md).
    """
    import signal

    signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `rag search ... | head`: the reader is gone
        pass
    os._exit(code)


if __name__ == "__main__":
    main()
