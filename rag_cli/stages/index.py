"""`rag index`: chunks + embeddings -> index/ (hnswlib dense + bm25s sparse).

The index folder (`rag_cli.store.index_folder`) is self-contained: besides
the two indexes it keeps the chunk columns it was built from and the
embedder fingerprint, so searching never depends on files that may have
changed since.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from rag_cli.config import IndexConfig
from rag_cli.errors import BadInput
from rag_cli.hashing import sha256_file
from rag_cli.index.dense import DenseIndex
from rag_cli.index.sparse import SparseIndex
from rag_cli.progress import Progress
from rag_cli.store.chunks import read_chunks
from rag_cli.store.embeddings import bad_vector_rows, describe_bad_vectors, read_embeddings
from rag_cli.store.index_folder import INDEX_COLUMNS, write_index_folder

if TYPE_CHECKING:
    from rag_cli.project import Project


def build_index(project: "Project", params: IndexConfig, threads: int = 0,
                progress: Progress | None = None) -> dict:
    """Build `index/` from `chunks.parquet` and `embeddings.parquet`.

    Progress: ("indexing", steps done, 3): read, dense (HNSW), sparse (BM25).
    Raises BadInput when an input is missing, the embeddings do not cover
    every chunk (names the first missing chunk and says to run `rag embed`),
    or a vector is non-finite or of norm zero (names the chunks).
    Returns a summary dict (n_chunks, dim, seconds, fingerprint).
    """
    t0 = time.perf_counter()
    step = (lambda done: progress("indexing", done, 3)) if progress else (lambda done: None)
    chunks = read_chunks(project.require(project.chunks_path, "chunk"))
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
    bad = bad_vector_rows(vectors)
    if bad.size:
        raise BadInput(f"{project.embeddings_path} has vectors that cosine search cannot use, "
                       f"{describe_bad_vectors([chunk_ids[i] for i in bad], vectors[bad])}; "
                       "no index was written: run `rag embed` again (with a model that gives finite, "
                       "non-zero vectors for these texts)")
    texts = chunks.column("embed_text" if "embed_text" in cols else "text").to_pylist()
    step(1)
    dense = DenseIndex.build(vectors, m=params.hnsw_m, ef_construction=params.hnsw_ef_construction,
                             ef=params.hnsw_ef, threads=threads)
    step(2)
    sparse = SparseIndex.build(texts, k1=params.bm25_k1, b=params.bm25_b, method=params.bm25_method)
    step(3)
    meta = {
        "model_fingerprint": emb.fingerprint,
        "passage_fingerprint": emb.passage_fingerprint,
        "model_name": emb.model_name,
        "dim": int(vectors.shape[1]) if len(vectors) else emb.dim,
        "n_chunks": len(chunk_ids),
        "dense": dense.params,
        "sparse": sparse.params,
    }
    write_index_folder(project.index_dir, dense=dense, sparse=sparse, chunks=chunks, meta=meta)
    seconds = time.perf_counter() - t0
    project.record(
        "index",
        params=params.__dict__,
        inputs={"chunks.parquet": sha256_file(project.chunks_path),
                "embeddings.parquet": sha256_file(project.embeddings_path)},
        outputs=["index/"],
        rows=len(chunk_ids),
        model_fingerprint=emb.fingerprint,
        seconds=round(seconds, 3),
    )
    return {"n_chunks": len(chunk_ids), "dim": meta["dim"], "seconds": seconds, "fingerprint": emb.fingerprint}
