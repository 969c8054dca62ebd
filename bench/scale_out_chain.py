"""The scale-out chain end to end, as a user runs it (issue #24): `rag build --ray`,
`rag index --backend milvus`, `rag serve`, and `rag eval` of the served run.

On a SciFact subset (the relevant abstracts of the first Q test queries plus
D others drawn with a fixed seed; BEIR files written to WORK/data):

1. `rag build WORK/data/corpus.jsonl --format beir --ray -p WORK/ray` (a local
   Ray instance started and stopped by rag-cli);
2. `rag index --backend milvus -p WORK/ray` (Milvus Lite, WORK/ray/milvus.db);
3. `rag serve -p WORK/ray --port 0` (127.0.0.1), one POST /search per query
   (hybrid, k 10), the hits written as a TREC run at the document level
   (a document's best chunk, in rank order, as `rag search --level doc`), then
   the server stopped with SIGTERM (always, also on failure);
4. `rag eval --qrels WORK/data/qrels.tsv --run that run` (nDCG@10, recall@10);
5. the same corpus with the local path: `rag build ... -p WORK/local` (no
   Ray, the default hnswlib backend) and `rag search --queries --level doc
   --mode hybrid --format trec`, scored the same way; and the two
   embeddings.parquet compared row by row (cosine).

    python bench/scale_out_chain.py --work /tmp/chain --queries 50 --docs 300

Writes bench/results/scale-out-chain.json (machine, commit, load average, commands, wall times, scores).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_DATA", ROOT.parent / "shared" / "data"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import commit, machine  # noqa: E402


def rag(*args: str, timeout: float = 3600) -> tuple[float, str]:
    """Run `python -m rag_cli ARGS`; (wall seconds, stdout). Raises on a non-zero exit."""
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "rag_cli", *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if res.returncode != 0:
        raise SystemExit(f"rag {' '.join(args)}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
    return round(time.perf_counter() - t0, 1), res.stdout


def subset(work: Path, n_queries: int, n_docs: int, seed: int = 7) -> Path:
    """WORK/data/{corpus.jsonl, queries.jsonl, qrels.tsv}: the first `n_queries` test queries with
    qrels, their relevant abstracts and `n_docs` other abstracts."""
    out = work / "data"
    out.mkdir(parents=True, exist_ok=True)
    qrels = [line.rstrip("\n").split("\t") for line in (DATA / "scifact" / "qrels" / "test.tsv").open()][1:]
    qids: list[str] = []
    for q, _, _ in qrels:
        if q not in qids:
            qids.append(q)
    qids = qids[:n_queries]
    keep_q = set(qids)
    rel = {d for q, d, s in qrels if q in keep_q and int(s) > 0}
    docs = [json.loads(line) for line in gzip.open(DATA / "scifact" / "corpus.jsonl.gz", "rt")]
    others = [d for d in docs if d["_id"] not in rel]
    chosen = rel | {d["_id"] for d in random.Random(seed).sample(others, n_docs)}
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for d in docs:
            if d["_id"] in chosen:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    queries = {json.loads(line)["_id"]: json.loads(line) for line in (DATA / "scifact" / "queries.jsonl").open()}
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for q in qids:
            f.write(json.dumps({"_id": q, "text": queries[q]["text"]}, ensure_ascii=False) + "\n")
    with (out / "qrels.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, d, s in qrels:
            if q in keep_q:
                f.write(f"{q}\t{d}\t{s}\n")
    return out


def serve_run(proj: Path, queries: list[dict], out: Path, k: int = 10) -> dict:
    """Start `rag serve` on 127.0.0.1 (any free port), POST /search per query, write a doc-level TREC run
    to `out`, stop the server (SIGTERM; killed after 30 s). Returns latencies and the start time."""
    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "rag_cli", "serve", "-p", str(proj), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    t0 = time.perf_counter()
    try:
        url, seen = None, []
        deadline = time.time() + 600
        while url is None:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None or time.time() > deadline:
                raise SystemExit("rag serve did not start:\n" + "".join(seen[-30:]))
            seen.append(line)
            m = re.search(r"on (http://[0-9.]+:\d+)", line)
            url = m.group(1) if m else None
        start_s = round(time.perf_counter() - t0, 1)
        lat, lines = [], []
        with httpx.Client(base_url=url, timeout=120) as client:
            for q in queries:
                t = time.perf_counter()
                r = client.post("/search", json={"query": q["text"], "mode": "hybrid", "k": 100})
                lat.append(time.perf_counter() - t)
                r.raise_for_status()
                best: dict[str, float] = {}
                for hit in r.json()["results"]:
                    if hit["doc_id"] not in best:
                        best[hit["doc_id"]] = hit["score"]
                for rank, (doc, score) in enumerate(list(best.items())[:k], 1):
                    lines.append(f"{q['_id']} Q0 {doc} {rank} {score:.6f} serve-milvus")
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        lat.sort()
        return {"url": url, "start_seconds": start_s, "queries": len(lat),
                "p50_ms": round(1000 * lat[len(lat) // 2], 1), "p95_ms": round(1000 * lat[int(len(lat) * 0.95)], 1)}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def scores(qrels: Path, run: Path) -> dict:
    _, out = rag("eval", "--qrels", str(qrels), "--run", str(run), "--ks", "10", "--json")
    metrics = json.loads(out)["metrics"]
    return {k: round(v, 4) for k, v in metrics.items() if k in ("ndcg@10", "recall@10", "mrr@10", "map@10")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/scale-out-chain"))
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--docs", type=int, default=300, help="abstracts besides the relevant ones")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale-out-chain.json")
    args = ap.parse_args()
    if args.work.exists():
        shutil.rmtree(args.work)
    data = subset(args.work, args.queries, args.docs)
    report = {"command": "python bench/scale_out_chain.py " + " ".join(sys.argv[1:]), "commit": commit(),
              "machine": machine(), "load_avg": {"start": os.getloadavg()}, "seconds": {},
              "corpus": {"docs": sum(1 for _ in (data / "corpus.jsonl").open()), "queries": args.queries}}
    ray, local = args.work / "ray", args.work / "local"
    corpus = str(data / "corpus.jsonl")
    report["seconds"]["rag build --ray"], _ = rag("build", corpus, "--format", "beir", "--ray", "-p", str(ray), "-q")
    report["seconds"]["rag index --backend milvus"], _ = rag("index", "--backend", "milvus", "-p", str(ray), "-q")
    report["seconds"]["rag build (local)"], _ = rag("build", corpus, "--format", "beir", "-p", str(local), "-q")
    report["load_avg"]["after builds"] = os.getloadavg()
    queries = [json.loads(line) for line in (data / "queries.jsonl").open()]
    report["serve"] = serve_run(ray, queries, args.work / "serve-milvus.trec")
    t, _ = rag("search", "--queries", str(data / "queries.jsonl"), "--mode", "hybrid", "--level", "doc", "-k", "10",
               "--format", "trec", "-o", str(args.work / "local.trec"), "-p", str(local), "-q")
    report["seconds"]["rag search --queries (local)"] = t
    report["eval"] = {"serve (ray + milvus)": scores(data / "qrels.tsv", args.work / "serve-milvus.trec"),
                      "rag search (local)": scores(data / "qrels.tsv", args.work / "local.trec")}
    import numpy as np

    from rag_cli.store.embeddings import read_embeddings

    a, b = read_embeddings(ray / "embeddings.parquet"), read_embeddings(local / "embeddings.parquet")
    same_order = a.chunk_ids == b.chunk_ids
    cos = np.einsum("ij,ij->i", a.vectors, b.vectors) if same_order else np.zeros(0)
    report["embeddings"] = {"rows": len(a.chunk_ids), "same_row_order": same_order,
                            "min_cosine": round(float(cos.min()), 6) if len(cos) else None,
                            "bit_identical": bool(same_order and np.array_equal(a.vectors, b.vectors)),
                            "same_fingerprint": a.fingerprint == b.fingerprint}
    report["load_avg"]["end"] = os.getloadavg()
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("seconds", "serve", "eval", "embeddings")}, indent=2))


if __name__ == "__main__":
    main()
