"""Which int8 recipe keeps retrieval quality: SciFact dense nDCG@10 for every
pairing of document and query vectors from fp32, the default int8 recipe and
the calibrated one (`rag models quantize --calibrate`).

    python bench/int8_recipes.py [--project bench/out/scifact-recursive500-int8] [--limit N]

Reads the chunks of a SciFact project made by `bench/pipeline.py scifact
--size 500 --overlap 50` (its `embed_text` column, what `rag embed` embeds),
embeds them and the 300 test queries with each model (length-sorted batches,
the library default token budget), and searches exactly (numpy, cosine; a
document scores its best chunk; top 200 chunks per query). Prints the cosine
of each int8 recipe to fp32 (chunks and queries) and the 3 x 3 nDCG@10 table,
and writes `bench/results/int8-recipes-scifact.json`. Three full embeddings
of SciFact: about 50 minutes on 2 cores; `--limit N` takes the first N chunks
(a quick check, not comparable to the full numbers).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCIFACT = REPO.parent / "shared" / "data" / "scifact"

from rag_cli.evaluate.datasets import read_qrels, read_queries  # noqa: E402
from rag_cli.evaluate.metrics import ndcg_at_k  # noqa: E402
from rag_cli.models import e5_convert  # noqa: E402
from rag_cli.models.defaults import ensure_default_model  # noqa: E402
from rag_cli.models.encoder import BiEncoder  # noqa: E402
from rag_cli.models.folder import ModelFolder  # noqa: E402


def ndcg10(queries: np.ndarray, chunks: np.ndarray, doc_ids: np.ndarray, qids: list[str], qrels) -> float:
    """Mean nDCG@10 of exact cosine search; (q, d) and (n, d) float32 unit vectors."""
    scores = queries @ chunks.T
    run = {}
    for qi, qid in enumerate(qids):
        docs: dict[str, float] = {}
        for j in np.argsort(-scores[qi])[:200]:
            docs.setdefault(str(doc_ids[j]), float(scores[qi, j]))
        run[qid] = docs
    return float(np.mean(list(ndcg_at_k(run, qrels, 10).values())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", type=Path, default=REPO / "bench" / "out" / "scifact-recursive500-int8")
    ap.add_argument("--limit", type=int, default=0, help="first N chunks only (quick check)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "int8-recipes-scifact.json")
    args = ap.parse_args()

    chunks = pq.read_table(args.project / "chunks.parquet", columns=["doc_id", "embed_text"]).to_pydict()
    texts, doc_ids = chunks["embed_text"], np.array(chunks["doc_id"])
    if args.limit:
        texts, doc_ids = texts[: args.limit], doc_ids[: args.limit]
    qrels = read_qrels(SCIFACT / "qrels" / "test.tsv")
    queries = [(qid, text) for qid, text in read_queries(SCIFACT / "queries.jsonl") if qid in qrels]
    qids = [qid for qid, _ in queries]

    folder = ensure_default_model()
    with tempfile.TemporaryDirectory() as tmp:
        calibrated = Path(tmp) / "model.onnx"
        e5_convert.quantize_int8(folder / e5_convert.ONNX_FP32, calibrated, folder / "tokenizer.json")
        models = {"fp32": folder / e5_convert.ONNX_FP32, "int8": folder / e5_convert.ONNX_INT8,
                  "int8-calibrated": calibrated}
        vecs = {}
        for name, onnx_file in models.items():
            enc = BiEncoder(ModelFolder.load(folder, onnx_file=onnx_file))
            t = time.perf_counter()
            vecs[name] = (enc.encode_passages(texts), enc.encode_queries([q for _, q in queries]))
            print(f"{name}: {len(texts)} chunks in {time.perf_counter() - t:.0f} s", flush=True)

    res: dict = {"project": str(args.project), "chunks": len(texts), "queries": len(qids), "cosine_to_fp32": {},
                 "ndcg@10": {}}
    for name in ("int8", "int8-calibrated"):
        c_docs = (vecs[name][0] * vecs["fp32"][0]).sum(1)
        c_q = (vecs[name][1] * vecs["fp32"][1]).sum(1)
        res["cosine_to_fp32"][name] = {"chunks_mean": float(c_docs.mean()), "chunks_min": float(c_docs.min()),
                                       "queries_mean": float(c_q.mean()), "queries_min": float(c_q.min())}
        print(f"{name} vs fp32 cosine: chunks {c_docs.mean():.5f} (min {c_docs.min():.5f}), "
              f"queries {c_q.mean():.5f} (min {c_q.min():.5f})")
    header = "docs / queries"
    print(f"\nnDCG@10 {header:>18s} " + " ".join(f"{q:>16s}" for q in vecs))
    for d in vecs:
        row = {q: ndcg10(vecs[q][1], vecs[d][0], doc_ids, qids, qrels) for q in vecs}
        res["ndcg@10"][d] = row
        print(f"{d + ' docs':>26s} " + " ".join(f"{row[q]:16.4f}" for q in vecs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
