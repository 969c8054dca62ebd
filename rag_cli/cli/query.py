"""`rag search` and `rag rerank`: one query printed as a table (or JSON), or
a query file / run written as a run file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli import render_query as show
from rag_cli.cli.common import emit_json, given, note, progress
from rag_cli.cli.options import OUTPUT, PROJECT, SEARCH, FilterOpt, Settings, options
from rag_cli.cli.root import app

#: The cross-encoder (`rag rerank --model`), remembered in rag.toml once it has worked.
RERANKER = Settings("model", "reranker")

QueryArg = Annotated[Optional[str], typer.Argument(help="One query; or use --queries FILE")]
QueriesOpt = Annotated[Optional[Path], typer.Option(
    "--queries", help="Query file (JSONL _id/text or query_id/query, or TSV): writes a run")]
RunNameOpt = Annotated[Optional[str], typer.Option(
    "--name", help="Run name: runs/NAME.parquet (default: the query file's stem-mode)")]
RunFormatOpt = Annotated[str, typer.Option("--format", help="parquet | trec (for --queries)")]
LevelOpt = Annotated[str, typer.Option(
    "--level", help="chunk | doc: one run row per chunk, or per document (MaxP) (for --queries)")]
OutputOpt = Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the run here instead of runs/NAME")]

RerankQueryArg = Annotated[Optional[str], typer.Argument(
    help="One query (retrieved from the index first); or use --run FILE")]
RunOpt = Annotated[Optional[Path], typer.Option(
    "--run", help="A Parquet run to rerank (from `rag search --queries`)")]
CandidatesOpt = Annotated[int, typer.Option("--candidates", help="Top-N of the run to rescore")]
TopNOpt = Annotated[int, typer.Option("--top-n", "-k", help="Results kept per query")]
ModeOpt = Annotated[Optional[str], typer.Option("--mode", help="Retrieval mode for a single QUERY")]
RerankNameOpt = Annotated[Optional[str], typer.Option(
    "--name", help="Run name: runs/NAME.parquet (default: RUN-rerank)")]
FormatOpt = Annotated[str, typer.Option("--format", help="parquet | trec")]
SigmoidOpt = Annotated[bool, typer.Option(
    "--sigmoid", help="Scores as sigmoid(logit), a probability in [0, 1] (same order)")]
MinScoreOpt = Annotated[Optional[float], typer.Option(
    "--min-score", help="Drop results scoring below this (logit, or probability with --sigmoid); "
                        "a finite number, from 0 to 1 with --sigmoid (else exit 2)")]


@app.command()
@options(SEARCH, PROJECT, OUTPUT)
def search(query: QueryArg = None, queries: QueriesOpt = None, filter_: FilterOpt = None, name: RunNameOpt = None,
           fmt: RunFormatOpt = "parquet", level: LevelOpt = "chunk", output: OutputOpt = None, *, opts, project,
           json_out, quiet):
    r"""Search the index: one query prints a table (or --json); --queries writes a run.

    `--queries` (JSONL `_id`/`text` or
    `query_id`/`query`, or TSV) writes `runs/NAME.parquet` (default NAME:
    `<queries-stem>-<mode>`) or a 6-column TREC run (`--format trec`; the docno is
    the chunk id; an id with whitespace is written percent-encoded, `my notes.md#0`
    -> `my%20notes.md#0`, and a warning lists those ids). `--json` never prints
    NaN or Infinity (they would be `null`). A damaged `manifest.json` fails the
    command before any output is written. RRF counts an id that occurs twice in
    one ranked list once, at its first rank. `hybrid` fuses the top `candidates`
    (100) of each retriever by RRF with k = 60. Searching with a model other
    than the index's is an error (exit 2) naming both fingerprints.
    `--filter doc_id='guides/*'` restricts by a glob on a chunk column;
    repeated filters AND, and also match document fields and front matter
    (`--filter 'date>=2025-01-01' --filter 'tags in \[api,cli]'`, see docs/living-index.md).
    """
    from rag_cli.project import Project, check_name, one_of

    one_of("a QUERY argument", query, "--queries FILE", queries)
    check_name(name)
    p = Project.open(project)
    opts = {**given(opts), "filter": filter_}
    if query is not None:
        return _search_one(p, query, opts, json_out, quiet)
    with progress(quiet or json_out) as bar:
        run = p.search_queries(queries, **opts, name=name, format=fmt, output=output, level=level, progress=bar)
    show.queries_truncated(run.n_queries_truncated, run.max_length, quiet)
    show.escaped(run.escaped_ids, quiet)
    if json_out:
        emit_json({"run": str(run.path), "mode": run.mode, "k": run.k, "n_queries_truncated": run.n_queries_truncated,
                   "escaped_ids": list(run.escaped_ids)})
    elif not quiet:
        note(f"run written: {run.path}")


def _search_one(p, query: str, opts: dict, json_out: bool, quiet: bool) -> None:
    from rag_cli.json_shapes import search_json

    res = p.search(query, **opts)
    out = search_json(query, res)
    show.queries_truncated(res.n_queries_truncated, res.max_length, quiet)
    if json_out:
        emit_json(out)
    else:
        show.hits_table(query, res.mode, out["results"])


@app.command()
@options(RERANKER, PROJECT, OUTPUT)
def rerank(query: RerankQueryArg = None, run: RunOpt = None, candidates: CandidatesOpt = 100, top_n: TopNOpt = 10,
           mode: ModeOpt = None, name: RerankNameOpt = None, fmt: FormatOpt = "parquet", probability: SigmoidOpt = False,
           min_score: MinScoreOpt = None, *, opts, project, json_out, quiet):
    r"""Rescore the top-N of a search with an ONNX cross-encoder (raw logits, higher is better).

    Rescores the top-N of a run (or of a fresh search for one QUERY) with any ONNX
    cross-encoder folder (`optimum-cli export onnx --task text-classification`),
    keeps the top-n, stage `rerank`. Scores are raw logits (2-logit heads:
    `logit\[1] − logit\[0]`), or with `--sigmoid` their sigmoid, a probability
    computed in float64 (rows are ranked by the logits, so the order holds even
    where probabilities round to 1); the scale is stated in the table title and
    in `--json` (`score_scale`), the table prints as many decimals as keep
    distinct scores distinct, and `--min-score X` drops results below X on that
    scale; the passage alone is truncated (`only_second`). The pairs of all
    queries are scored together, in length-sorted token-budget batches. No
    cross-encoder ships on PyPI, so none is configured by default; a `--model`
    that worked is remembered in rag.toml.
    """
    from rag_cli.project import Project, check_name, one_of

    one_of("a QUERY argument", query, "--run FILE", run)
    check_name(name)
    p = Project.open(project)
    shared = {"candidates": candidates, "top_n": top_n, "sigmoid": probability, "min_score": min_score,
              **given(opts)}
    with progress(quiet or json_out) as bar:
        if query is not None:
            res = p.rerank(query, mode=mode, progress=bar, **shared)
        else:
            res = p.rerank_run(run, name=name, format=fmt, progress=bar, **shared)
    if not (quiet or json_out):
        show.pairs_truncated(res)
    if query is not None:
        return _reranked_query(query, res, json_out, quiet)
    show.escaped(res.escaped_ids, quiet)
    if json_out:
        from rag_cli.store.runs import read_run

        emit_json({"run": str(res.path), "queries": len({r.query_id for r in read_run(res.path)}),
                   "score_scale": res.score_scale})
    elif not quiet:
        note(f"reranked run written: {res.path} (scores: {res.score_scale})")


def _reranked_query(query: str, res, json_out: bool, quiet: bool) -> None:
    show.queries_truncated(res.n_queries_truncated, res.max_length, quiet)
    # full precision: probabilities near 1 differ past the 6th decimal
    shown = [{**show.hit_json(h), "score": float(h.score)} for h in res.hits]
    if json_out:
        emit_json({"query": query, "mode": "rerank", "score_scale": res.score_scale, "results": shown,
                   "n_queries_truncated": res.n_queries_truncated})
    else:
        show.hits_table(query, "rerank", shown, score_scale=res.score_scale)
