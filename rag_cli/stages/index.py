"""`rag index`: chunks + embeddings -> a new generation of index/ (dense: hnswlib,
faiss, exact or milvus, `rag_cli.index.backends`; sparse: bm25s, served from
the same Milvus collection for milvus).

The index generation (`rag_cli.store.index_folder`) is self-contained:
besides the two indexes it keeps the chunk columns it was built from and
the embedder fingerprint, so searching never depends on files that may have
changed since.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rag_cli.config import IndexConfig
from rag_cli.index.backends import backend_for, check_backend, serving_targets, sync_serving
from rag_cli.index.build import build_full, index_docs, index_meta, read_inputs, record_index
from rag_cli.progress import Progress
from rag_cli.store.index_folder import write_index_folder

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder


def build_index(project: "ProjectFolder", params: IndexConfig, threads: int = 0,
                progress: Progress | None = None, keep: int = 2, command: str = "index") -> dict:
    """Build a new generation of `index/` from `chunks.parquet` and
    `embeddings.parquet` and make it current, keeping `keep` older ones.

    Progress: ("indexing", steps done, 3): read, dense (params.backend), sparse (BM25).
    A milvus generation is published to its collection and the alias switched
    to it before it becomes current (`rag_cli.index.milvus_publish`).
    Raises BadInput when the backend is faiss (milvus) and faiss (pymilvus) is not installed, or Milvus
    cannot be reached, an input is missing or the embeddings do not cover
    every chunk (names the first missing chunk and says to run `rag embed`),
    or a vector is non-finite or of norm zero (names the chunks).
    Returns a summary dict (n_chunks, dim, seconds, fingerprint, generation).
    """
    t0 = time.perf_counter()
    check_backend(params)  # a missing faiss (pymilvus) is exit 2 before anything is read
    params = backend_for(params).concrete(params, project.root)
    known = serving_targets(project.index_dir)
    step = (lambda done: progress("indexing", done, 3)) if progress else (lambda done: None)
    chunks, vectors, emb = read_inputs(project.require(project.chunks_path, "chunk"),
                                       project.require(project.embeddings_path, "embed"))
    step(1)
    dense, sparse, chunks = build_full(chunks, vectors, params, threads, step)
    meta = index_meta(emb, vectors, dense, sparse, chunks.num_rows)
    counts = {"n_chunks": chunks.num_rows}
    gen = write_index_folder(project.index_dir, dense=dense, sparse=sparse, chunks=chunks, meta=meta, keep=keep,
                             command=command, counts=counts, docs=index_docs(project.docs_path),
                             publish=dense.publish)
    sync_serving(project.index_dir, known)  # pruned generations' collections go (the alias moved at the publish)
    seconds = time.perf_counter() - t0
    record_index(project, params, emb, gen.name, counts, seconds)
    return {"n_chunks": chunks.num_rows, "dim": meta["dim"], "seconds": seconds, "fingerprint": emb.fingerprint,
            "generation": gen.name}
