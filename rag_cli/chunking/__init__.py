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

from .chunk import HEADING_SEPARATOR, Chunk, make_embed_text
from .core import (HEADING_AWARE_FORMATS, ChunkStats, chunk_document, chunk_documents, chunk_stats,
                   chunk_with_parents)
from rag_cli.store.chunks import CHUNKS_SCHEMA, chunks_table  # the file formats live in rag_cli.store
from rag_cli.store.docs import DOCS_SCHEMA, docs_table
from .units import STRATEGIES, UNITS, load_tokenizer, validate

__all__ = [
    "Chunk", "ChunkStats", "chunk_document", "chunk_documents", "chunk_with_parents", "chunk_stats", "docs_table", "chunks_table",
    "DOCS_SCHEMA", "CHUNKS_SCHEMA", "STRATEGIES", "UNITS", "HEADING_AWARE_FORMATS", "HEADING_SEPARATOR",
    "make_embed_text", "load_tokenizer", "validate",
]
