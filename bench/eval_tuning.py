"""Fusion tuning and upper-case robustness on a SciFact subset.

The subset: every document relevant to a train or a test query, plus random
others (seed 0) up to --docs; built with `rag build --format beir` (default
model, chunk defaults) into --project first:

    python bench/eval_tuning.py --make-corpus /tmp/sf/corpus.jsonl --docs 1200
    rag build /tmp/sf/corpus.jsonl --format beir -p /tmp/sf/proj
    python bench/eval_tuning.py --project /tmp/sf/proj --out bench/results/eval-tuning-scifact-subset.json

Measures: `rag eval perturb` on the 300 test queries with the default
pipeline (hybrid RRF) with and without the all-capitals fold of the query
path; `rag eval tune fusion` on the 809 train queries, scored on test; the
upper-case loss again with the tuned fusion.

`--chunk-grid P1 P2 ...` compares projects of the same corpus built with
other chunk sizes (`rag build ... --size 500 --overlap 50`): the fusion
tuned on train in each, every grid setting scored on train and test, and
the project whose tuned fusion scores best on train is the one chosen (its
test score is what is reported). `--bm25-grid` tries BM25 k1 x b on train
(sparse alone, then the fusion tuned on top of train's pick), without
changing the project's index.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
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


def _splits() -> dict:
    from rag_cli.evaluate.datasets import read_qrels, read_queries

    out = {}
    for split, qfile in (("train", "queries-train.jsonl"), ("test", "queries.jsonl")):
        qrels = read_qrels(DATA / "qrels" / f"{split}.tsv")
        out[split] = ([(q, t) for q, t in read_queries(DATA / qfile) if q in qrels], qrels)
    return out


def tuned_both(s, splits: dict, candidates: int = 100) -> dict:
    """The tuner's grid in searcher `s`: every setting scored on train and
    test (nDCG@10), train's pick, and the test range of the settings within
    0.002 of the best train score."""
    from rag_cli.evaluate.report import evaluate_run
    from rag_cli.evaluate.tuning import DEFAULT_SETTING, candidate_lists, fused_run, fusion_grid

    lists = {k: candidate_lists(s, q, candidates) for k, (q, _) in splits.items()}
    grid = []
    for setting in fusion_grid():
        row = dict(setting)
        for k, (q, qrels) in splits.items():
            row[k] = evaluate_run(fused_run(s, q, lists[k], setting), qrels, [10], ["ndcg"], [])["metrics"]["ndcg@10"]
        grid.append(row)
    best = max(grid, key=lambda g: g["train"])  # the tuner's rule: ties keep the earlier setting
    rrf = next(g for g in grid if g["fusion"] == "rrf" and g["rrf_k"] == DEFAULT_SETTING["rrf_k"])
    near = [g["test"] for g in grid if g["train"] >= best["train"] - 0.002]
    return {"best_by_train": best, "rrf_60": rrf, "near_best": {"n": len(near), "test_min": min(near),
                                                               "test_max": max(near)}, "grid": grid}


def chunk_grid(projects: list[Path]) -> dict:
    """`tuned_both` in each project; the chosen project is train's best."""
    import pyarrow.parquet as pq

    from rag_cli import Project
    from rag_cli.evaluate.compare import compare_reports
    from rag_cli.evaluate.report import evaluate_run
    from rag_cli.evaluate.tuning import DEFAULT_SETTING, candidate_lists, fused_run

    splits = _splits()
    rows = []
    for path in projects:
        p = Project.open(path)
        s = p._searcher(p.config, with_embedder=True)
        row = {"project": str(path), "size": p.config.chunk.size, "overlap": p.config.chunk.overlap,
               "unit": p.config.chunk.unit, "n_chunks": pq.read_metadata(p.chunks_path).num_rows,
               **tuned_both(s, splits)}
        q, qrels = splits["test"]
        lists = candidate_lists(s, q, 100)
        best = {k: v for k, v in row["best_by_train"].items() if k not in ("train", "test")}
        reports = [evaluate_run(fused_run(s, q, lists, st), qrels, [10], ["ndcg"], []) for st in (DEFAULT_SETTING, best)]
        row["test_tuned_vs_rrf"] = compare_reports(reports, ["rrf-60", "tuned"], permutations=10000)[
            "comparisons"][0]["metrics"]["ndcg@10"]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "grid"}), flush=True)
    chosen = max(rows, key=lambda r: r["best_by_train"]["train"])
    return {"metric": "ndcg@10", "rule": "the project whose tuned fusion scores best on train", "chosen": chosen["project"],
            "chosen_test": chosen["best_by_train"]["test"], "projects": rows}


