"""Document-level depth of a run: a run of k chunks against a run that holds k
distinct documents (what `rag search --queries` writes now), on a SciFact
subset (every document relevant to a test query plus the first others of the
corpus, up to --docs). Reports the distinct documents in the top k chunks and
document-level Recall@k / MAP@k / MAP both ways, per mode.

    RAG_CACHE=... python bench/eval_depth.py --docs 800 --size 128 --out bench/results/eval-depth-scifact.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rag_cli import Project
from rag_cli.evaluate.datasets import read_qrels
from rag_cli.evaluate.report import evaluate_rows
from rag_cli.store.runs import read_run

DATA = Path(os.environ.get("RAG_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "scifact"


def subset(dest: Path, n_docs: int) -> Path:
    qrels = read_qrels(DATA / "qrels" / "test.tsv")
    wanted = {d for docs in qrels.values() for d in docs}
    out = []
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["_id"] in wanted or len(out) < n_docs - len(wanted):
                out.append(line)
    path = dest / "corpus.jsonl"
    path.write_text("".join(out), encoding="utf-8")
    return path


def first_k_chunks(rows, k):
    by_q = defaultdict(list)
    for r in rows:
        by_q[r.query_id].append(r)
    return [r for rs in by_q.values() for r in sorted(rs, key=lambda r: r.rank)[:k]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=800)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("-k", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    qrels_path = DATA / "qrels" / "test.tsv"
    qrels = read_qrels(qrels_path)
    result = {"docs": args.docs, "chunk_size": args.size, "k": args.k, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = subset(Path(tmp), args.docs)
        p = Project.create(Path(tmp) / "p", chunk={"size": args.size})
        t0 = time.perf_counter()
        p.chunk([corpus], format="beir")
        p.embed()
        p.index()
        result["build_seconds"] = round(time.perf_counter() - t0, 1)
        for mode in ("sparse", "dense", "hybrid"):
            run = p.search_queries(DATA / "queries.jsonl", mode=mode, k=args.k)
            deep = read_run(run.path)
            shallow = first_k_chunks(deep, args.k)
            per_q = defaultdict(set)
            for r in shallow:
                per_q[r.query_id].add(r.doc_id)
            entry = {"median_distinct_docs_in_top_k_chunks": statistics.median(len(v) for v in per_q.values()),
                     "mean_chunks_for_k_docs": len(deep) / len({r.query_id for r in deep})}
            for label, rows in (("k_chunks", shallow), ("k_docs", deep)):
                m = evaluate_rows(rows, qrels, ks=(10, args.k), metrics=("recall", "ndcg", "map"))["metrics"]
                entry[label] = {name: round(v, 4) for name, v in m.items()}
            result["modes"][mode] = entry
            print(mode, json.dumps(entry))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    result["machine"] = {"cpu": cpu, "avx512": any(f.startswith("avx512") for f in flags),
                         "avx2": "avx2" in flags, "python": platform.python_version()}
    result["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
