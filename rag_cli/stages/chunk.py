"""`rag chunk`: files, folders, globs or a BEIR corpus -> docs.parquet, chunks.parquet
(and parents.parquet for `parent-child`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rag_cli.chunking import chunk_stats, chunk_with_parents, validate
from rag_cli.config import ChunkConfig, ModelConfig
from rag_cli.loaders import load_sources
from rag_cli.progress import Progress
from rag_cli.store.chunks import chunks_table, write_tables
from rag_cli.store.docs import docs_table

if TYPE_CHECKING:
    from rag_cli.project import Project


def chunk_sources(project: "Project", sources: list[str], *, fmt: str, params: ChunkConfig, model: ModelConfig,
                  progress: Progress | None = None, encoding: str | None = None) -> dict:
    """Load `sources` (text files in `encoding`, None = detected) and chunk
    them with `params` (the `[chunk]` config).

    Reads and chunks first, then writes docs.parquet and chunks.parquet
    atomically (on error neither is changed). `parent-child` also writes
    parents.parquet (the parent chunks, same columns); any other strategy
    removes a parents.parquet left by an earlier run. Sizes in tokens load
    the configured bi-encoder's tokenizer (no ONNX session); sizes in chars
    load nothing, and `n_tokens` is then null. `semantic` loads the
    bi-encoder to embed sentences. Progress: ("chunking", documents done, documents).

    Raises BadInput for bad flags (checked before any document is read),
    missing sources, or no documents.
    Returns a summary: n_docs, n_chunks, n_parents, n_oversized, max_tokens, skipped, seconds,
    warnings (list of str: files whose encoding was a guess; a size in tokens
    above what the embedder embeds whole).
    """
    from rag_cli.models.loading import embedder_token_room, load_embedder, load_embedder_tokenizer

    t0 = time.perf_counter()
    options = {"context_sentences": params.context_sentences, "parent_size": params.parent_size,
               "breakpoint_percentile": params.breakpoint_percentile}
    validate(params.strategy, params.size, params.overlap, params.unit, tokenizer=True, **options)
    loaded = load_sources(sources, fmt=fmt, encoding=encoding)
    tokenizer = load_embedder_tokenizer(model.__dict__) if params.unit == "tokens" else None
    warnings = list(loaded.warnings)
    room = embedder_token_room(model.__dict__) if params.unit == "tokens" else None
    if room is not None and params.size > room[1]:  # chunks are embedded, parents are not
        warnings.append(f"--size {params.size} tokens is more than the embedder {model.embedder} embeds whole: its "
                        f"max_length is {room[0]} tokens, {room[0] - room[1]} of them taken by its prefix and "
                        f"special tokens, so `rag embed` will cut chunks longer than {room[1]} tokens; use "
                        f"--size {room[1]} or less")
    if params.strategy == "semantic":
        options["embed"] = load_embedder(model.__dict__).encode_passages
    docs = loaded.documents
    chunks, parents = chunk_with_parents(
        docs, strategy=params.strategy, size=params.size, overlap=params.overlap, unit=params.unit,
        tokenizer=tokenizer, progress=(lambda done, n: progress("chunking", done, n)) if progress else None,
        **options)
    stats = chunk_stats(chunks)
    skipped = [{"path": s.path, "reason": s.reason} for s in loaded.skipped]
    tables = {project.docs_path: docs_table(docs), project.chunks_path: chunks_table(chunks)}
    if params.strategy == "parent-child":
        tables[project.parents_path] = chunks_table(parents)
    write_tables(tables, remove=[] if params.strategy == "parent-child" else [project.parents_path])
    seconds = time.perf_counter() - t0
    project.record("chunk", params=dict(params.__dict__, format=fmt, encoding=encoding), inputs={"sources": list(sources)},
                   outputs=[p.name for p in tables], rows={"docs": len(docs), "chunks": len(chunks),
                                                           "parents": len(parents)},
                   skipped=skipped, n_oversized=stats.n_oversized, seconds=round(seconds, 3))
    return {"n_docs": len(docs), "n_chunks": len(chunks), "n_parents": len(parents),
            "n_oversized": stats.n_oversized, "max_tokens": stats.max_tokens, "skipped": skipped,
            "seconds": seconds, "warnings": warnings}
