"""Judge answers with an LLM (`rag eval answers --answers A --judge`): RAGAS
faithfulness and answer relevancy (see `rag_cli.evaluate.judge`; Es et al.,
"RAGAS: Automated Evaluation of Retrieval Augmented Generation", EACL 2024
demos), repeated with seeds 0..R-1, under the "judge" key of the answers
report of `rag_cli.lab.answers` (whose metrics come too when gold answers
are given)."""

from __future__ import annotations

import os
from pathlib import Path

from rag_cli.config import check_flag
from rag_cli.errors import BadInput
from rag_cli.lab.answers import AnswersReport, chunks_not_in_project, prepare_answers, score_answers
from rag_cli.progress import Progress

#: The flags of `rag eval answers --judge` that set [ask]/[generator] keys for the judge (named in errors).
JUDGE_FLAGS = {"generator": "--judge-generator", "base_url": "--judge-base-url", "model": "--judge-model",
               "api": "--judge-api"}


def judge_answers(answers_path: Path, chunks_path: Path, completes: list, encode, *, n_questions: int = 3,
                  context_tokens: int = 2048, progress=None) -> dict:
    """Faithfulness and answer relevancy of answers/NAME.parquet
    (`rag_cli.evaluate.judge.judge_answers`), repeat r with `completes[r]`
    (prompt, max_tokens -> text), `encode` (texts -> query vectors) for
    relevancy, against the text the generator read of each evidence chunk
    (its `context` when chunks.parquet has one, else its `text`), cut to
    `context_tokens`. Returns the judge's report (metrics, counts, per_query).
    Raises BadInput for a missing or malformed answers or chunks file, or
    answers whose evidence is in no chunk of this project."""
    from rag_cli.evaluate.judge import judge_answers as judge
    from rag_cli.store.answers import read_answers
    from rag_cli.store.chunks import read_chunks
    from rag_cli.store.parquet import open_parquet, rerun

    rows = read_answers(answers_path).to_pylist()
    with open_parquet(chunks_path, rerun("chunk"), required=["chunk_id", "text"]) as pf:
        has_context = "context" in pf.schema_arrow.names
    columns = ["chunk_id", "text", *(["context"] if has_context else [])]
    table = read_chunks(chunks_path, columns=columns, required=["chunk_id", "text"])
    wanted = {c for r in rows if not r["refused"] for c in (r.get("contexts") or [])}
    contexts = table.column("context").to_pylist() if has_context else [None] * table.num_rows
    texts = {c: ctx or t for c, t, ctx in zip(table.column("chunk_id").to_pylist(), table.column("text").to_pylist(),
                                               contexts) if c in wanted}
    chunks_not_in_project(wanted, texts, answers_path, chunks_path)
    return judge(rows, texts, completes, encode, n_questions=n_questions, context_tokens=context_tokens,
                 progress=progress)


def _judge(p, answers: Path, generator: str | None, repeats: int, temperature: float, n_questions: int,
           llm: dict | None, progress: Progress | None) -> dict:
    """The "judge" part of the report: the LLM set up from project `p`'s
    config (`generator`, `llm` overrides of [generator]), the project's
    bi-encoder for relevancy, `judge_answers`; "model" records the judge's
    settings. Raises BadInput for an extractive generator or bad settings."""
    from rag_cli.generate.factory import describe_generator, load_generator

    config, _ = p.config.with_options("ask", {"generator": generator}, JUDGE_FLAGS)
    config, _ = config.with_options("generator", llm, JUDGE_FLAGS)
    if config.ask.generator == "extractive":
        raise BadInput("--judge needs an LLM: give --judge-generator openai or llama-cpp "
                       "(or set ask.generator), with the [generator] settings of that model")
    gen = load_generator(config.ask, None, None, config.generator, threads=config.model.threads,
                         model_flag="--judge-model" if (llm or {}).get("model") else "--llm-model")
    embedder = p.engines.embedder(config)
    completes = [lambda prompt, max_tokens, seed=seed: gen.complete(prompt, max_tokens, temperature=temperature,
                                                                    seed=seed)
                 for seed in range(repeats)]
    out = judge_answers(answers, p.chunks_path, completes, embedder.encode_queries, n_questions=n_questions,
                        context_tokens=config.generator.context_tokens, progress=progress)
    settings = {**describe_generator(gen), "temperature": temperature, "seeds": list(range(repeats)),
                "repeats": repeats, "questions_per_answer": n_questions,
                "context": "contexts (every evidence chunk given to the generator; small-to-big: its context)",
                "context_tokens": config.generator.context_tokens, "encoder": config.model.embedder}
    return {"model": settings, **out}


def run(p, answers: str | os.PathLike, gold: str | os.PathLike | None = None, *,
        judge_generator: str | None = None, judge_repeats: int = 3, judge_temperature: float = 0.3,
        judge_questions: int = 3, llm: dict | None = None, name: str | None = None,
        output: str | os.PathLike | None = None, unanswerable: str | os.PathLike | None = None,
        md: str | os.PathLike | None = None, plots: str | os.PathLike | None = None,
        progress: Progress | None = None) -> AnswersReport:
    """Judge `answers` of project `p`: faithfulness and answer relevancy
    under the report's "judge" key, judged by `judge_generator` (openai |
    llama-cpp; None: ask.generator) set up by the [generator] config with
    `llm` overrides ({key: value}), `judge_repeats` times (1-100), repeat r
    sampled at `judge_temperature` (0-2) with seed r (at 0 the repeats are
    identical on a deterministic server), `judge_questions` (1-20)
    questions per answer for relevancy; with `gold` also the answer
    metrics of `rag_cli.lab.answers.run`. Writes `output`, else
    eval/NAME.json (NAME: `name`, else answers-ANSWERS).
    Raises BadInput for an extractive judge, a flag out of its range, or a
    bad file; every check runs before the LLM is loaded."""
    path = prepare_answers(p, answers, gold, unanswerable, name=name, output=output, md=md, plots=plots)
    check_flag("--judge-repeats", judge_repeats, (1, 100))
    check_flag("--judge-questions", judge_questions, (1, 20))
    check_flag("--judge-temperature", judge_temperature, (0, 2))
    data = score_answers(Path(answers), Path(gold) if gold is not None else None, p.chunks_path,
                         unanswerable=Path(unanswerable) if unanswerable is not None else None,
                         ask_config=p.config.ask)
    data["judge"] = _judge(p, Path(answers), judge_generator, judge_repeats, judge_temperature, judge_questions,
                           llm, progress)
    report = AnswersReport(data, path, chunks_path=p.chunks_path)
    report.save()
    return report
