"""From a run to an evaluation report (a JSON-ready dict).

A run of chunks is scored at document level by **MaxP**: each document takes
the rank of its best-ranked chunk, and the document ranking is the order of
those best ranks. To keep exactly the run's order (and never let the metric's
score-then-doc-id tie-breaking reorder documents whose chunks had equal
scores), the document score is derived from the rank: `1 / best_rank`.
Distinct ranks give distinct scores, so no ties remain.

When the qrels judge chunk ids instead of document ids (DESIGN.md: "relevance
is at document level unless the ids are chunk ids"), `run_for_qrels` scores
the chunks themselves, again with `1 / rank` as the score.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from rag_cli.evaluate.metrics import METRICS, RELEVANCE_LEVEL, Qrels, Run
from rag_cli.store.runs import as_rows

DEFAULT_KS = (1, 5, 10, 20, 100)
DEFAULT_METRICS = ("recall", "hit", "mrr", "ndcg")


def _best_ranks(rows: Iterable[Any], key: str) -> dict[str, dict[str, int]]:
    best: dict[str, dict[str, int]] = {}
    for r in as_rows(rows):
        ident = r.doc_id if key == "doc" else r.chunk_id
        per_q = best.setdefault(r.query_id, {})
        if ident not in per_q or r.rank < per_q[ident]:
            per_q[ident] = int(r.rank)
    return best


def _to_scores(best: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    return {qid: {d: 1.0 / rank for d, rank in docs.items()} for qid, docs in best.items()}


def doc_level_run(rows: Iterable[Any]) -> dict[str, dict[str, float]]:
    """MaxP: `{query_id: {doc_id: 1/best_rank}}` from run rows.

    `rows` are `RunRow`s, 7-tuples, dicts or a `pyarrow.Table` (see
    `rag_cli.store.runs`). The best (lowest) rank of a document's chunks decides its
    place; the score `1 / best_rank` reproduces that order exactly.
    """
    return _to_scores(_best_ranks(rows, "doc"))


def chunk_level_run(rows: Iterable[Any]) -> dict[str, dict[str, float]]:
    """`{query_id: {chunk_id: 1/rank}}` from run rows (for chunk-level qrels)."""
    return _to_scores(_best_ranks(rows, "chunk"))


def judged_level(rows: Iterable[Any], qrels: Qrels) -> str:
    """"chunk" if the qrels judge chunk ids of this run, else "doc".

    The qrels are chunk-level when some judged id is a chunk id in the run and
    none is a document id in the run.
    """
    rows = as_rows(rows)
    chunk_ids = {r.chunk_id for r in rows}
    doc_ids = {r.doc_id for r in rows}
    judged = {d for docs in qrels.values() for d in docs}
    if judged & chunk_ids and not judged & doc_ids:
        return "chunk"
    return "doc"


def run_for_qrels(rows: Iterable[Any], qrels: Qrels, level: str = "auto") -> tuple[dict[str, dict[str, float]], str]:
    """The run as `{qid: {id: score}}` at the level the qrels judge, and that level.

    `level` is "doc" (MaxP), "chunk", or "auto" (see `judged_level`).
    """
    rows = as_rows(rows)
    if level == "auto":
        level = judged_level(rows, qrels)
    if level == "doc":
        return doc_level_run(rows), level
    if level == "chunk":
        return chunk_level_run(rows), level
    raise ValueError(f"level must be 'doc', 'chunk' or 'auto', got {level!r}")


def evaluate_run(
    run: Run,
    qrels: Qrels,
    ks: Sequence[int] = DEFAULT_KS,
    metrics: Sequence[str] = DEFAULT_METRICS,
) -> dict:
    """Evaluate `run` (`{qid: {doc_id: score}}`) against `qrels`; a JSON-ready dict.

    Returns::

        {
          "metrics": {"recall@10": mean, ...},          # mean over n_queries
          "per_query": {qid: {"recall@10": value, ...}},
          "n_queries": ...,                  # queries in the qrels: all are scored
          "n_queries_in_run": ...,           # of those, how many the run answers
          "n_queries_missing_from_run": ..., # scored 0
          "n_queries_without_relevant": ..., # in the qrels, no judgement >= 1: scored 0
          "n_run_queries_not_in_qrels": ..., # ignored, as trec_eval ignores them
          "ks": [...], "metric_names": [...],
          "definitions": "...",
        }

    Metrics are those of `rag_cli.evaluate.metrics` ("recall", "hit", "mrr",
    "ndcg", "precision"), each at every k in `ks`.
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    ks = sorted({int(k) for k in ks})
    names = [f"{m}@{k}" for m in metrics for k in ks]
    per_query: dict[str, dict[str, float]] = {qid: {} for qid in qrels}
    for m in metrics:
        for k in ks:
            for qid, value in METRICS[m](run, qrels, k).items():
                per_query[qid][f"{m}@{k}"] = value
    n = len(qrels)
    means = {name: (sum(v[name] for v in per_query.values()) / n if n else 0.0) for name in names}
    in_run = sum(1 for qid in qrels if run.get(qid))
    return {
        "metrics": means,
        "per_query": per_query,
        "n_queries": n,
        "n_queries_in_run": in_run,
        "n_queries_missing_from_run": n - in_run,
        "n_queries_without_relevant": sum(
            1 for docs in qrels.values() if not any(rel >= RELEVANCE_LEVEL for rel in docs.values())
        ),
        "n_run_queries_not_in_qrels": sum(1 for qid in run if qid not in qrels),
        "ks": ks,
        "metric_names": names,
        "definitions": (
            "trec_eval definitions (recall.k, success.k, recip_rank on the top k, ndcg_cut.k, P.k); "
            f"relevant = relevance >= {RELEVANCE_LEVEL}; nDCG gain = relevance, discount log2(rank+1); "
            "ties: score desc, then doc id desc; every query in the qrels is scored "
            "(0 if missing from the run); run queries not in the qrels are ignored"
        ),
    }


def evaluate_rows(
    rows: Iterable[Any],
    qrels: Qrels,
    ks: Sequence[int] = DEFAULT_KS,
    metrics: Sequence[str] = DEFAULT_METRICS,
    level: str = "auto",
) -> dict:
    """`evaluate_run` on run rows: MaxP document level (or chunk level when the
    qrels judge chunk ids); the report adds `"level"` and `"aggregation"`."""
    run, level = run_for_qrels(rows, qrels, level)
    report = evaluate_run(run, qrels, ks, metrics)
    report["level"] = level
    report["aggregation"] = "MaxP: best-ranked chunk per document" if level == "doc" else "none (chunk ids judged)"
    return report

