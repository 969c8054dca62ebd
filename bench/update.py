"""`rag update` after a 1% change vs a fresh `rag build` of the changed corpus, on SciFact.

Builds a project from the first N SciFact documents (one DOC_ID.txt file
each), changes 1% of them (a third edited, a third deleted, a third new
documents added), then times `rag update` on it and a fresh `rag build` of
the changed folder into a new project. Each command is the real CLI in its
own process (start-up and model loading included, as cron would run it);
the per-stage split comes from the commands' --json output. Then checks
that both projects give the same results: sparse exactly (chunk ids and
scores of the top 10 for the test queries), dense within the recall@10
(against exact search) of the fresh index.

    python bench/update.py                      # N = 1000, the default model (int8)
    python bench/update.py --n 5183             # the full corpus
    python bench/update.py --n 300 --model DIR  # another bi-encoder folder
    python bench/update.py --n 5183 --seed-cache OLD_WORK/a   # the first build reuses vectors

When the corpus has fewer than N + N*change/3 documents (--n 5183), the
added documents are the last N*change/3 of the N, held out of the first
build (which then has N - N*change/3 documents). --seed-cache copies into
the first project, before its build, the cached vectors of exactly the
texts of that first build (none of the edited or added texts), so the
update still embeds every new text; the fresh build of the changed corpus
always starts without a cache, as a user's would.

Writes bench/results/update.json (CPU model and flags, commit, load average).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_DATA", ROOT.parent / "shared" / "data")) / "scifact"
sys.path.insert(0, str(ROOT))


def cpu_info() -> dict:
    """CPU model name and the SIMD flags that matter for onnxruntime/hnswlib (Linux /proc/cpuinfo)."""
    model, flags = platform.processor(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                flags = sorted(f for f in have if f.startswith(("avx", "sse4", "fma", "amx")) or f == "f16c")
                break
    except OSError:
        pass
    return {"model": model, "flags": flags, "cpus": os.cpu_count(), "load_avg": os.getloadavg()}


def rag(*args) -> tuple[float, dict]:
    """Run `python -m rag_cli ARGS --json -q`; (wall seconds, parsed JSON). Exits on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args), "--json"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rag {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, json.loads(proc.stdout)


def corpus(n: int) -> list[tuple[str, str]]:
    out = []
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            out.append((r["_id"], f"{r['title']}\n\n{r['text']}\n"))
            if len(out) == n:
                break
    return out


def write(folder: Path, docs: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for doc_id, text in docs:
        (folder / f"{doc_id}.txt").write_text(text, encoding="utf-8")


def results(root: Path, queries: list[str]) -> tuple[list, float]:
    """(sparse top 10 per query as [(chunk_id, score rounded to 5 digits)], dense recall@10 vs exact search)."""
    from rag_cli.project import Project

    p = Project.open(root)
    sparse = [[(h.chunk_id, round(h.score, 5)) for h in p.search(q, mode="sparse", k=10).hits] for q in queries]
    s = p._searcher(p.config, with_embedder=True)
    qv = s.encode_queries(queries)
    vecs = s.dense.vectors(range(s.chunks.num_rows))
    vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    exact = np.argsort(-(qv / np.linalg.norm(qv, axis=1, keepdims=True)) @ vecs.T, axis=1)[:, :10]
    got = s.batch_search(queries, mode="dense", k=10, query_vectors=qv)
    recall = np.mean([len({h.row for h in hits} & set(row.tolist())) / 10 for hits, row in zip(got, exact)])
    return sparse, float(recall)


def seed_cache(seed: Path, root: Path) -> int:
    """Copy from `seed`'s vector caches into `root`'s the vectors of the
    texts in `root`'s chunks.parquet (and no others); returns how many."""
    import pyarrow.parquet as pq

    from rag_cli.hashing import sha256_text
    from rag_cli.store.chunks import embed_text_column
    from rag_cli.store.embeddings import VectorCache

    path = root / "chunks.parquet"
    shas = sorted({sha256_text(t) for t in pq.read_table(path, columns=[embed_text_column(path)]).column(0).to_pylist()})
    n = 0
    for folder in sorted((seed / "cache" / "vectors").glob("*")):
        parts = sorted(folder.glob("part-*.parquet"))
        if not parts:
            continue
        dim = pq.read_schema(parts[0]).field("vector").type.list_size
        cache = VectorCache(folder, dim)
        have = [s for s in shas if s in cache]
        if have:
            VectorCache(root / "cache" / "vectors" / folder.name, dim).write_part(have, cache.gather(have))
            n += len(have)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="documents (SciFact has 5183)")
    ap.add_argument("--change", type=float, default=0.01, help="share of documents changed")
    ap.add_argument("--model", default=None, help="bi-encoder (default: the project default)")
    ap.add_argument("--queries", type=int, default=100, help="test queries compared")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "update.json")
    ap.add_argument("--seed-cache", type=Path, default=None,
                    help="a project whose vector cache holds the first build's texts (the first build's time is "
                         "then not that of a cold build; the update and the fresh build are unaffected)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the work folder here (src/, a/, b/ and a-before/: project a before the update, "
                         "for profiling the update again without embedding the corpus twice)")
    args = ap.parse_args()

    n_change = max(3, round(args.n * args.change))
    n_each = n_change // 3
    docs = corpus(args.n + n_each)
    held_out = len(docs) < args.n + n_each  # not enough documents left to add: hold the last ones out
    cut = len(docs) - n_each if held_out else args.n
    base, extra = docs[:cut], docs[cut:]
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").read_text().splitlines()[:args.queries]]
    if args.keep:
        if args.keep.exists():
            raise SystemExit(f"--keep {args.keep}: the folder exists; name a new one")
        args.keep.mkdir(parents=True)
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="rag-bench-update-"))
    try:
        src = work / "src"
        write(src, base)
        model = ["--model", args.model] if args.model else []
        if args.seed_cache:
            rag("chunk", src, "-p", work / "a", *model)
            seed_cache(args.seed_cache, work / "a")
        t_first, first = rag("build", src, "-p", work / "a", *model)
        time.sleep(0.01)
        edited = base[: n_each]
        deleted = base[n_each: 2 * n_each]
        for doc_id, text in edited:
            (src / f"{doc_id}.txt").write_text(text + "Update: an edited sentence about gene expression.\n",
                                               encoding="utf-8")
        for doc_id, _ in deleted:
            (src / f"{doc_id}.txt").unlink()
        write(src, extra)
        if args.keep:
            shutil.copytree(work / "a", work / "a-before")
        t_update, upd = rag("update", "-p", work / "a")
        t_build, fresh = rag("build", src, "-p", work / "b", *model)
        sparse_u, recall_u = results(work / "a", queries)
        sparse_b, recall_b = results(work / "b", queries)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = {
        "n_docs": len(base), "n_docs_changed_corpus": len(base) - n_each + len(extra),
        "added_held_out": held_out, "seeded_first_build": bool(args.seed_cache),
        "first_build_embedded": first["embed"]["n_embedded"],
        "changed": {"edited": n_each, "deleted": n_each, "added": len(extra)},
        "model": args.model or "default (multilingual-e5-small int8)", "queries": len(queries),
        "first_build_s": round(t_first, 2),
        "update": {"wall_s": round(t_update, 2), "chunk_s": round(upd["chunk"]["seconds"], 2),
                   "embed_s": round(upd["embed"]["seconds"], 2), "index_s": round(upd["index"]["seconds"], 2),
                   "counts": {k: v for k, v in upd["chunk"].items() if k not in ("skipped", "seconds")},
                   "n_embedded": upd["embed"]["n_embedded"], "vectors_added": upd["index"]["vectors_added"],
                   "vectors_deleted": upd["index"]["vectors_deleted"], "full": upd["index"]["full"]},
        "fresh_build": {"wall_s": round(t_build, 2), "chunk_s": round(fresh["chunk"]["seconds"], 2),
                        "embed_s": round(fresh["embed"]["seconds"], 2), "index_s": round(fresh["index"]["seconds"], 2),
                        "n_embedded": fresh["embed"]["n_embedded"]},
        "update_share_of_build": round(t_update / t_build, 4),
        "sparse_equal": sparse_u == sparse_b,
        "dense_recall_at_10": {"update": round(recall_u, 4), "fresh": round(recall_b, 4)},
        "cpu": cpu_info(), "python": platform.python_version(), "commit": commit,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    u, b = out["update"], out["fresh_build"]
    print(f"| | wall s | chunk s | embed s | index s | texts embedded |\n|---|---:|---:|---:|---:|---:|\n"
          f"| `rag update` ({n_change} of {len(base)} docs changed) | {u['wall_s']} | {u['chunk_s']} | {u['embed_s']} | "
          f"{u['index_s']} | {u['n_embedded']} |\n"
          f"| fresh `rag build` | {b['wall_s']} | {b['chunk_s']} | {b['embed_s']} | {b['index_s']} | {b['n_embedded']} |\n"
          f"\nupdate / build = {out['update_share_of_build']:.1%}; sparse equal: {out['sparse_equal']}; "
          f"dense recall@10 update {recall_u:.3f} vs fresh {recall_b:.3f}")
    if not out["sparse_equal"] or recall_u < recall_b - 0.02:
        raise SystemExit("the updated index differs from a fresh build")


if __name__ == "__main__":
    main()
