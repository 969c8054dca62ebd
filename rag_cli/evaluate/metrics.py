"""Retrieval metrics, each defined once, as trec_eval defines them.

Inputs everywhere:

* `run`: `{query_id: {doc_id: score}}`, higher score = better;
* `qrels`: `{query_id: {doc_id: relevance}}`, integer (graded) relevance.

Each metric returns `{query_id: value}` for **every query in the qrels**, and
only those:

* a query in the qrels with no entry in the run scores 0 (trec_eval `-c`);
* a query in the qrels with no relevant document scores 0 on every metric
  (as trec_eval scores it);
* a query in the run but not in the qrels is ignored (trec_eval ignores it).

Ranking (identical to trec_eval, and so to pytrec_eval): documents are
sorted by score descending, ties broken by doc id **descending** (trec_eval
compares docnos with `strcmp`; Python's string order is the same order,
since UTF-8 byte order is code point order). The run's own rank column is not
used: callers that need a fixed order (e.g. MaxP in `report.py`) encode it in
the score.

A document is relevant when its relevance is >= 1 (trec_eval's default
`-l 1`). nDCG uses the relevance value itself as the gain; judgements <= 0
add no gain.

Reference: trec_eval 9.0.x (https://github.com/usnistgov/trec_eval),
measures `recall.k`, `success.k`, `recip_rank`, `ndcg_cut.k`, `P.k`,
`map_cut.k`, `map`, `Rprec` (files src/m_*.c).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

RELEVANCE_LEVEL = 1


def ranked(doc_scores: Mapping[str, float], k: int | None = None) -> list[str]:
    """Doc ids in trec_eval order (score desc, then doc id desc), cut to `k`."""
    order = sorted(doc_scores.items(), key=lambda item: (item[1], item[0]), reverse=True)
    if k is not None:
        order = order[:k]
    return [doc for doc, _ in order]


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def _per_query(run: Run, qrels: Qrels, k: int, fn: Callable[[list[str], Mapping[str, int]], float]) -> dict[str, float]:
    _check_k(k)
    out = {}
    for qid, judged in qrels.items():
        top = ranked(run.get(qid, {}), k)
        out[qid] = fn(top, judged)
    return out


def _n_relevant(judged: Mapping[str, int]) -> int:
    return sum(1 for rel in judged.values() if rel >= RELEVANCE_LEVEL)


def recall_at_k(run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """Recall@k: relevant documents in the top k / all relevant documents.

    trec_eval `recall.k`. 0 for a query without relevant documents.
    """

    def fn(top, judged):
        n_rel = _n_relevant(judged)
        if n_rel == 0:
            return 0.0
        return sum(1 for d in top if judged.get(d, 0) >= RELEVANCE_LEVEL) / n_rel

    return _per_query(run, qrels, k, fn)


def precision_at_k(run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """Precision@k: relevant documents in the top k / k.

    trec_eval `P.k`: the denominator is k even when fewer were retrieved.
    """

    def fn(top, judged):
        return sum(1 for d in top if judged.get(d, 0) >= RELEVANCE_LEVEL) / k

    return _per_query(run, qrels, k, fn)


def hit_at_k(run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """Hit@k (success@k): 1 if any relevant document is in the top k, else 0.

    trec_eval `success.k`.
    """

    def fn(top, judged):
        return 1.0 if any(judged.get(d, 0) >= RELEVANCE_LEVEL for d in top) else 0.0

    return _per_query(run, qrels, k, fn)


def mrr_at_k(run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """MRR@k: 1 / rank of the first relevant document within the top k, else 0.

    trec_eval `recip_rank` on the run cut to its top k (Voorhees, TREC-8 QA
    track, 1999). The mean over queries is the mean reciprocal rank.
    """

    def fn(top, judged):
        for i, d in enumerate(top, 1):
            if judged.get(d, 0) >= RELEVANCE_LEVEL:
                return 1.0 / i
        return 0.0

    return _per_query(run, qrels, k, fn)


def _dcg(gains: list[float]) -> float:
    return sum(g / math.log2(i + 1) for i, g in enumerate(gains, 1) if g > 0)


def ndcg_at_k(run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """nDCG@k: DCG of the top k / DCG of the ideal top k.

    Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR techniques",
    ACM TOIS 20(4), 2002, in trec_eval's form (`ndcg_cut.k`): the gain of the
    document at rank r is its relevance (0 if unjudged or <= 0), discounted by
    log2(r + 1); the ideal ranking sorts the query's positive judgements by
    relevance, descending, and is cut to k too. 0 without relevant documents.
    """

    def fn(top, judged):
        ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:k]
        idcg = _dcg([float(g) for g in ideal])
        if idcg == 0:
            return 0.0
        return _dcg([float(max(judged.get(d, 0), 0)) for d in top]) / idcg

    return _per_query(run, qrels, k, fn)


def _average_precision(top: list[str], judged: Mapping[str, int]) -> float:
    n_rel = _n_relevant(judged)
    if n_rel == 0:
        return 0.0
    hits, total = 0, 0.0
    for i, d in enumerate(top, 1):
        if judged.get(d, 0) >= RELEVANCE_LEVEL:
            hits += 1
            total += hits / i
    return total / n_rel


def map_at_k(run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """AP@k: the sum of Precision@r over the ranks r <= k that hold a relevant
    document, divided by the number of relevant documents (all of them, not
    only those in the top k).

    trec_eval `map_cut.k` (m_map_cut.c). The mean over queries is MAP@k.
    """
    return _per_query(run, qrels, k, _average_precision)


def average_precision(run: Run, qrels: Qrels) -> dict[str, float]:
    """AP over the whole run: as `map_at_k` without a cutoff.

    trec_eval `map` (m_map.c; Buckley & Voorhees, "Retrieval system
    evaluation", in TREC: Experiment and Evaluation in IR, 2005). The mean over
    queries is MAP.
    """
    return {qid: _average_precision(ranked(run.get(qid, {})), judged) for qid, judged in qrels.items()}


def r_precision(run: Run, qrels: Qrels) -> dict[str, float]:
    """R-precision: relevant documents in the top R / R, where R is the number
    of relevant documents of the query (the denominator stays R when fewer
    than R were retrieved). 0 without relevant documents.

    trec_eval `Rprec` (m_Rprec.c).
    """
    out = {}
    for qid, judged in qrels.items():
        n_rel = _n_relevant(judged)
        top = ranked(run.get(qid, {}), n_rel) if n_rel else []
        out[qid] = sum(1 for d in top if judged.get(d, 0) >= RELEVANCE_LEVEL) / n_rel if n_rel else 0.0
    return out


METRICS: dict[str, Callable[[Run, Qrels, int], dict[str, float]]] = {
    "recall": recall_at_k,
    "hit": hit_at_k,
    "mrr": mrr_at_k,
    "ndcg": ndcg_at_k,
    "precision": precision_at_k,
    "map": map_at_k,
}
"""Metric name -> function; the report names a value `NAME@k`."""

WHOLE_RUN_METRICS: dict[str, Callable[[Run, Qrels], dict[str, float]]] = {
    "map": average_precision,
    "rprec": r_precision,
}
"""Metrics without a cutoff (over the whole run); the report names them `NAME`."""
