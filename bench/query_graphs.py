"""CPU per query of each graph of the default embedder, one query at a time on one thread: what a
warm `rag serve` pays per dense or hybrid request before it searches (docs/serve.md).

    python bench/query_graphs.py                 # 300 SciFact test queries, 3 rounds
    python bench/query_graphs.py --queries 100 --rounds 2 --out /tmp/q.json

The graphs (docs/models.md), each through rag-cli's own `BiEncoder` (its tokenizer, its
prefix, its pooling), built with one onnxruntime thread as the server builds it:
- `query graph` (the default for queries, `model_int8_query.onnx`): fp32 compute, int8
  embedding tables;
- `int8 graph` (`model_int8.onnx`, what passages are embedded with), given the query prefix;
- `fp32` (`model.onnx`, `--precision fp32`).

The rounds take the graphs in turn (query, int8, fp32, query, ...) so that a change in the
machine's load falls on all of them. CPU time is `time.process_time` of this process around
`encode_queries` / `encode` of one query; the cosine of each graph's vector to fp32's is
reported too. Writes bench/results/query-graphs.json (machine(), commit, load average).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import commit, machine  # noqa: E402

DATA = HERE.parent.parent / "shared" / "data" / "scifact" / "queries.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "query-graphs.json")
    args = ap.parse_args()

    from rag_cli.config import Config
    from rag_cli.index.searcher import prepare_query
    from rag_cli.models.loading import load_embedder

    texts = [prepare_query(json.loads(line)["text"]) for line in DATA.read_text(encoding="utf-8").splitlines()
             if line.strip()][:args.queries]
    model = replace(Config().model, threads=1)
    int8 = load_embedder(asdict(model))
    fp32 = load_embedder(asdict(replace(model, precision="fp32")))
    int8.query_encoder.tokenizer.load_full()  # as the server does: the full tokenizer for hours of queries
    prefix = int8.folder.query_prefix
    graphs = {
        "query graph": lambda t: int8.encode_queries([t]),
        "int8 graph": lambda t: int8.encode([t], prefix),
        "fp32": lambda t: fp32.encode_queries([t]),
    }
    for encode in graphs.values():  # load each graph, untimed
        encode(texts[0])
    n_tokens = int8.query_encoder.tokenizer.count(texts, prefix)
    load_before = machine()["load_average"]
    cpu = {name: [] for name in graphs}
    vectors = {}
    for _ in range(args.rounds):
        for name, encode in graphs.items():
            out, t0 = [], time.process_time()
            for t in texts:
                out.append(encode(t)[0])
            cpu[name].append((time.process_time() - t0) / len(texts) * 1000)
            vectors[name] = np.stack(out)
    ref = vectors["fp32"]
    res = {"command": "python bench/query_graphs.py " + " ".join(sys.argv[1:]), "commit": commit(),
           "machine": machine(), "load_before": load_before, "queries": len(texts),
           "mean_tokens": round(float(np.mean(n_tokens)), 1), "rounds": args.rounds, "threads": 1,
           "graphs": {}}
    for name in graphs:
        cos = np.einsum("ij,ij->i", vectors[name], ref)
        res["graphs"][name] = {"cpu_ms_per_query": round(float(np.median(cpu[name])), 2),
                               "cpu_ms_per_round": [round(x, 2) for x in cpu[name]],
                               "cosine_to_fp32_mean": round(float(cos.mean()), 5),
                               "cosine_to_fp32_min": round(float(cos.min()), 5)}
        print(f"{name:12s} {res['graphs'][name]['cpu_ms_per_query']:7.2f} ms CPU / query   "
              f"cosine to fp32 mean {cos.mean():.5f} min {cos.min():.5f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
