"""`rag chunk`: files, folders, globs or a BEIR corpus -> docs.parquet, chunks.parquet
(and parents.parquet for `parent-child`)."""

from __future__ import annotations

import contextlib
import time

import pyarrow.parquet as pq

from rag_cli import atomic
from rag_cli.chunking import chunk_stats, chunk_with_parents, chunks_table, docs_table, load_tokenizer, validate
from rag_cli.loaders import load_sources
from rag_cli.project import Project


def embedder_tokenizer(model_cfg: dict):
    """The `tokenizers.Tokenizer` of the configured bi-encoder (sizes in tokens are in its tokens)."""
    from rag_cli.models.defaults import resolve_model

    ref = resolve_model(str(model_cfg["embedder"]), precision=model_cfg["precision"])
    return load_tokenizer(ref.folder)


def chunk_sources(project: Project, sources: list[str], *, fmt: str, params: dict, model_cfg: dict) -> dict:
    """Load `sources` and chunk them with `params` (the `[chunk]` config:
    strategy, size, overlap, unit, context_sentences, parent_size,
    breakpoint_percentile).

    Reads and chunks first, then takes the project lock and writes
    docs.parquet and chunks.parquet atomically (on error neither is changed,
    and a bad flag or source creates nothing). `parent-child` also writes
    parents.parquet (the parent chunks, same columns); any other strategy
    removes a parents.parquet left by an earlier run. `semantic` loads the
    configured bi-encoder to embed sentences. Raises BadInput for bad flags
    (checked before any document is read), missing sources, or no documents.
    Returns a summary: n_docs, n_chunks, n_parents, n_oversized, skipped, seconds.
    """
    t0 = time.perf_counter()
    options = {k: params[k] for k in ("context_sentences", "parent_size", "breakpoint_percentile")}
    validate(params["strategy"], params["size"], params["overlap"], params["unit"], tokenizer=True, **options)
    loaded = load_sources(sources, fmt=fmt)
    tokenizer = embedder_tokenizer(model_cfg)
    if params["strategy"] == "semantic":
        from rag_cli.stages.models import load_embedder

        options["embed"] = load_embedder(model_cfg).encode_passages
    chunks, parents = chunk_with_parents(loaded.documents, strategy=params["strategy"], size=params["size"],
                                         overlap=params["overlap"], unit=params["unit"], tokenizer=tokenizer,
                                         **options)
    stats = chunk_stats(chunks)
    docs_t, chunks_t = docs_table(loaded.documents), chunks_table(chunks)
    skipped = [{"path": s.path, "reason": s.reason} for s in loaded.skipped]
    outputs = ["docs.parquet", "chunks.parquet"]
    tables = {project.docs_path: docs_t, project.chunks_path: chunks_t}
    if params["strategy"] == "parent-child":
        tables[project.parents_path] = chunks_table(parents)
        outputs.append("parents.parquet")
    with project.lock(), contextlib.ExitStack() as stack:
        for path, table in tables.items():  # all renamed into place together, at the end
            pq.write_table(table, stack.enter_context(atomic.atomic_path(path)), compression="zstd")
        if project.parents_path not in tables:
            project.parents_path.unlink(missing_ok=True)
    seconds = time.perf_counter() - t0
    project.record("chunk", params=dict(params, format=fmt), inputs={"sources": list(sources)},
                   outputs=outputs, rows={"docs": len(loaded.documents), "chunks": len(chunks),
                                          "parents": len(parents)},
                   skipped=skipped, n_oversized=stats.n_oversized, seconds=round(seconds, 3))
    return {"n_docs": len(loaded.documents), "n_chunks": len(chunks), "n_parents": len(parents),
            "n_oversized": stats.n_oversized, "max_tokens": stats.max_tokens, "skipped": skipped,
            "seconds": seconds}
