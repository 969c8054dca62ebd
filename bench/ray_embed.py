"""Embedding throughput on Ray against the local path, on this machine (#24).

    python bench/ray_embed.py [--docs 150] [--size 256] [--out bench/results/ray-embed.json]

The first DOCS SciFact abstracts are chunked (`rag chunk --format beir
--size SIZE`, the default model's tokens) and embedded from an empty vector
cache, in this order:

1. `local`: `rag embed` in this process, all usable cores (model.threads 0);
2. `ray-1-node`: `rag embed --ray ADDRESS` on a Ray cluster of one node with
   every usable core (`ray.cluster_utils.Cluster`, 127.0.0.1);
3. `ray-2-nodes`: the same with two nodes of half the cores each;
4. `local` again, to see how much the machine's load moved during the runs.

Each run reports the wall seconds of `Project.embed` (for Ray: connecting to
the running cluster, planning, shipping the model, starting the actors,
embedding and writing; the cluster itself is started before, and its start
is reported apart), the passages (distinct texts) per second over that
wall time and over the embedding stage's own clock (`seconds` of the
summary: from reading chunks.parquet to embeddings.parquet written), the
actors and threads used, and the smallest cosine of a row to the first
local run's vector. The machine is shared: the load average before and
after each run is recorded, and only numbers within one run are comparable.

Writes bench/results/ray-embed.json and prints a table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCIFACT = Path(os.environ.get("RAG_DATA", REPO.parent / "shared" / "data")) / "scifact"

from _common import commit, machine  # noqa: E402
from rag_cli.project import Project  # noqa: E402
from rag_cli.store.embeddings import read_embeddings  # noqa: E402

OBJECT_STORE = 300 * 1024 * 1024


def write_corpus(path: Path, n: int) -> Path:
    """The first `n` SciFact documents as a BEIR corpus.jsonl at `path`."""
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
        for i, line in enumerate(f):
            if i == n:
                break
            out.write(line)
    return path


def start_cluster(cpus: list[int]):
    """A Ray cluster on 127.0.0.1: a head node with cpus[0] CPUs and one worker node per further entry."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus[0], "object_store_memory": OBJECT_STORE,
                                                      "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    for n in cpus[1:]:
        c.add_node(num_cpus=n, object_store_memory=OBJECT_STORE, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    return c


def run(name: str, chunked: Path, work: Path, reference=None, ray: str | None = None) -> tuple[dict, object]:
    """Embed a copy of the chunked project from an empty cache: (the row of the table, its `Embeddings`)."""
    p = work / name
    if p.exists():
        shutil.rmtree(p)
    shutil.copytree(chunked, p)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    summary = Project(p).embed(ray=ray).to_dict()
    wall = time.perf_counter() - t0
    emb = read_embeddings(p / "embeddings.parquet")
    n = summary["n_texts_embedded"]
    row = {"name": name, "passages": n, "wall_s": round(wall, 2), "stage_s": round(summary["seconds"], 2),
           "passages_per_s": round(n / wall, 3), "passages_per_s_stage": round(n / summary["seconds"], 3),
           "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    if "ray" in summary:
        row.update({k: summary["ray"][k] for k in ("nodes", "actors", "threads", "retries")})
    if reference is not None:
        assert emb.chunk_ids == reference.chunk_ids and emb.fingerprint == reference.fingerprint
        cos = np.sum(emb.vectors * reference.vectors, axis=1)
        row["min_cosine_to_local"] = float(cos.min())
        row["bit_identical_to_local"] = bool(np.array_equal(emb.vectors, reference.vectors))
    shutil.rmtree(p)
    return row, emb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=150, help="SciFact documents chunked (5183 in all)")
    ap.add_argument("--size", type=int, default=256, help="chunk size in tokens")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ray-embed.json")
    args = ap.parse_args()
    # keep the nodes on 127.0.0.1: Ray otherwise replaces a loopback address by the machine's own
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    cores = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="rag-bench-ray-"))
    rows = []
    try:
        chunked = work / "chunked"
        p = Project(chunked)
        p.chunk([write_corpus(work / "corpus.jsonl", args.docs)], format="beir", size=args.size)
        row, reference = run("local", chunked, work)
        rows.append(row)
        for name, cpus in (("ray-1-node", [cores]), ("ray-2-nodes", [max(1, cores // 2)] * 2)):
            t0 = time.perf_counter()
            cluster = start_cluster(cpus)
            started = time.perf_counter() - t0
            try:
                row, _ = run(name, chunked, work, reference, ray=cluster.address)
            finally:
                if ray.is_initialized():
                    ray.shutdown()
                cluster.shutdown()
            row["cluster_start_s"] = round(started, 2)
            row["node_cpus"] = cpus
            rows.append(row)
        row, _ = run("local (again)", chunked, work, reference)
        rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    out = {"command": " ".join(["python bench/ray_embed.py", *sys.argv[1:]]), "docs": args.docs, "size": args.size,
           "machine": machine(), "commit": commit(), "ray": ray.__version__, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{'run':<14} {'passages':>8} {'wall s':>7} {'p/s':>7} {'p/s stage':>9} {'actors':>6} {'load':>9}")
    for r in rows:
        print(f"{r['name']:<14} {r['passages']:>8} {r['wall_s']:>7.1f} {r['passages_per_s']:>7.2f} "
              f"{r['passages_per_s_stage']:>9.2f} {str(r.get('actors', '-')):>6} "
              f"{r['load_before']:>4.1f}-{r['load_after']:<4.1f}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
