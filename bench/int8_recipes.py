"""Which int8 recipe keeps retrieval quality: dense nDCG@10 on SciFact or CMRC
2018 for fp32 and each int8 recipe, with a paired significance test against
fp32.

    python bench/int8_recipes.py [scifact|cmrc2018-trial] [--recipes fp32,int8,split,smooth-split,smooth]
                                 [--project DIR] [--limit N]

Recipes (`rag_cli.models.quantize.quantize_int8`):

- `fp32`: the default model's float32 graph;
- `int8`: the default recipe (FFN down-projections float32);
- `split`: `rag models quantize --calibrate`, the FFN outlier split (FFN
  down-projections int8 but for each FFN's 4 outlier channels);
- `smooth-split`: SmoothQuant, then the split; `smooth`: SmoothQuant alone
  (FFN down-projections float32).

Reads the chunks of a project made by `bench/pipeline.py DATASET --size 500
--overlap 50` (its `embed_text` column, what `rag embed` embeds), embeds them
and the test queries with each recipe (length-sorted batches, the library
default token budget), and searches exactly (numpy, cosine; a document scores
its best chunk; top 200 chunks per query). Prints each int8 recipe's cosine
to fp32 (chunks and queries), nDCG@10 with documents and queries from the same
recipe, its difference to fp32 and the two-sided p-value of a paired
randomization test over the queries (sign flips of the per-query differences,
Smucker et al. 2007, "A comparison of statistical significance tests for
information retrieval evaluation"; scipy.stats.permutation_test, 10,000
resamples), then nDCG@10 for every pairing of chunk vectors and query vectors
from different recipes, and writes `bench/results/int8-recipes-DATASET.json`.

Vectors are kept in `bench/out/int8-recipes-cache/` under the model's
fingerprint and the texts' hash, so a rerun with more recipes embeds only the
new ones. One SciFact embedding (6,025 chunks) takes about 15 minutes on 2
cores; CMRC 2018 trial (369 chunks, 1,000 queries) about 1.5 minutes.
`--limit N` takes the first N chunks (a quick check, not comparable to the
full numbers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import permutation_test

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

from rag_cli.evaluate.datasets import read_qrels, read_queries  # noqa: E402
from rag_cli.evaluate.metrics import ndcg_at_k  # noqa: E402
from rag_cli.models import e5_convert  # noqa: E402
from rag_cli.models.defaults import ensure_default_model  # noqa: E402
from rag_cli.models.encoder import BiEncoder  # noqa: E402
from rag_cli.models.folder import ModelFolder  # noqa: E402

#: recipe -> the rewrites of `quantize_int8` it applies (None: fp32, or the default int8 file)
RECIPES = {"fp32": None, "int8": None, "split": ("split",), "smooth-split": ("smooth", "split"),
           "smooth": ("smooth",)}


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


def embed(recipe: str, folder: Path, tmp: Path, texts: list[str], queries: list[str], cache: Path):
    """(chunks (n, d), queries (q, d)) float32 unit vectors of ``recipe``, from the cache when there."""
    if recipe == "fp32":
        onnx_file = folder / e5_convert.ONNX_FP32
    elif recipe == "int8":
        onnx_file = folder / e5_convert.ONNX_INT8
    else:
        onnx_file = tmp / f"{recipe}.onnx"
        e5_convert.quantize_int8(folder / e5_convert.ONNX_FP32, onnx_file, folder / "tokenizer.json",
                                 rewrites=RECIPES[recipe])
    enc = BiEncoder(ModelFolder.load(folder, onnx_file=onnx_file))
    h = hashlib.sha256(json.dumps([texts, queries]).encode()).hexdigest()[:16]
    path = cache / f"{recipe}-{enc.folder.fingerprint[:16]}-{h}.npz"
    if path.exists():
        with np.load(path) as z:
            return z["chunks"], z["queries"]
    t = time.perf_counter()
    vecs = enc.encode_passages(texts), enc.encode_queries(queries)
    print(f"{recipe}: {len(texts)} chunks, {len(queries)} queries in {time.perf_counter() - t:.0f} s", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path.with_suffix(".tmp.npz"), chunks=vecs[0], queries=vecs[1])
    path.with_suffix(".tmp.npz").replace(path)
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
    with tempfile.TemporaryDirectory() as tmp:
        vecs = {r: embed(r, folder, Path(tmp), texts, [q for _, q in queries], args.cache) for r in recipes}

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
        res["recipes"][r] = {"cosine_to_fp32": {"chunks_mean": float(c_docs.mean()), "chunks_min": float(c_docs.min()),
                                                "queries_mean": float(c_q.mean()), "queries_min": float(c_q.min())},
                             "ndcg@10": float(ndcg[r].mean()), "ndcg@10_minus_fp32": diff, "p_value": p,
                             "queries_changed": int((ndcg[r] != ndcg["fp32"]).sum())}
        print(f"{r:>12s} {c_docs.mean():11.5f} {c_docs.min():8.5f} {c_q.mean():12.5f} {c_q.min():8.5f} "
              f"{ndcg[r].mean():8.4f} {diff:+8.4f} {p:7.3f}")
    # every pairing: which side (chunk or query vectors) carries the loss
    res["ndcg@10_docs_x_queries"] = {d: {q: float(per_query_ndcg10(vecs[q][1], vecs[d][0], doc_ids, qids,
                                                                   qrels).mean()) for q in recipes}
                                     for d in recipes}
    print(f"\nnDCG@10, chunk vectors (rows) x query vectors (columns)\n{'':>14s}"
          + "".join(f"{q:>14s}" for q in recipes))
    for d, row in res["ndcg@10_docs_x_queries"].items():
        print(f"{d:>14s}" + "".join(f"{row[q]:14.4f}" for q in recipes))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