def bm25_grid(project: Path, k1s=(0.6, 0.9, 1.2, 1.5, 2.0), bs=(0.3, 0.4, 0.5, 0.6, 0.75, 0.9)) -> dict:
    """BM25 k1 x b: sparse alone (MaxP of the top 100 chunks) on train and
    test; then the fusion tuned on train over train's pick."""
    from rag_cli import Project
    from rag_cli.evaluate.report import evaluate_run
    from rag_cli.index.build import index_texts
    from rag_cli.index.searcher import prepare_query
    from rag_cli.index.sparse import SparseIndex

    p = Project.open(project)
    s = p._searcher(p.config, with_embedder=True)
    texts, splits = index_texts(s.chunks), _splits()

    def run(idx, queries):
        out = {}
        for qid, text in queries:
            docs: dict[str, float] = {}
            for row, score in zip(*idx.search(prepare_query(text), 100)):
                d = s._doc_ids[row]
                docs[d] = max(docs.get(d, float("-inf")), float(score))
            out[qid] = docs
        return out

    grid = []
    for k1 in k1s:
        for b in bs:
            idx = SparseIndex.build(texts, k1=k1, b=b)
            row = {"k1": k1, "b": b}
            for k, (q, qrels) in splits.items():
                row[k] = evaluate_run(run(idx, q), qrels, [10], ["ndcg"], [])["metrics"]["ndcg@10"]
            grid.append(row)
            print(json.dumps(row), flush=True)
    best = max(grid, key=lambda g: g["train"])
    s.sparse = SparseIndex.build(texts, k1=best["k1"], b=best["b"])
    fused = tuned_both(s, splits)
    return {"project": str(project), "sparse_best_by_train": best, "sparse_grid": grid,
            "fusion_over_pick": {k: v for k, v in fused.items() if k != "grid"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-corpus", type=Path)
    ap.add_argument("--docs", type=int, default=1200)
    ap.add_argument("--project", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--depth-grid", action="store_true",
                    help="only add a grid over the candidate depth too (train and test scores of every setting) to --out")
    ap.add_argument("--chunk-grid", type=Path, nargs="+", metavar="PROJECT",
                    help="only compare these projects (other chunk sizes of the corpus) by train, write --out")
    ap.add_argument("--bm25-grid", action="store_true",
                    help="only add a grid over BM25 k1 and b (tuned on train) to --out")
    ap.add_argument("--dense-case", action="store_true",
                    help="only add the upper-case loss of dense-only retrieval, with and without the fold, to --out")
    args = ap.parse_args()
    if args.make_corpus:
        make_corpus(args.make_corpus, args.docs)
        return
    import rag_cli.index.searcher as searcher_mod
    from rag_cli import Project, lab

    if args.chunk_grid:
        result = {"command": " ".join(["python", "bench/eval_tuning.py", *sys.argv[1:]]), **chunk_grid(args.chunk_grid),
                  "machine": machine(), "commit": commit()}
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({k: v for k, v in result.items() if k != "projects"}, indent=2))
        return
    if args.bm25_grid:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        result["bm25_grid"] = {**bm25_grid(args.project), "machine": machine(), "commit": commit()}
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({k: v for k, v in result["bm25_grid"].items() if k != "sparse_grid"}, indent=2))
        return
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
                rep = lab.perturb.run(p, test_qrels, test_q, ["upper"], mode="dense", ks=[10], permutations=2000,
                                      name=f"perturb-dense-{label}").to_dict()
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
    perturb = lab.perturb.run(p, test_qrels, test_q, ["upper", "lower", "typo", "punct"], ks=[10],
                              permutations=2000).to_dict()
    result["perturb_rrf_with_fold"] = {"original": perturb["original"],
                                      **{k: {"metrics": v["metrics"], "loss": v["loss"], "n_changed": v["n_changed"],
                                             "p_randomisation": v["comparison"]["ndcg@10"]["p_randomisation"]}
                                         for k, v in perturb["perturbations"].items()}}
    fold = searcher_mod.fold_shouting
    searcher_mod.fold_shouting = lambda q: q
    try:
        before = lab.perturb.run(p, test_qrels, test_q, ["upper"], ks=[10], permutations=2000,
                                 name="perturb-nofold").to_dict()
    finally:
        searcher_mod.fold_shouting = fold
    result["perturb_rrf_without_fold"] = {"upper": {"metrics": before["perturbations"]["upper"]["metrics"],
                                                    "loss": before["perturbations"]["upper"]["loss"]}}
    tune = lab.tune_fusion.run(p, DATA / "queries-train.jsonl", DATA / "qrels" / "train.tsv", test_queries=test_q,
                               test_qrels=test_qrels, permutations=10000).to_dict()
    result["tune"] = {k: tune[k] for k in ("best", "train", "grid", "candidates")}
    result["tune"]["test"] = {"n_queries": tune["test"]["n_queries"], "default": tune["test"]["default"],
                              "best": tune["test"]["best"],
                              "ndcg@10": tune["test"]["comparison"]["metrics"]["ndcg@10"]}
    tuned = lab.perturb.run(p, test_qrels, test_q, ["upper"], ks=[10], permutations=2000,
                            name="perturb-tuned").to_dict()
    searcher_mod.fold_shouting = lambda q: q
    try:
        tuned_nofold = lab.perturb.run(p, test_qrels, test_q, ["upper"], ks=[10], permutations=2000,
                                       name="perturb-tuned-nofold").to_dict()
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
