"""Chunking: strategies (`recursive`, `fixed`, `markdown`, `code`,
`sentence`, `parent-child`, `semantic`), the `Chunk` record and Arrow
conversion.

Public API::

    chunk_documents(docs, *, strategy="recursive", size=256, overlap=32,
                    unit="tokens", tokenizer=None, context_sentences=2,
                    parent_size=512, breakpoint_percentile=95.0,
                    embed=None) -> list[Chunk]
    chunk_with_parents(docs, ...) -> (chunks, parents)  # parents: parent-child
    chunk_document(doc, ...) -> list[Chunk]
    chunk_stats(chunks) -> ChunkStats          # n_oversized etc. for reports
    docs_table, chunks_table                   # re-exported from rag_cli.store.docs / .chunks
"""

import importlib

#: Public name -> the module that defines it, imported on first use (PEP 562), so that
#: `rag_cli.chunking.units` (which opening a project's config needs) does not import every
#: strategy (docs/startup.md).
_WHERE = {
    "HEADING_SEPARATOR": ".chunk", "Chunk": ".chunk", "make_embed_text": ".chunk",
    "HEADING_AWARE_FORMATS": ".core", "ChunkStats": ".core", "chunk_document": ".core", "chunk_documents": ".core",
    "chunk_stats": ".core", "chunk_with_parents": ".core",
    # the file formats live in rag_cli.store
    "CHUNKS_SCHEMA": "rag_cli.store.chunks", "chunks_table": "rag_cli.store.chunks",
    "DOCS_SCHEMA": "rag_cli.store.docs", "docs_table": "rag_cli.store.docs",
    "STRATEGIES": ".units", "UNITS": ".units", "load_tokenizer": ".units", "validate": ".units",
}


def __getattr__(name: str):
    if name in _WHERE:
        where = _WHERE[name]
        value = getattr(importlib.import_module(__name__ + where if where.startswith(".") else where), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "Chunk", "ChunkStats", "chunk_document", "chunk_documents", "chunk_with_parents", "chunk_stats", "docs_table", "chunks_table",
    "DOCS_SCHEMA", "CHUNKS_SCHEMA", "STRATEGIES", "UNITS", "HEADING_AWARE_FORMATS", "HEADING_SEPARATOR",
    "make_embed_text", "load_tokenizer", "validate",
]
