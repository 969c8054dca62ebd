"""`rag ask`: answer one question (printed, streamed or as JSON) or every
question of a query file (answers/NAME.parquet), from the indexed sources only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli import render_query as show
from rag_cli.cli.common import as_dict, emit_json, given, note, progress, warn
from rag_cli.cli.options import ASK, LLM, OUTPUT, PROJECT, FilterOpt, Settings, options
from rag_cli.cli.root import app
from rag_cli.errors import BadInput, Interrupted

#: The retrieval mode of the evidence (search.mode).
#: `ask` retrieves as `search` does: every [search] key but k (the evidence depth is ask.k)
RETRIEVAL = Settings("search", "mode", "rrf_k", "candidates", "fusion", "dense_weight")
#: The extractive QA reader (model.reader, --reader DIR).
READER = Settings("model", "reader")

QuestionArg = Annotated[Optional[str], typer.Argument(help="A question; or use --queries FILE")]
QueriesOpt = Annotated[Optional[Path], typer.Option("--queries", help="Query file: writes answers/NAME.parquet")]
StreamOpt = Annotated[bool, typer.Option(
    "--stream", help="Print the answer as the LLM generator writes it (one QUESTION; not with --json or --queries)")]
NameOpt = Annotated[Optional[str], typer.Option(
    "--name", help="Answers name: answers/NAME.parquet (default: the query file's stem)")]


@app.command()
@options(ASK, RETRIEVAL, READER, LLM, PROJECT, OUTPUT)
def ask(question: QuestionArg = None, queries: QueriesOpt = None, stream: StreamOpt = False,
        filter_: FilterOpt = None, name: NameOpt = None, *, opts, project, json_out, quiet):
    r"""Answer from the indexed sources only, with numbered citations; refuse without evidence.

    Retrieves the top-k chunks, answers with citations `\[n]` (extractive by
    default, or an LLM with `--generator openai|llama-cpp`), and refuses
    ("Not found in the sources.") when the evidence is too weak. `--queries
    FILE` answers a file into `answers/NAME.parquet`.

    Examples: `rag ask "What does ef control?"`;
    `rag ask "..." --generator openai --base-url http://127.0.0.1:8080/v1 --stream`.

    Details (the refusal gate and its thresholds, generators, citations,
    `--json` fields, `--stream`, `--grade llm`): docs/answers.md (`rag ask` in detail).
    """
    from rag_cli.project import Project, check_name, one_of

    one_of("a QUESTION argument", question, "--queries FILE", queries)
    check_name(name)
    if stream and (json_out or queries is not None):
        raise BadInput(f"--stream prints one answer as it is written; it cannot be combined with "
                       f"{'--json' if json_out else '--queries'} (drop --stream, or that flag)")
    p = Project.open(project)
    _warn_unused_rerank_rule(p, opts)
    opts = {**given(opts), "filter": filter_}
    if question is not None:
        return _ask_one(p, question, opts, stream, json_out, quiet)
    with progress(quiet or json_out) as bar:
        out = as_dict(p.ask_queries(queries, **opts, name=name, progress=bar))
    show.queries_truncated(out["n_queries_truncated"], out["max_length"], quiet)
    if json_out:
        emit_json({"answers": str(out["answers"]), "n": out["n"], "refused": out["refused"],
                   "n_queries_truncated": out["n_queries_truncated"]})
    elif not quiet:
        note(f"{out['n']} answers ({out['refused']} refused) -> {out['answers']}")


def _warn_unused_rerank_rule(p, opts: dict) -> None:
    """Warn when the cross-encoder rule (ask.min_rerank_score, given or configured) is set without a reranker."""
    flag = opts.get("min_rerank_score")
    rule = flag if flag is not None else p.config.ask.min_rerank_score
    if rule and not p.config.model.reranker:
        where = "--min-rerank-score" if flag is not None else f"ask.min_rerank_score in {p.config_path}:"
        warn(f"{where} {rule:g} has no effect without a reranker (config model.reranker; "
             "set one with `rag rerank --model DIR`)")


def _ask_one(p, question: str, opts: dict, stream: bool, json_out: bool, quiet: bool) -> None:
    """Answer one question: printed (streamed with `stream`) or as JSON."""
    streamer = show.AnswerStream(question) if stream else None
    try:
        res = p.ask(question, **opts, on_text=streamer)
    except BaseException as exc:
        if streamer is not None:
            streamer.end_line()  # a message after a partial answer starts on its own line
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Interrupted):
            raise Interrupted("") from exc  # one question writes no file: just "interrupted"
        raise
    show.queries_truncated(res.n_queries_truncated, res.max_length, quiet)
    if json_out:
        from rag_cli.json_shapes import ask_json

        emit_json(ask_json(res))
    else:
        show.answer(res, streamed=streamer is not None and streamer.started)
        show.answer_checks(res, quiet)
