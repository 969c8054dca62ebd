"""Which int8 recipe keeps retrieval quality: dense nDCG@10 on SciFact or CMRC
2018 for fp32 and each int8 recipe, with a paired significance test against
fp32.

    python bench/int8_recipes.py [scifact|cmrc2018-trial] [--recipes fp32,int8,int8-alone,plain,smooth-split,smooth]
                                 [--project DIR] [--limit N]

A recipe is a pair of graphs, one for the chunks and one for the queries:

- `fp32`: the default model's float32 graph for both;
- `int8`: what `--precision int8` runs: the int8 graph (the calibrated
  recipe, FFN outlier split; `rag_cli.models.convert.quantize.quantize_int8`) for the
  chunks, its query graph (float32 with int8 embedding tables,
  `quantize_query_graph`) for the queries;
- `int8-alone`: the int8 graph for the queries too (no query graph);
- `plain`: the uncalibrated recipe (FFN down-projections float32; the default
  before conversion 4) for both;
- `smooth-split`: SmoothQuant, then the split; `smooth`: SmoothQuant alone;
  each for both (`bench/int8_lib.py`).

Reads the chunks of a project made by `bench/pipeline.py DATASET --size 500
--overlap 50` (its `embed_text` column, what `rag embed` embeds), embeds them
and the test queries with each graph (length-sorted batches, the library
default token budget), and searches exactly (numpy, cosine; a document scores
its best chunk; top 200 chunks per query). Prints each recipe's cosine to
fp32 (chunks and queries), nDCG@10, its difference to fp32 and the two-sided
p-value of a paired randomization test over the queries (sign flips of the
per-query differences, Smucker et al. 2007, "A comparison of statistical
significance tests for information retrieval evaluation";
scipy.stats.permutation_test, 10,000 resamples), then nDCG@10 for every
pairing of chunk graph and query graph, and writes
`bench/results/int8-recipes-DATASET.json`.

Vectors are kept in `bench/out/int8-recipes-cache/` under the graph's
fingerprint and the texts' hash (chunks and queries apart, so a graph used
for queries only never embeds the chunks). One SciFact embedding (6,025
chunks) takes about 15 minutes on 2 cores; CMRC 2018 trial (369 chunks, 1,000
queries) about 1.5 minutes. `--limit N` takes the first N chunks (a quick
check, not comparable to the full numbers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import permutation_test

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("RAG_DATA", REPO.parent / "shared" / "data"))

from rag_cli.evaluate.datasets import read_qrels, read_queries  # noqa: E402
from rag_cli.evaluate.metrics import ndcg_at_k  # noqa: E402
from int8_lib import quantize_recipe  # noqa: E402
from rag_cli.models.convert import e5 as e5_convert  # noqa: E402
from rag_cli.models.defaults import ensure_default_model  # noqa: E402
from rag_cli.models.encoder import BiEncoder  # noqa: E402
from rag_cli.models.folder import ModelFolder  # noqa: E402

#: graph -> a file of the default model folder, or the rewrites `quantize_recipe` applies (() : none, uncalibrated)
GRAPHS = {"fp32": e5_convert.ONNX_FP32, "int8": e5_convert.ONNX_INT8, "query": e5_convert.ONNX_INT8_QUERY,
          "plain": (), "smooth-split": ("smooth", "split"), "smooth": ("smooth",)}
#: recipe -> (graph of the chunks, graph of the queries)
RECIPES = {"fp32": ("fp32", "fp32"), "int8": ("int8", "query"), "int8-alone": ("int8", "int8"),
           "plain": ("plain", "plain"), "smooth-split": ("smooth-split", "smooth-split"),
           "smooth": ("smooth", "smooth")}


def per_query_ndcg10(queries: np.ndarray, chunks: np.ndarray, doc_ids: np.ndarray, qids: list[str],
                     qrels) -> np.ndarray:
    """(q,) float64 nDCG@10 per query of exact cosine search; (q, d) and (n, d) float32 unit vectors."""
    scores = queries @ chunks.T
    run = {}
    for qi, qid in enumerate(qids):
        docs: dict[str, float] = {}
        for j in np.argsort(-scores[qi])[:200]:
            docs.setdefault(str(doc_ids[j]), float(scores[qi, j]))
        run[qid] = docs
    per_query = ndcg_at_k(run, qrels, 10)
    return np.array([per_query[qid] for qid in qids], dtype=np.float64)


def paired_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value that the paired per-query scores ``a`` and ``b`` have the same mean
    (randomization test: the sign of each query's difference flipped at random)."""
    if np.allclose(a, b):
        return 1.0
    res = permutation_test((a, b), lambda x, y: np.mean(x - y), permutation_type="samples",
                           n_resamples=10_000, alternative="two-sided", random_state=0)
    return float(res.pvalue)


def graph_encoder(graph: str, folder: Path, tmp: Path) -> BiEncoder:
    """A BiEncoder running ``graph`` (`GRAPHS`) alone, for queries and passages alike."""
    spec = GRAPHS[graph]
    if isinstance(spec, str):
        onnx_file = folder / spec
    else:
        onnx_file = tmp / f"{graph}.onnx"
        if not onnx_file.exists():
            quantize_recipe(folder / e5_convert.ONNX_FP32, onnx_file, folder / "tokenizer.json", rewrites=spec)
    return BiEncoder(replace(ModelFolder.load(folder, onnx_file=onnx_file), query_onnx_path=None))


