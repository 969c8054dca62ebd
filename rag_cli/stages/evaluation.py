"""`rag eval`: a run + qrels -> metrics, written to eval/NAME.json."""

from __future__ import annotations

from pathlib import Path

from rag_cli.evaluate.datasets import read_qrels
from rag_cli.evaluate.report import evaluate_rows
from rag_cli.store.eval_reports import write_report
from rag_cli.store.runs import read_run


def evaluate(run_path: Path, qrels_path: Path, ks: list[int], path: Path | None) -> dict:
    """Evaluate the run at `run_path` against `qrels_path` at cutoffs `ks`
    and write the report to `path` (eval/NAME.json; None: not written).

    Document level by the best-ranked chunk per document (MaxP) unless the
    qrels judge chunk ids. Returns the report.
    Raises BadInput for a missing or malformed run or qrels file.
    """
    qrels = read_qrels(qrels_path)
    rows = read_run(run_path)
    report = {"run": str(run_path), "qrels": str(qrels_path), **evaluate_rows(rows, qrels, ks)}
    if path is not None:
        write_report(path, report)
    return report


# what `compare` keeps of each run's report, per run, under "run_checks" (see `rag_cli.evaluate.report.evaluate_run`)
_RUN_CHECKS = ("n_queries", "queries_missing_from_run", "run_queries_not_in_qrels", "duplicates", "run_depth", "ks")


def compare(run_paths: list[Path], qrels_path: Path, ks: list[int], path: Path | None, *,
            permutations: int = 10000, seed: int = 0) -> dict:
    """Score each run against `qrels_path` (as `evaluate`) and compare every
    run with the first (see `rag_cli.evaluate.compare.compare_reports`), with
    "run_checks": per run its name and the _RUN_CHECKS of its report; write
    the report to `path` unless None. Returns the report.
    Raises BadInput for fewer than two runs or a missing or malformed file."""
    from rag_cli.errors import BadInput
    from rag_cli.evaluate.compare import compare_reports

    if len(run_paths) < 2:
        raise BadInput(f"--compare needs two or more run files (the first is the baseline), got {len(run_paths)}")
    if permutations < 1:
        raise BadInput(f"--permutations {permutations}: must be at least 1")
    qrels = read_qrels(qrels_path)
    stems = [Path(p).name for p in run_paths]
    names = stems if len(set(stems)) == len(stems) else [str(p) for p in run_paths]
    reports = [evaluate_rows(read_run(p), qrels, ks) for p in run_paths]
    checks = [{"run": n, **{key: r[key] for key in _RUN_CHECKS}} for n, r in zip(names, reports)]
    report = {"qrels": str(qrels_path), "run_files": [str(p) for p in run_paths],
              **compare_reports(reports, names, permutations=permutations, seed=seed), "run_checks": checks}
    if path is not None:
        write_report(path, report)
    return report


def evaluate_answers(answers_path: Path, gold_path: Path | None, chunks_path: Path, path: Path | None,
                     unanswerable: Path | None = None, ask_config=None) -> dict:
    """Score answers/NAME.parquet against gold answers (`answers.jsonl`, see
    `rag_cli.evaluate.datasets.read_gold_answers`) with the chunk texts of
    `chunks_path` (see `rag_cli.evaluate.answers.answer_metrics`); write the
    report to `path` unless None. With `unanswerable` (answers to
    made-unanswerable questions), "refusal" holds `refusal_rates` of the
    refused flags of every row of each file, and "recorded_gate_off" the
    files of the two that look recorded with `rag ask --gate off` under the
    `[ask]` config `ask_config` (`gate_tuning.looks_gate_off`: their refusals
    are the generator's alone). Returns the report
    ({"answers": path} and "refusal" only when `gold_path` is None).
    Raises BadInput for a missing or malformed answers, gold or chunks file."""
    from rag_cli.evaluate.answers import answer_metrics, refusal_rates
    from rag_cli.evaluate.datasets import read_gold_answers
    from rag_cli.store.answers import evidence_fingerprint, read_answers, read_evidence_fingerprint
    from rag_cli.store.chunks import read_chunks

    answers = read_answers(answers_path)  # checked first: a bad file fails before a judge loads
    rows = answers.to_pylist()
    report: dict = {"answers": str(answers_path)}
    if gold_path is not None:
        gold = read_gold_answers(gold_path)
        wanted = {c for r in rows for c in (r.get("citations") or []) + (r.get("contexts") or [])}
        table = read_chunks(chunks_path, columns=["chunk_id", "text"], required=["chunk_id", "text"])
        texts = {c: t for c, t in zip(table.column("chunk_id").to_pylist(), table.column("text").to_pylist())
                 if c in wanted}
        unknown = _chunks_not_in_project(wanted, texts, answers_path, chunks_path)
        report.update({"gold": str(gold_path), **answer_metrics(rows, gold, texts)})
        report["n_chunks_not_in_project"] = unknown
        recorded = read_evidence_fingerprint(answers)
        # None: written before the fingerprint was kept; else whether this project's texts of those chunks differ
        report["evidence_changed"] = (None if recorded is None else
                                      recorded != evidence_fingerprint({c: texts.get(c, "") for c in wanted}))
    if unanswerable is not None:
        from rag_cli.evaluate.gate_tuning import looks_gate_off

        cut = read_answers(unanswerable).to_pylist()
        report["unanswerable"] = str(unanswerable)
        report["refusal"] = refusal_rates([r["refused"] for r in rows], [r["refused"] for r in cut])
        if ask_config is not None:
            report["recorded_gate_off"] = [str(f) for f, rs in ((answers_path, rows), (unanswerable, cut))
                                           if looks_gate_off(rs, ask_config)]
    if path is not None:
        write_report(path, report)
    return report


def _chunks_not_in_project(wanted: set[str], found, answers_path: Path, chunks_path: Path) -> int:
    """How many of the chunk ids `wanted` (cited or given as evidence in
    `answers_path`) are not among `found` (those of `chunks_path`). Raises
    BadInput when none is found: the answers were recorded in another
    project."""
    from rag_cli.errors import BadInput

    unknown = len(wanted) - sum(1 for c in wanted if c in found)
    if wanted and unknown == len(wanted):
        raise BadInput(f"the answers in {answers_path} cite chunks that are not in project {chunks_path.parent} "
                       f"(none of their {len(wanted)} evidence chunk ids is in {chunks_path}): were they recorded "
                       "in another project? use -p PROJECT of `rag ask --queries`")
    return unknown


def judge_answers(answers_path: Path, chunks_path: Path, completes: list, encode, *, n_questions: int = 3,
                  context_tokens: int = 2048, progress=None) -> dict:
    """Faithfulness and answer relevancy of answers/NAME.parquet (see
    `rag_cli.evaluate.judge.judge_answers`), each repeat with one of
    `completes`, against the text the generator read of each evidence chunk
    (the chunk's `context` when chunks.parquet has one, else its `text`).
    Returns the judge's report. Raises BadInput for a missing or malformed
    answers or chunks file."""
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
    _chunks_not_in_project(wanted, texts, answers_path, chunks_path)
    return judge(rows, texts, completes, encode, n_questions=n_questions, context_tokens=context_tokens,
                 progress=progress)
