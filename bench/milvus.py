"""The milvus backend against the local one on a built project (full SciFact by default).

Copies the project twice (the copies share nothing): one indexed with
`--backend exact` (the ground truth of dense recall), one with `--backend
milvus` on a Milvus Lite file (or `--uri http://host:19530`). Then searches
every test query in each mode with k = 10 on the original (its local backend,
hnswlib by default), the exact copy and the milvus copy, and reports:

- sparse: the share of queries whose Milvus top 10 equals local BM25's (equal
  scores, relative 1e-5, may come in either order), and the largest relative
  score difference;
- dense: recall@10 of Milvus against exact search;
- hybrid: nDCG@10 (document level, MaxP, as `rag eval`) local vs Milvus;
- publish time (the collection written, indexed and loaded) and the whole
  `rag index --backend milvus`;
- query latency, per mode, of `Project.search` (one query at a time, the
  bi-encoder included for dense and hybrid): median and p95, local vs Milvus.

    python bench/milvus.py --project bench/out/scifact-recursive500-int8   # from bench/pipeline.py scifact
    python bench/milvus.py --project P --uri http://127.0.0.1:19530        # a Milvus server

Writes bench/results/milvus-scifact.json (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import commit, machine

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_DATA", ROOT.parent / "shared" / "data"))
sys.path.insert(0, str(ROOT))


def runs_by_query(path: Path) -> dict[str, list[dict]]:
    import pyarrow.parquet as pq

    out: dict[str, list[dict]] = {}
    for r in pq.read_table(path).to_pylist():
        out.setdefault(r["query_id"], []).append(r)
    return {q: sorted(rows, key=lambda r: r["rank"]) for q, rows in out.items()}


def same_up_to_ties(got: list[dict], want: list[dict], rtol: float = 1e-5) -> tuple[bool, float]:
    """(whether the two top lists agree: equal scores rank by rank, the same chunks except among equal
    scores or at the cut; the largest relative score difference)."""
    if len(got) != len(want):
        return False, float("inf")
    gs, ws = np.array([r["score"] for r in got]), np.array([r["score"] for r in want])
    diff = float(np.max(np.abs(gs - ws) / np.maximum(np.abs(ws), 1e-12))) if len(ws) else 0.0
    if diff > rtol:
        return False, diff
    for g, w in zip(got, want):
        if g["chunk_id"] != w["chunk_id"]:
            tied = {r["chunk_id"] for r in want if abs(r["score"] - g["score"]) <= rtol * abs(g["score"])}
            if g["chunk_id"] not in tied and abs(g["score"] - ws[-1]) > rtol * abs(ws[-1]):
                return False, diff
    return True, diff


def latency(p, queries: list[str], mode: str) -> dict:
    """Median and p95 milliseconds of `p.search(q, mode=mode, k=10)` over `queries` (after one warm-up)."""
    p.search(queries[0], mode=mode, k=10)
    ms = []
    for q in queries:
        t0 = time.perf_counter()
        p.search(q, mode=mode, k=10)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(float(np.median(ms)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=ROOT / "bench" / "out" / "scifact-recursive500-int8")
    ap.add_argument("--queries", type=Path, default=DATA / "scifact" / "queries.jsonl")
    ap.add_argument("--qrels", type=Path, default=DATA / "scifact" / "qrels" / "test.tsv")
    ap.add_argument("--uri", default="", help="Milvus URI (default: a Lite file in the work folder)")
    ap.add_argument("--milvus-index", default="hnsw")
    ap.add_argument("--work", type=Path, default=None, help="where the copies go (default: a temporary folder)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "milvus-scifact.json")
    args = ap.parse_args()

    from rag_cli import Project
    from rag_cli.index import milvus, milvus_publish
    from rag_cli.evaluate.datasets import read_queries
    from rag_cli.lab.score import score_run

    load_before = os.getloadavg()
    work = args.work or Path(tempfile.mkdtemp(prefix="rag-milvus-bench-"))
    exact_dir, milvus_dir = work / "exact", work / "milvus"
    for d in (exact_dir, milvus_dir):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(args.project, d, ignore=shutil.ignore_patterns("runs", "eval", ".lock*"))
    local, exact, served = Project.open(args.project), Project.open(exact_dir), Project.open(milvus_dir)
    uri = args.uri or str(work / "lite" / "milvus.db")

    published: list[float] = []
    original = milvus_publish.publish_generation

    def timed(gen, params):
        seconds = original(gen, params)
        published.append(seconds)
        return seconds

    milvus_publish.publish_generation = timed
    t0 = time.perf_counter()
    exact.index(backend="exact")
    exact_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    info = served.index(backend="milvus", uri=uri, collection="bench", milvus_index=args.milvus_index)
    index_seconds = time.perf_counter() - t0
    report: dict = {"project": str(args.project), "n_chunks": info.n_chunks, "dim": info.dim, "uri_kind":
                    "server" if milvus.is_server(uri) else "milvus-lite", "milvus_index": args.milvus_index,
                    "index_seconds": {"exact": round(exact_seconds, 2), "milvus": round(index_seconds, 2),
                                      "milvus_publish": round(published[0], 2)}}
    runs = {}
    for name, p in (("local", local), ("exact", exact), ("milvus", served)):
        for mode in ("sparse", "dense", "hybrid"):
            t0 = time.perf_counter()
            out = p.search_queries(args.queries, mode=mode, k=10, name=f"bench-{mode}")
            runs[(name, mode)] = (out.path, time.perf_counter() - t0)
    sp_local, sp_milvus = runs_by_query(runs[("local", "sparse")][0]), runs_by_query(runs[("milvus", "sparse")][0])
    agree = [same_up_to_ties(sp_milvus.get(q, []), rows) for q, rows in sp_local.items()]
    report["sparse"] = {"queries": len(agree), "top10_equal": sum(a for a, _ in agree),
                        "max_rel_score_diff": max(d for _, d in agree)}
    de_exact, de_milvus = runs_by_query(runs[("exact", "dense")][0]), runs_by_query(runs[("milvus", "dense")][0])
    rec = [len({r["chunk_id"] for r in de_milvus.get(q, [])} & {r["chunk_id"] for r in rows}) / len(rows)
           for q, rows in de_exact.items()]
    report["dense"] = {"recall@10_vs_exact": round(float(np.mean(rec)), 4)}
    ndcg = {}
    for name in ("local", "exact", "milvus"):
        for mode in ("sparse", "dense", "hybrid"):
            ndcg[f"{name}-{mode}"] = round(score_run(runs[(name, mode)][0], args.qrels, [10])["metrics"]["ndcg@10"], 4)
    report["ndcg@10"] = ndcg
    report["hybrid"] = {"ndcg@10_local": ndcg["local-hybrid"], "ndcg@10_milvus": ndcg["milvus-hybrid"],
                        "difference": round(ndcg["milvus-hybrid"] - ndcg["local-hybrid"], 4)}
    report["run_seconds"] = {f"{n}-{m}": round(s, 2) for (n, m), (_, s) in runs.items()}
    queries = [text for _, text in read_queries(args.queries)]
    report["latency"] = {f"{name}-{mode}": latency(p, queries, mode) for name, p in (("local", local), ("milvus", served))
                         for mode in ("sparse", "dense", "hybrid")}
    milvus.close_clients()
    report.update(machine=machine(), commit=commit(), load_before=[round(x, 2) for x in load_before],
                  load_after=[round(x, 2) for x in os.getloadavg()],
                  command=" ".join(["python", "bench/milvus.py", *sys.argv[1:]]))
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