def embed(graph: str, role: str, texts: list[str], folder: Path, tmp: Path, cache: Path) -> np.ndarray:
    """(n, d) float32 unit vectors of ``texts`` as ``role`` ("chunks" or "queries") by ``graph``, cached."""
    enc = graph_encoder(graph, folder, tmp)
    h = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]
    path = cache / f"{graph}-{enc.folder.fingerprint[:16]}-{role}-{h}.npy"
    if path.exists():
        return np.load(path)
    t = time.perf_counter()
    vecs = enc.encode_queries(texts) if role == "queries" else enc.encode_passages(texts)
    print(f"{graph}: {len(texts)} {role} in {time.perf_counter() - t:.0f} s", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path.with_suffix(".tmp.npy"), vecs)
    path.with_suffix(".tmp.npy").replace(path)
    return vecs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default="scifact", choices=["scifact", "cmrc2018-trial"])
    ap.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated, from " + ", ".join(RECIPES))
    ap.add_argument("--project", type=Path, help="default: bench/out/DATASET-recursive500-int8")
    ap.add_argument("--limit", type=int, default=0, help="first N chunks only (quick check)")
    ap.add_argument("--cache", type=Path, default=REPO / "bench" / "out" / "int8-recipes-cache")
    ap.add_argument("--out", type=Path, help="default: bench/results/int8-recipes-DATASET.json")
    args = ap.parse_args()
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    bad = [r for r in recipes if r not in RECIPES]
    if bad or "fp32" not in recipes:
        ap.error(f"--recipes: {', '.join(bad) or 'fp32 missing'}; choose from {', '.join(RECIPES)}, fp32 included")
    project = args.project or REPO / "bench" / "out" / f"{args.dataset}-recursive500-int8"
    out = args.out or REPO / "bench" / "results" / f"int8-recipes-{args.dataset}.json"

    chunks = pq.read_table(project / "chunks.parquet", columns=["doc_id", "embed_text"]).to_pydict()
    texts, doc_ids = chunks["embed_text"], np.array(chunks["doc_id"])
    if args.limit:
        texts, doc_ids = texts[: args.limit], doc_ids[: args.limit]
    qrels = read_qrels(DATA / args.dataset / "qrels" / "test.tsv")
    queries = [(qid, text) for qid, text in read_queries(DATA / args.dataset / "queries.jsonl") if qid in qrels]
    qids = [qid for qid, _ in queries]

    folder = ensure_default_model()
    chunk_graphs = list(dict.fromkeys(RECIPES[r][0] for r in recipes))
    query_graphs = list(dict.fromkeys(RECIPES[r][1] for r in recipes))
    with tempfile.TemporaryDirectory() as tmp:
        by_chunks = {g: embed(g, "chunks", texts, folder, Path(tmp), args.cache) for g in chunk_graphs}
        by_queries = {g: embed(g, "queries", [q for _, q in queries], folder, Path(tmp), args.cache)
                      for g in query_graphs}
    vecs = {r: (by_chunks[RECIPES[r][0]], by_queries[RECIPES[r][1]]) for r in recipes}

    ndcg = {r: per_query_ndcg10(vecs[r][1], vecs[r][0], doc_ids, qids, qrels) for r in recipes}
    res: dict = {"dataset": args.dataset, "project": str(project.relative_to(REPO) if project.is_relative_to(REPO)
                                                          else project),
                 "chunks": len(texts), "queries": len(qids), "recipes": {}}
    print(f"\n{args.dataset}: {len(texts)} chunks, {len(qids)} queries; documents and queries from the same recipe")
    print(f"{'recipe':>12s} {'cos chunks':>11s} {'(min)':>8s} {'cos queries':>12s} {'(min)':>8s} "
          f"{'nDCG@10':>8s} {'- fp32':>8s} {'p':>7s}")
    for r in recipes:
        c_docs = (vecs[r][0] * vecs["fp32"][0]).sum(1)
        c_q = (vecs[r][1] * vecs["fp32"][1]).sum(1)
        diff = float(ndcg[r].mean() - ndcg["fp32"].mean())
        p = paired_p_value(ndcg[r], ndcg["fp32"])
        res["recipes"][r] = {"graphs": {"chunks": RECIPES[r][0], "queries": RECIPES[r][1]},
                             "cosine_to_fp32": {"chunks_mean": float(c_docs.mean()), "chunks_min": float(c_docs.min()),
                                                "queries_mean": float(c_q.mean()), "queries_min": float(c_q.min())},
                             "ndcg@10": float(ndcg[r].mean()), "ndcg@10_minus_fp32": diff, "p_value": p,
                             "queries_changed": int((ndcg[r] != ndcg["fp32"]).sum())}
        print(f"{r:>12s} {c_docs.mean():11.5f} {c_docs.min():8.5f} {c_q.mean():12.5f} {c_q.min():8.5f} "
              f"{ndcg[r].mean():8.4f} {diff:+8.4f} {p:7.3f}")
    # every pairing: which side (chunk or query vectors) carries the loss
    res["ndcg@10_docs_x_queries"] = {d: {q: float(per_query_ndcg10(by_queries[q], by_chunks[d], doc_ids, qids,
                                                                   qrels).mean()) for q in query_graphs}
                                     for d in chunk_graphs}
    print(f"\nnDCG@10, chunk graph (rows) x query graph (columns)\n{'':>14s}"
          + "".join(f"{q:>14s}" for q in query_graphs))
    for d, row in res["ndcg@10_docs_x_queries"].items():
        print(f"{d:>14s}" + "".join(f"{row[q]:14.4f}" for q in query_graphs))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
