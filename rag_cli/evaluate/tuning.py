"""Tuning hybrid fusion on a train split, scored separately on a test split.

The dense and the sparse candidate lists (top `candidates` chunks each) of
every query are computed once; each setting of the grid fuses them
(`rag_cli.index.fusion.fuse`), the fused chunks become a document run by
their best chunk (MaxP), and the setting is scored by the mean of `metric`
(default nDCG@10, trec_eval's ndcg_cut) over the train qrels. The winner is
the best train score (ties: the earlier setting of the grid, RRF first).
The test split, when given, is never looked at while choosing: the winner
and the RRF default (k = 60) are scored on it and compared query by query
(`rag_cli.evaluate.compare.compare_reports`: paired randomisation and
t-test).

Grid: RRF with k in RRF_KS; min-max and z-score weighted sums with the
dense weight in WEIGHTS (Bruch, Gai & Ingber, "An Analysis of Fusion
Functions for Hybrid Retrieval", ACM TOIS 2023, tune the same convex
combination).
"""

from __future__ import annotations

from collections.abc import Sequence

from rag_cli.evaluate.report import evaluate_run
from rag_cli.index.fusion import fuse
from rag_cli.index.searcher import Searcher, prepare_query
from rag_cli.progress import Progress

RRF_KS = (5, 10, 20, 40, 60, 100)
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
DEFAULT_SETTING = {"fusion": "rrf", "rrf_k": 60}


def fusion_grid() -> list[dict]:
    """The settings tried: [{"fusion": "rrf", "rrf_k": k}, ..., {"fusion": "minmax", "dense_weight": w}, ...]."""
    return ([{"fusion": "rrf", "rrf_k": k} for k in RRF_KS]
            + [{"fusion": m, "dense_weight": w} for m in ("minmax", "zscore") for w in WEIGHTS])


def candidate_lists(searcher: Searcher, queries: Sequence[tuple[str, str]], candidates: int, *, batch: int = 64,
                    progress: Progress | None = None, task: str = "candidates") -> list[tuple]:
    """Per query ((query_id, text)), its (dense (rows, cosines), sparse (rows,
    BM25 scores)) top-`candidates` lists. Progress: (task, done, total)."""
    out: list[tuple] = []
    for start in range(0, len(queries), batch):
        texts = [prepare_query(t) for _, t in queries[start:start + batch]]
        dense = searcher.dense.search(searcher.encode_queries(texts), candidates)
        for text, d in zip(texts, dense):
            out.append((d, searcher.sparse.search(text, candidates)))
        if progress is not None:
            progress(task, len(out), len(queries))
    return out


def fused_run(searcher: Searcher, queries: Sequence[tuple[str, str]], lists: Sequence[tuple],
              setting: dict) -> dict[str, dict[str, float]]:
    """The MaxP document run {query_id: {doc_id: best fused chunk score}} of one fusion setting."""
    doc_ids = searcher._doc_ids
    run: dict[str, dict[str, float]] = {}
    for (qid, _), (dense, sparse) in zip(queries, lists):
        docs: dict[str, float] = {}
        for row, score in fuse(dense, sparse, fusion=setting["fusion"], rrf_k=setting.get("rrf_k", 60),
                               dense_weight=setting.get("dense_weight", 0.5)):
            d = doc_ids[row]
            if d not in docs or score > docs[d]:
                docs[d] = score
        run[qid] = docs
    return run


def tune_fusion(searcher: Searcher, train: tuple[list, dict], test: tuple[list, dict] | None = None, *,
                candidates: int = 100, metric: str = "ndcg", k: int = 10, permutations: int = 10000,
                progress: Progress | None = None) -> dict:
    """Grid-search the fusion on `train` ((queries, qrels)); score the winner
    and the RRF default on `test` when given. Returns a JSON-ready dict::

        {"tuned_on": "train", "metric": "ndcg@10", "best": {setting}, "grid": [{**setting, "train": score}],
         "train": {"best": score, "default": score, "n_queries": n},
         "test": {"best": {metrics}, "default": {metrics}, "n_queries": n, "comparison": {...}} | None}
    """
    from rag_cli.evaluate.compare import compare_reports

    name = f"{metric}@{k}"
    queries, qrels = train
    queries = [(q, t) for q, t in queries if q in qrels]
    lists = candidate_lists(searcher, queries, candidates, progress=progress, task="train candidates")
    grid = []
    for i, setting in enumerate(fusion_grid()):
        report = evaluate_run(fused_run(searcher, queries, lists, setting), qrels, [k], [metric], [])
        grid.append({**setting, "train": report["metrics"][name]})
        if progress is not None:
            progress("grid", i + 1, len(fusion_grid()))
    best = max(grid, key=lambda g: g["train"])  # max keeps the first of equal scores
    default = next(g for g in grid if g["fusion"] == "rrf" and g["rrf_k"] == DEFAULT_SETTING["rrf_k"])
    setting = {key: v for key, v in best.items() if key != "train"}
    out = {"tuned_on": "train", "metric": name, "candidates": candidates, "best": setting, "grid": grid,
           "train": {"best": best["train"], "default": default["train"], "n_queries": len(queries)}, "test": None}
    if test is not None:
        tq, tqrels = test
        tq = [(q, t) for q, t in tq if q in tqrels]
        tlists = candidate_lists(searcher, tq, candidates, progress=progress, task="test candidates")
        ks = sorted({1, 5, k, 20})
        reports = [evaluate_run(fused_run(searcher, tq, tlists, s), tqrels, ks, ["ndcg", "recall", "mrr"], ["map"])
                   for s in (DEFAULT_SETTING, setting)]
        comparison = compare_reports(reports, ["rrf-60", "tuned"], permutations=permutations)
        out["test"] = {"n_queries": len(tq), "default": reports[0]["metrics"], "best": reports[1]["metrics"],
                       "comparison": comparison["comparisons"][0]}
    return out
