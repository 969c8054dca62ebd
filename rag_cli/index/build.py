"""Building the two indexes from chunks and their vectors, shared by `rag index`
(a full build) and `rag update` (a full build when the model, the dense
backend or its structure parameters changed, else an update in place)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from rag_cli.config import IndexConfig
from rag_cli.errors import BadInput
from rag_cli.index.backends import Backend, build_dense
from rag_cli.index.sparse import SparseIndex
from rag_cli.store.chunks import embedded_column, read_chunks
from rag_cli.store.embeddings import (NAMED_IDS, Embeddings, bad_vector_rows, describe_bad_vectors, off_unit_rows,
                                      read_embeddings)
from rag_cli.store.index_folder import INDEX_COLUMNS, INDEX_DOC_COLUMNS


def read_inputs(chunks_path: Path, embeddings_path: Path) -> tuple[pa.Table, np.ndarray, Embeddings]:
    """(the INDEX_COLUMNS of chunks.parquet, (n, d) float32 vectors in chunk
    order, the embeddings). Raises BadInput when there are no chunks, the
    embeddings do not cover every chunk (names the first missing chunk and
    says to run `rag embed`), or a vector is non-finite or of norm zero
    (names the chunks)."""
    chunks = read_chunks(chunks_path)
    emb = read_embeddings(embeddings_path)
    chunks = chunks.select([c for c in INDEX_COLUMNS if c in chunks.column_names])
    chunk_ids = chunks.column("chunk_id").to_pylist()
    if not chunk_ids:
        raise BadInput(f"{chunks_path} has no chunks (its documents have no text); "
                       "run `rag chunk` on documents with text")
    row_of = {cid: i for i, cid in enumerate(emb.chunk_ids)}
    missing = [cid for cid in chunk_ids if cid not in row_of]
    if missing:
        raise BadInput(f"{embeddings_path} has no vector for {len(missing)} chunk(s) of {chunks_path} "
                       f"(first: {missing[0]!r}); run `rag embed` again")
    order = np.fromiter((row_of[c] for c in chunk_ids), dtype=np.int64, count=len(chunk_ids))
    # the usual case, embeddings in chunk order, shares the array (1.5 GB at a million 384-d vectors)
    same = len(order) == len(emb.vectors) and bool((order == np.arange(len(order))).all())
    vectors = emb.vectors if same else emb.vectors[order]
    bad = bad_vector_rows(vectors)
    if bad.size:
        raise BadInput(f"{embeddings_path} has vectors that cosine search cannot use, "
                       f"{describe_bad_vectors([chunk_ids[i] for i in bad], vectors[bad])}; "
                       "no index was written: run `rag embed` again (with a model that gives finite, "
                       "non-zero vectors for these texts)")
    off = off_unit_rows(vectors) if emb.normalized else np.zeros(0, np.int64)
    if off.size:
        named = ", ".join(f"{chunk_ids[i]!r} (norm {np.linalg.norm(vectors[i].astype(np.float64)):.3g})"
                          for i in off[:NAMED_IDS])
        more = f" and {off.size - NAMED_IDS} more" if off.size > NAMED_IDS else ""
        raise BadInput(f"{embeddings_path} is damaged: {off.size} vector(s) do not have norm 1 although the model "
                       f"normalises: {named}{more}; no index was written: run `rag embed` again (it checks the "
                       "vector cache and embeds damaged vectors again)")
    return chunks, vectors, emb


def index_docs(docs_path: Path) -> pa.Table | None:
    """The INDEX_DOC_COLUMNS of docs.parquet that a generation keeps for
    `--filter`, or None when there is no docs.parquet (a project chunked by
    an earlier version without it). Raises BadInput if it is unreadable."""
    from rag_cli.store.docs import read_docs

    if not Path(docs_path).exists():
        return None
    docs = read_docs(docs_path)
    return docs.select([c for c in INDEX_DOC_COLUMNS if c in docs.column_names])


def index_texts(chunks: pa.Table) -> Iterator[str]:
    """The texts BM25 indexes, in row order: `embed_text` (text with its heading path) when present,
    else `text`; read a record batch at a time, so a million texts are never one Python list."""
    for part in chunks.column(embedded_column(chunks.column_names)).chunks:
        for start in range(0, len(part), 65536):
            yield from part.slice(start, 65536).to_pylist()


def build_full(chunks: pa.Table, vectors: np.ndarray, params: IndexConfig, threads: int = 0,
               step: Callable[[int], None] = lambda done: None) -> tuple[Backend, SparseIndex, pa.Table]:
    """A fresh dense index of `params.backend` (label = row) and BM25 index;
    returns them and `chunks` with the `label` column (int64)."""
    dense = build_dense(vectors, params, threads)
    step(2)
    sparse = SparseIndex.build(index_texts(chunks), k1=params.bm25_k1, b=params.bm25_b, method=params.bm25_method)
    step(3)
    return dense, sparse, with_labels(chunks, np.arange(chunks.num_rows, dtype=np.int64))


def with_labels(chunks: pa.Table, labels: np.ndarray) -> pa.Table:
    """`chunks` with its `label` column ((n,) int64 dense-index labels) set."""
    if "label" in chunks.column_names:
        chunks = chunks.drop_columns(["label"])
    return chunks.append_column("label", pa.array(labels, type=pa.int64()))


def index_meta(emb: Embeddings, vectors: np.ndarray, dense: Backend, sparse: SparseIndex, n_chunks: int) -> dict:
    """meta.json of an index generation (see `rag_cli.store.index_folder`); `dense` holds the
    backend (`backend`, and `index_type` for faiss) and its parameters."""
    return {
        "model_fingerprint": emb.fingerprint,
        "passage_fingerprint": emb.passage_fingerprint,
        "model_name": emb.model_name,
        "dim": int(vectors.shape[1]) if len(vectors) else emb.dim,
        "n_chunks": n_chunks,
        "dense": dense.params,
        "sparse": sparse.params,
    }


def record_index(project, params: IndexConfig, emb: Embeddings, generation: str, counts: dict,
                 seconds: float) -> None:
    """The `index` entry of manifest.json: params, the sha256 of chunks.parquet and
    embeddings.parquet it was built from, the generation written and its counts."""
    from rag_cli.hashing import sha256_file

    project.record("index", params=params.__dict__,
                   inputs={"chunks.parquet": sha256_file(project.chunks_path),
                           "embeddings.parquet": sha256_file(project.embeddings_path)},
                   outputs=[f"index/{generation}/"], rows=counts.get("n_chunks"),
                   model_fingerprint=emb.fingerprint, generation=generation, counts=counts,
                   seconds=round(seconds, 3))
