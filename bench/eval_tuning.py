"""Fusion tuning and upper-case robustness on a SciFact subset.

The subset: every document relevant to a train or a test query, plus random
others (seed 0) up to --docs; built with `rag build --format beir` (default
model, chunk defaults) into --project first:

    python bench/eval_tuning.py --make-corpus /tmp/sf/corpus.jsonl --docs 1200
    rag build /tmp/sf/corpus.jsonl --format beir -p /tmp/sf/proj
    python bench/eval_tuning.py --project /tmp/sf/proj --out bench/results/eval-tuning-scifact-subset.json

Measures: `rag eval --perturb` on the 300 test queries with the default
pipeline (hybrid RRF) with and without the all-capitals fold of the query
path; `rag eval --tune fusion` on the 809 train queries, scored on test; the
upper-case loss again with the tuned fusion.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import time
from pathlib import Path

from _common import commit, machine

DATA = Path(os.environ.get("RAG_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "scifact"


def make_corpus(dest: Path, n_docs: int) -> None:
    wanted = set()
    for split in ("train", "test"):
        for line in (DATA / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]:
            wanted.add(line.split("\t")[1])
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    others = [d for d in docs if d["_id"] not in wanted]
    random.Random(0).shuffle(others)
    keep = wanted | {d["_id"] for d in others[:max(0, n_docs - len(wanted))]}
    dest.write_text("".join(json.dumps(d) + "\n" for d in docs if d["_id"] in keep), encoding="utf-8")


DEPTHS = (100, 200, 500, 1000)


def depth_grid(p) -> dict:
    """The tuner's grid (`fusion_grid`) at every candidate depth of DEPTHS,
    each setting scored on train and on test (nDCG@10): the candidate lists
    are computed once at the largest depth and cut. Says which setting train
    picks, what it scores on test, and the range of test scores of the
    settings within 0.002 of the best train score (the noise of the choice)."""
    from rag_cli.evaluate.datasets import read_qrels, read_queries
    from rag_cli.evaluate.report import evaluate_run
    from rag_cli.evaluate.tuning import candidate_lists, fused_run, fusion_grid

    s = p._searcher(p.config, with_embedder=True)
    splits = {}
    for split, qfile in (("train", "queries-train.jsonl"), ("test", "queries.jsonl")):
        qrels = read_qrels(DATA / "qrels" / f"{split}.tsv")
        queries = [(q, t) for q, t in read_queries(DATA / qfile) if q in qrels]
        splits[split] = (queries, qrels, candidate_lists(s, queries, max(DEPTHS)))
    grid = []
    for depth in DEPTHS:
        for setting in fusion_grid():
            row = {"candidates": depth, **setting}
            for split, (queries, qrels, lists) in splits.items():
                cut = [((d[0][:depth], d[1][:depth]), (sp[0][:depth], sp[1][:depth])) for d, sp in lists]
                run = fused_run(s, queries, cut, setting)
                row[split] = evaluate_run(run, qrels, [10], ["ndcg"], [])["metrics"]["ndcg@10"]
            grid.append(row)
            print(json.dumps(row), flush=True)
    best = max(grid, key=lambda g: g["train"])
    near = [g["test"] for g in grid if g["train"] >= best["train"] - 0.002]
    per_depth = {}
    for depth in DEPTHS:
        b = max((g for g in grid if g["candidates"] == depth), key=lambda g: g["train"])
        per_depth[str(depth)] = {k: b[k] for k in b}
    return {"metric": "ndcg@10", "depths": list(DEPTHS), "best_by_train": best, "best_by_train_per_depth": per_depth,
            "near_best": {"n": len(near), "test_min": min(near), "test_max": max(near)},
            "best_test_in_grid": max(g["test"] for g in grid), "grid": grid}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-corpus", type=Path)
    ap.add_argument("--docs", type=int, default=1200)
    ap.add_argument("--project", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--depth-grid", action="store_true",
                    help="only add a grid over the candidate depth too (train and test scores of every setting) to --out")
    ap.add_argument("--dense-case", action="store_true",
                    help="only add the upper-case loss of dense-only retrieval, with and without the fold, to --out")
    args = ap.parse_args()
    if args.make_corpus:
        make_corpus(args.make_corpus, args.docs)
        return
    import rag_cli.index.searcher as searcher_mod
    from rag_cli import Project

    p = Project.open(args.project)
    test_q, test_qrels = DATA / "queries.jsonl", DATA / "qrels" / "test.tsv"
    if args.depth_grid:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        result["depth_grid"] = {**depth_grid(p), "machine": machine(), "commit": commit()}
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({k: v for k, v in result["depth_grid"].items() if k != "grid"}, indent=2))
        return
    if args.dense_case:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        fold = searcher_mod.fold_shouting
        dense = {}
        for label, fn in (("with_fold", fold), ("without_fold", lambda q: q)):
            searcher_mod.fold_shouting = fn
            try:
                rep, _ = p.perturb(test_qrels, test_q, ["upper"], mode="dense", ks=[10], permutations=2000,
                                   name=f"perturb-dense-{label}")
            finally:
                searcher_mod.fold_shouting = fold
            dense[label] = {"original": rep["original"]["ndcg@10"],
                            "upper": rep["perturbations"]["upper"]["metrics"]["ndcg@10"],
                            "loss": rep["perturbations"]["upper"]["loss"]["ndcg@10"],
                            "p_randomisation": rep["perturbations"]["upper"]["comparison"]["ndcg@10"]["p_randomisation"]}
        result["perturb_dense_ndcg@10"] = dense
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(dense, indent=2))
        return
    import pyarrow.parquet as pq

    result: dict = {"project": str(args.project), "n_docs": pq.read_metadata(p.docs_path).num_rows,
                    "n_chunks": pq.read_metadata(p.chunks_path).num_rows}
    t0 = time.time()
    perturb, _ = p.perturb(test_qrels, test_q, ["upper", "lower", "typo", "punct"], ks=[10], permutations=2000)
    result["perturb_rrf_with_fold"] = {"original": perturb["original"],
                                      **{k: {"metrics": v["metrics"], "loss": v["loss"], "n_changed": v["n_changed"],
                                             "p_randomisation": v["comparison"]["ndcg@10"]["p_randomisation"]}
                                         for k, v in perturb["perturbations"].items()}}
    fold = searcher_mod.fold_shouting
    searcher_mod.fold_shouting = lambda q: q
    try:
        before, _ = p.perturb(test_qrels, test_q, ["upper"], ks=[10], permutations=2000, name="perturb-nofold")
    finally:
        searcher_mod.fold_shouting = fold
    result["perturb_rrf_without_fold"] = {"upper": {"metrics": before["perturbations"]["upper"]["metrics"],
                                                    "loss": before["perturbations"]["upper"]["loss"]}}
    tune, _ = p.tune_fusion(DATA / "queries-train.jsonl", DATA / "qrels" / "train.tsv", test_queries=test_q,
                            test_qrels=test_qrels, permutations=10000)
    result["tune"] = {k: tune[k] for k in ("best", "train", "grid", "candidates")}
    result["tune"]["test"] = {"n_queries": tune["test"]["n_queries"], "default": tune["test"]["default"],
                              "best": tune["test"]["best"],
                              "ndcg@10": tune["test"]["comparison"]["metrics"]["ndcg@10"]}
    tuned, _ = p.perturb(test_qrels, test_q, ["upper"], ks=[10], permutations=2000, name="perturb-tuned")
    searcher_mod.fold_shouting = lambda q: q
    try:
        tuned_nofold, _ = p.perturb(test_qrels, test_q, ["upper"], ks=[10], permutations=2000,
                                    name="perturb-tuned-nofold")
    finally:
        searcher_mod.fold_shouting = fold
    result["perturb_tuned"] = {"original": tuned["original"],
                               "upper_with_fold": tuned["perturbations"]["upper"]["loss"],
                               "upper_without_fold": tuned_nofold["perturbations"]["upper"]["loss"]}
    result["seconds"] = round(time.time() - t0, 1)
    result["machine"] = machine()
    result["commit"] = commit(short=True)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
