"""`rag index`: chunks + embeddings -> index/ (hnswlib dense + bm25s sparse).

The index folder is self-contained: besides the two indexes it keeps the
chunk ids, doc ids and texts it was built from (`index/chunks.parquet`) and
the embedder fingerprint (`index/meta.json`), so searching never depends on
files that may have changed since.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.parquet as pq

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.parquet_read import read_parquet, rerun
from rag_cli.index.dense import DenseIndex
from rag_cli.index.sparse import SparseIndex
from rag_cli.project import Project, sha256_file
from rag_cli.stages.embed import read_embeddings

#: Columns of chunks.parquet kept in index/chunks.parquet; `context` is the
#: text `rag ask` gives the generator for `sentence` and `parent-child` chunks.
INDEX_COLUMNS = ["chunk_id", "doc_id", "text", "embed_text", "title_path", "parent_id", "context_start",
                 "context_end", "context"]


def build_index(project: Project, params: dict, threads: int = 0) -> dict:
    """Build `index/` from `chunks.parquet` and `embeddings.parquet`.

    Raises BadInput when an input is missing or the embeddings do not cover
    every chunk (names the first missing chunk and says to run `rag embed`).
    Returns a summary dict (n_chunks, dim, seconds, fingerprint).
    """
    t0 = time.perf_counter()
    chunks = read_parquet(project.require(project.chunks_path, "chunk"), rerun("chunk"),
                          required=["chunk_id", "doc_id", "text"])
    emb = read_embeddings(project.require(project.embeddings_path, "embed"))
    cols = [c for c in INDEX_COLUMNS if c in chunks.column_names]
    chunks = chunks.select(cols)
    chunk_ids = chunks.column("chunk_id").to_pylist()
    if not chunk_ids:
        raise BadInput(f"{project.chunks_path} has no chunks (its documents have no text); "
                       "run `rag chunk` on documents with text")
    row_of = {cid: i for i, cid in enumerate(emb.chunk_ids)}
    missing = [cid for cid in chunk_ids if cid not in row_of]
    if missing:
        raise BadInput(
            f"{project.embeddings_path} has no vector for {len(missing)} chunk(s) of "
            f"{project.chunks_path} (first: {missing[0]!r}); run `rag embed` again"
        )
    vectors = emb.vectors[np.fromiter((row_of[c] for c in chunk_ids), dtype=np.int64, count=len(chunk_ids))]
    texts = chunks.column("embed_text" if "embed_text" in cols else "text").to_pylist()

    dense = DenseIndex.build(vectors, m=params["hnsw_m"], ef_construction=params["hnsw_ef_construction"],
                             ef=params["hnsw_ef"], threads=threads)
    sparse = SparseIndex.build(texts, k1=params["bm25_k1"], b=params["bm25_b"], method=params["bm25_method"])

    meta = {
        "model_fingerprint": emb.fingerprint,
        "passage_fingerprint": emb.passage_fingerprint,
        "model_name": emb.model_name,
        "dim": int(vectors.shape[1]) if len(vectors) else emb.dim,
        "n_chunks": len(chunk_ids),
        "dense": dense.params,
        "sparse": sparse.params,
    }
    with atomic.atomic_dir(project.index_dir) as tmp:
        dense.save(tmp / "dense")
        sparse.save(tmp / "sparse")
        pq.write_table(chunks, tmp / "chunks.parquet", compression="zstd")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    seconds = time.perf_counter() - t0
    project.record(
        "index",
        params=params,
        inputs={"chunks.parquet": sha256_file(project.chunks_path),
                "embeddings.parquet": sha256_file(project.embeddings_path)},
        outputs=["index/"],
        rows=len(chunk_ids),
        model_fingerprint=emb.fingerprint,
        seconds=round(seconds, 3),
    )
    return {"n_chunks": len(chunk_ids), "dim": meta["dim"], "seconds": seconds, "fingerprint": emb.fingerprint}
