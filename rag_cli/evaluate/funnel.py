"""The funnel: for each query, the layer of the pipeline where its gold
(relevant) documents first go missing, and ANN recall (HNSW against exact
search on the same vectors).

Layers, in pipeline order, each asking "is at least one relevant document
(or judged chunk) still there?":

* `sparse`: among BM25's top `candidates` chunks;
* `dense`: among HNSW's top `candidates` chunks;
* `fusion`: among the top `k` chunks of hybrid search (RRF of the two lists);
* `rerank`: among the top `k` after the cross-encoder rescored the top
  `candidates` of hybrid search (None when no reranker is given);
* `evidence`: among the evidence `rag ask` gives the generator (its top
  `ask.k` with a cosine >= the question's threshold, `ask.min_score` or
  `ask.min_score_en` (`rag_cli.generate.gate.min_score_for`), none when the
  gate refuses;
  None when no answerer is given);
* `cited`: among the chunks the answer cites (None without an answerer).

`first_missing` is the first of "retrieval" (in neither candidate list),
"fusion", "rerank", "evidence", "citation" where no gold is left, or None
when the gold reaches the citations (or the last layer measured). Queries
without a relevant document are left out.

ANN recall@k: |ANN top k ∩ exact top k| / k per query, averaged, where ANN
is the index's dense backend (hnswlib, faiss) and the ground truth is the
`exact` backend (`rag_cli.index.exact.ExactIndex`: brute-force cosine) over
the vectors stored in the same index. An index built with the exact backend
scores 1.0.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from rag_cli.evaluate.metrics import RELEVANCE_LEVEL, Qrels
from rag_cli.index.backends import describe
from rag_cli.index.searcher import Searcher, prepare_query
from rag_cli.progress import Progress

LAYERS = ("sparse", "dense", "fusion", "rerank", "evidence", "cited")
STOPS = ("retrieval", "fusion", "rerank", "evidence", "citation")

# (query text, hybrid hits) -> reranked hits, best first
Reranker = Callable[[str, list], list]
# query text -> (chunk ids given to the generator, chunk ids cited)
Answerer = Callable[[str], tuple[list[str], list[str]]]


def _has_gold(ids: Sequence[tuple[str, str]], gold: set[str]) -> bool:
    return any(chunk in gold or doc in gold for chunk, doc in ids)


def first_missing(row: dict) -> str | None:
    """The first layer of `row` (booleans per layer, None = not measured)
    where the gold is gone; see the module docstring."""
    if not (row["sparse"] or row["dense"]):
        return "retrieval"
    for layer, stop in (("fusion", "fusion"), ("rerank", "rerank"), ("evidence", "evidence"), ("cited", "citation")):
        if row[layer] is False:
            return stop
    return None


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int, block: int = 65536) -> np.ndarray:
    """(q, min(k, n)) int64 rows of the `k` highest cosines of each query over
    `vectors` ((n, d) float32), best first; brute force in blocks of rows."""
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    n = len(vectors)
    k = min(k, n)
    best_rows = np.zeros((len(q), 0), np.int64)
    best_sims = np.zeros((len(q), 0), np.float32)
    for start in range(0, n, block):
        v = vectors[start:start + block]
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        sims = np.concatenate([best_sims, (q @ v.T).astype(np.float32)], axis=1)
        rows = np.concatenate([best_rows, np.broadcast_to(np.arange(start, start + len(v)), (len(q), len(v)))], axis=1)
        keep = np.argpartition(-sims, k - 1, axis=1)[:, :k] if sims.shape[1] > k else np.argsort(-sims, axis=1)
        best_sims = np.take_along_axis(sims, keep, axis=1)
        best_rows = np.take_along_axis(rows, keep, axis=1)
    order = np.argsort(-best_sims, axis=1, kind="stable")
    return np.take_along_axis(best_rows, order, axis=1)


def ground_truth(searcher: Searcher):
    """The `exact` backend over the vectors stored in the searcher's dense index (the index itself
    when it is exact): what ANN recall is measured against."""
    from rag_cli.index.exact import exact_of

    return exact_of(searcher.dense)


def ann_recall(searcher: Searcher, query_vectors: np.ndarray, ks: Sequence[int]) -> dict[str, float | None]:
    """`{"ann_recall@k": mean}` of the index's dense search against the exact
    backend on the vectors stored in the same index (`ground_truth`), for each
    k in `ks`; None (not measured, never 0.0) without query vectors or chunks."""
    n = searcher.chunks.num_rows
    if n == 0 or len(query_vectors) == 0:
        return {f"ann_recall@{k}": None for k in ks}
    deepest = max(ks)
    exact = ground_truth(searcher).search(query_vectors, deepest)
    approx = searcher.dense.search(query_vectors, deepest)
    out = {}
    for k in ks:
        kk = min(k, n)
        rec = [len(set(exact[i][0][:kk].tolist()) & set(rows[:kk].tolist())) / kk
               for i, (rows, _) in enumerate(approx)]
        out[f"ann_recall@{k}"] = float(np.mean(rec))
    return out


def funnel(searcher: Searcher, queries: list[tuple[str, str]], qrels: Qrels, *, k: int, candidates: int,
           rrf_k: int, fusion: str = "rrf", dense_weight: float = 0.5, reranker: Reranker | None = None,
           answerer: Answerer | None = None,
           ann_ks: Sequence[int] = (10, 100), batch: int = 64, progress: Progress | None = None) -> dict:
    """The funnel of `queries` ((query_id, text)) against `qrels`; a JSON-ready dict::

        {"n_queries": n, "counts": {"not_in_sparse": .., "not_in_dense": ..,
                                    "first_missing": {"retrieval": .., "fusion": .., ..., "none": ..}},
         "layers_measured": [...], "per_query": [{"query_id", "n_relevant", LAYER: bool | None, ...,
                                                   "first_missing": str | None}],
         "ann": {"ann_recall@10": ..., ...}, "params": {...}, "definitions": "..."}

    Needs a dense and a sparse index (hybrid). Progress: ("funnel", done, total).
    """
    gold_of = {q: {d for d, rel in docs.items() if rel >= RELEVANCE_LEVEL} for q, docs in qrels.items()}
    todo = [(qid, text) for qid, text in queries if gold_of.get(qid)]
    rows: list[dict] = []
    all_vectors = []
    for start in range(0, len(todo), batch):
        part = todo[start:start + batch]
        texts = [prepare_query(t) for _, t in part]
        qv = searcher.encode_queries(texts)
        all_vectors.append(qv)
        dense = searcher.dense.search(qv, candidates)
        fused = searcher.batch_search(texts, mode="hybrid", k=max(k, candidates), candidates=candidates, rrf_k=rrf_k,
                                query_vectors=qv, fusion=fusion, dense_weight=dense_weight)
        for i, (qid, _) in enumerate(part):
            gold = gold_of[qid]
            srows, _ = searcher.sparse.search(texts[i], candidates)
            ids = lambda rs: [(searcher._chunk_ids[r], searcher._doc_ids[r]) for r in rs]  # noqa: E731
            row = {"query_id": qid, "n_relevant": len(gold),
                   "sparse": _has_gold(ids(srows), gold), "dense": _has_gold(ids(dense[i][0]), gold),
                   "fusion": _has_gold([(h.chunk_id, h.doc_id) for h in fused[i][:k]], gold),
                   "rerank": None, "evidence": None, "cited": None}
            if reranker is not None:
                top = reranker(texts[i], fused[i][:candidates])[:k]
                row["rerank"] = _has_gold([(h.chunk_id, h.doc_id) for h in top], gold)
            if answerer is not None:
                given, cited = answerer(texts[i])
                row["evidence"] = _has_gold([(c, searcher_doc(searcher, c)) for c in given], gold)
                row["cited"] = _has_gold([(c, searcher_doc(searcher, c)) for c in cited], gold)
            row["first_missing"] = first_missing(row)
            rows.append(row)
        if progress is not None:
            progress("funnel", start + len(part), len(todo))
    stops = {s: sum(1 for r in rows if r["first_missing"] == s) for s in STOPS}
    stops["none"] = sum(1 for r in rows if r["first_missing"] is None)
    vectors = np.concatenate(all_vectors) if all_vectors else np.zeros((0, 1), np.float32)
    measured = [layer for layer in LAYERS if any(r[layer] is not None for r in rows)]
    return {
        "n_queries": len(rows),
        "n_queries_without_relevant": len(queries) - len(todo),
        "counts": {"not_in_sparse": sum(1 for r in rows if not r["sparse"]),
                   "not_in_dense": sum(1 for r in rows if not r["dense"]),
                   "first_missing": stops},
        "layers_measured": measured,
        "per_query": rows,
        "ann": ann_recall(searcher, vectors, ann_ks),
        "ann_backend": describe(searcher.dense.params),
        "ann_ground_truth": "exact",
        "params": {"k": k, "candidates": candidates, "rrf_k": rrf_k, "fusion": fusion,
                   "dense_weight": dense_weight},
        "definitions": __doc__.split("\n\n", 1)[1].strip(),
    }


def searcher_doc(searcher: Searcher, chunk_id: str) -> str:
    """The doc id of an indexed chunk id ("" when the index lacks it)."""
    row = searcher.row_of(chunk_id)
    return searcher._doc_ids[row] if row is not None else ""
