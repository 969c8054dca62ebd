"""From a run to an evaluation report (a JSON-ready dict).

A run is read as trec_eval reads it: per query, ordered by score descending,
ties by id descending; the rank column is never used (`rag_cli.store.runs`).
A (query, chunk) pair that occurs more than once counts once (its best score)
and is reported under `"duplicates"`.

A run of chunks is scored at document level by **MaxP**: a document's score
is the highest score of its chunks (Dai & Callan, "Deeper text understanding
for IR with contextual neural language modeling", SIGIR 2019), and documents
are ranked by it exactly as trec_eval ranks a document run (ties by doc id,
descending). Equal scores are counted under `"ties"`.

When the qrels judge chunk ids instead of document ids (DESIGN.md: "relevance
is at document level unless the ids are chunk ids"), `run_for_qrels` scores
the chunks themselves, with their own scores.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

from rag_cli.evaluate.metrics import METRICS, RELEVANCE_LEVEL, WHOLE_RUN_METRICS, Qrels, Run
from rag_cli.store.runs import as_rows, dedupe

DEFAULT_KS = (1, 5, 10, 20, 100)
DEFAULT_METRICS = ("recall", "hit", "mrr", "ndcg", "precision", "map")
DEFAULT_WHOLE_RUN_METRICS = ("map", "rprec")


def parse_cutoffs(text: str) -> list[int]:
    """The cutoffs of `--ks` ("1,5,10": comma-separated integers >= 1), sorted,
    each once. Raises BadInput naming --ks for an empty item ("1,,5"), a
    non-integer or a cutoff below 1."""
    from rag_cli.errors import BadInput

    example = ",".join(map(str, DEFAULT_KS))
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise BadInput(f"--ks {text!r}: an empty item; give comma-separated integers >= 1 without empty items, "
                       f"e.g. 1,5,10 (default {example})")
    try:
        cutoffs = sorted({int(x) for x in items})
    except ValueError:
        raise BadInput(f"--ks {text!r}: expected comma-separated integers such as {example}") from None
    if min(cutoffs) < 1:
        raise BadInput(f"--ks {text!r}: cutoffs must be integers >= 1, e.g. 1,5,10")
    return cutoffs


def _max_scores(rows: Iterable[Any], key: str) -> dict[str, dict[str, float]]:
    best: dict[str, dict[str, float]] = {}
    for r in as_rows(rows):
        ident = r.doc_id if key == "doc" else r.chunk_id
        per_q = best.setdefault(r.query_id, {})
        score = float(r.score)
        if ident not in per_q or score > per_q[ident]:
            per_q[ident] = score
    return best


def doc_level_run(rows: Iterable[Any]) -> dict[str, dict[str, float]]:
    """MaxP: `{query_id: {doc_id: highest score of its chunks}}` from run rows.

    `rows` are `RunRow`s, 7-tuples, dicts or a `pyarrow.Table` (see
    `rag_cli.store.runs`). The rank column is not used.
    """
    return _max_scores(rows, "doc")


def chunk_level_run(rows: Iterable[Any]) -> dict[str, dict[str, float]]:
    """`{query_id: {chunk_id: score}}` from run rows (for chunk-level qrels); a
    repeated chunk keeps its highest score."""
    return _max_scores(rows, "chunk")


def tie_counts(run: Run) -> dict[str, int]:
    """How much of `run` (`{qid: {id: score}}`) is ordered by the id tie-break:
    `n_queries` with two or more ids of equal score, `n_ids` that share their
    score with another id of the same query, `n_groups` of such equal scores."""
    n_queries = n_ids = n_groups = 0
    for docs in run.values():
        sizes = [c for c in Counter(docs.values()).values() if c > 1]
        if sizes:
            n_queries += 1
            n_ids += sum(sizes)
            n_groups += len(sizes)
    return {"n_queries": n_queries, "n_ids": n_ids, "n_groups": n_groups}


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
    whole_run_metrics: Sequence[str] = DEFAULT_WHOLE_RUN_METRICS,
) -> dict:
    """Evaluate `run` (`{qid: {doc_id: score}}`) against `qrels`; a JSON-ready dict.

    Returns::

        {
          "metrics": {"recall@10": mean, ..., "map": mean, "rprec": mean},  # over n_queries
          "per_query": {qid: {"recall@10": value, ...}},
          "n_queries": ...,                  # queries in the qrels: all are scored
          "n_queries_in_run": ...,           # of those, how many the run answers
          "n_queries_missing_from_run": ..., # scored 0; ids in "queries_missing_from_run"
          "n_queries_without_relevant": ..., # no judgement >= 1: scored 0; ids in "queries_without_relevant"
          "n_run_queries_not_in_qrels": ..., # ignored as trec_eval ignores them; ids in "run_queries_not_in_qrels"
          "run_depth": ...,                  # most documents the run holds for one scored query (0: none)
          "ties": {"n_queries", "n_ids", "n_groups"},  # see `tie_counts`
          "ks": [...], "metric_names": [...],
          "definitions": "...",
        }

    `metrics` are cutoff metrics of `rag_cli.evaluate.metrics.METRICS`
    ("recall", "hit", "mrr", "ndcg", "precision", "map"), each at every k in
    `ks`; `whole_run_metrics` are those of `WHOLE_RUN_METRICS` ("map", "rprec").
    Raises ValueError for an unknown metric.
    """
    unknown = [m for m in metrics if m not in METRICS] + [m for m in whole_run_metrics if m not in WHOLE_RUN_METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)} at k, {sorted(WHOLE_RUN_METRICS)}")
    ks = sorted({int(k) for k in ks})
    names = [f"{m}@{k}" for m in metrics for k in ks] + list(whole_run_metrics)
    per_query: dict[str, dict[str, float]] = {qid: {} for qid in qrels}
    for m in metrics:
        for k in ks:
            for qid, value in METRICS[m](run, qrels, k).items():
                per_query[qid][f"{m}@{k}"] = value
    for m in whole_run_metrics:
        for qid, value in WHOLE_RUN_METRICS[m](run, qrels).items():
            per_query[qid][m] = value
    n = len(qrels)
    means = {name: (sum(v[name] for v in per_query.values()) / n if n else 0.0) for name in names}
    missing = [qid for qid in qrels if not run.get(qid)]
    without_relevant = [qid for qid, docs in qrels.items() if not any(rel >= RELEVANCE_LEVEL for rel in docs.values())]
    not_in_qrels = [qid for qid in run if qid not in qrels]
    return {
        "metrics": means,
        "per_query": per_query,
        "n_queries": n,
        "n_queries_in_run": n - len(missing),
        "n_queries_missing_from_run": len(missing),
        "n_queries_without_relevant": len(without_relevant),
        "n_run_queries_not_in_qrels": len(not_in_qrels),
        "run_depth": max((len(run[qid]) for qid in qrels if run.get(qid)), default=0),
        "queries_missing_from_run": missing,
        "queries_without_relevant": without_relevant,
        "run_queries_not_in_qrels": not_in_qrels,
        "ties": tie_counts({qid: docs for qid, docs in run.items() if qid in qrels}),
        "ks": ks,
        "metric_names": names,
        "definitions": (
            "trec_eval definitions (recall.k, success.k, recip_rank on the top k, ndcg_cut.k, P.k, map_cut.k, "
            f"map, Rprec); relevant = relevance >= {RELEVANCE_LEVEL}; nDCG gain = relevance, discount "
            "log2(rank+1); order: score desc, then id desc (the rank column is not used); every query in the "
            "qrels is scored (0 if missing from the run); run queries not in the qrels are ignored"
        ),
    }


def evaluate_rows(
    rows: Iterable[Any],
    qrels: Qrels,
    ks: Sequence[int] = DEFAULT_KS,
    metrics: Sequence[str] = DEFAULT_METRICS,
    level: str = "auto",
    whole_run_metrics: Sequence[str] = DEFAULT_WHOLE_RUN_METRICS,
) -> dict:
    """`evaluate_run` on run rows: MaxP document level (or chunk level when the
    qrels judge chunk ids). Repeated (query, chunk) rows count once (their
    best score); the report adds `"level"`, `"aggregation"`,
    `"duplicates"` (`{"n": rows dropped, "examples": [[qid, chunk_id], ...]}`)
    and `"qrels_duplicates"` (`qrels_repeated`)."""
    rows, dups = dedupe(rows)
    run, level = run_for_qrels(rows, qrels, level)
    report = evaluate_run(run, qrels, ks, metrics, whole_run_metrics)
    report["level"] = level
    report["aggregation"] = ("MaxP: a document scores its best chunk's score" if level == "doc"
                             else "none (chunk ids judged)")
    report["duplicates"] = {"n": dups.n, "examples": dups.examples}
    report["qrels_duplicates"] = qrels_repeated(qrels)
    return report


def qrels_repeated(qrels: Qrels) -> dict:
    """The qrels rows that judged a pair again alike (`datasets.Qrels.repeated`;
    none for a plain dict): `{"n", "examples": [[qid, doc_id, first line, line]]}`."""
    return getattr(qrels, "repeated", None) or {"n": 0, "examples": []}
