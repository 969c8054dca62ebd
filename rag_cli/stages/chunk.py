"""`rag chunk`: files, folders, globs or a BEIR corpus -> docs.parquet, chunks.parquet."""

from __future__ import annotations

import time

import pyarrow.parquet as pq

from rag_cli import atomic
from rag_cli.chunking import chunk_documents, chunk_stats, chunks_table, docs_table, load_tokenizer, validate
from rag_cli.loaders import load_sources
from rag_cli.project import Project


def embedder_tokenizer(model_cfg: dict):
    """The `tokenizers.Tokenizer` of the configured bi-encoder (sizes in tokens are in its tokens)."""
    from rag_cli.models.defaults import resolve_model

    ref = resolve_model(str(model_cfg["embedder"]), precision=model_cfg["precision"])
    return load_tokenizer(ref.folder)


def chunk_sources(project: Project, sources: list[str], *, fmt: str, params: dict, model_cfg: dict) -> dict:
    """Load `sources` and chunk them with `params` (strategy, size, overlap, unit).

    Reads and chunks first, then takes the project lock and writes
    docs.parquet and chunks.parquet atomically (on error neither is changed,
    and a bad flag or source creates nothing). Raises BadInput for bad flags
    (checked before any document is read), missing sources, or no documents.
    Returns a summary: n_docs, n_chunks, n_oversized, skipped, seconds.
    """
    t0 = time.perf_counter()
    validate(params["strategy"], params["size"], params["overlap"], params["unit"], tokenizer=True)
    loaded = load_sources(sources, fmt=fmt)
    tokenizer = embedder_tokenizer(model_cfg)
    chunks = chunk_documents(loaded.documents, strategy=params["strategy"], size=params["size"],
                             overlap=params["overlap"], unit=params["unit"], tokenizer=tokenizer)
    stats = chunk_stats(chunks)
    docs_t, chunks_t = docs_table(loaded.documents), chunks_table(chunks)
    skipped = [{"path": s.path, "reason": s.reason} for s in loaded.skipped]
    with project.lock(), atomic.atomic_path(project.docs_path) as docs_tmp, \
            atomic.atomic_path(project.chunks_path) as chunks_tmp:
        pq.write_table(docs_t, docs_tmp, compression="zstd")
        pq.write_table(chunks_t, chunks_tmp, compression="zstd")
    seconds = time.perf_counter() - t0
    project.record("chunk", params=dict(params, format=fmt), inputs={"sources": list(sources)},
                   outputs=["docs.parquet", "chunks.parquet"],
                   rows={"docs": len(loaded.documents), "chunks": len(chunks)},
                   skipped=skipped, n_oversized=stats.n_oversized, seconds=round(seconds, 3))
    return {"n_docs": len(loaded.documents), "n_chunks": len(chunks), "n_oversized": stats.n_oversized,
            "max_tokens": stats.max_tokens, "skipped": skipped, "seconds": seconds}
