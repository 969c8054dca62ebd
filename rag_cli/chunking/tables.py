"""Arrow tables with the contract columns (see DESIGN.md)."""

from __future__ import annotations

import json

import pyarrow as pa

__all__ = ["DOCS_SCHEMA", "CHUNKS_SCHEMA", "docs_table", "chunks_table"]

DOCS_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("path", pa.string()), ("sha256", pa.string()), ("mtime", pa.float64()),
    ("n_chars", pa.int64()), ("title", pa.string()), ("metadata", pa.string()),
])

CHUNKS_SCHEMA = pa.schema([
    ("chunk_id", pa.string()), ("doc_id", pa.string()), ("ordinal", pa.int32()), ("text", pa.string()),
    ("title_path", pa.list_(pa.string())), ("start_char", pa.int64()), ("end_char", pa.int64()),
    ("n_tokens", pa.int32()), ("parent_id", pa.string()), ("sha256", pa.string()), ("embed_text", pa.string()),
])

#: Appended to CHUNKS_SCHEMA when a chunk has a context (`sentence`, `parent-child`).
CONTEXT_FIELDS = [("context_start", pa.int64()), ("context_end", pa.int64()), ("context", pa.string())]


def docs_table(docs, *, include_text: bool = False) -> pa.Table:
    """One row per `Document`: doc_id, path, sha256, mtime (float64 seconds),
    n_chars (int64), title, metadata (JSON object string, sorted keys, non-ASCII
    kept). `include_text=True` appends the normalised `text` column.
    Row order = input order; same input → identical table."""
    docs = list(docs)
    cols = {
        "doc_id": [d.doc_id for d in docs],
        "path": [d.path for d in docs],
        "sha256": [d.sha256 for d in docs],
        "mtime": [float(d.mtime) for d in docs],
        "n_chars": [d.n_chars for d in docs],
        "title": [d.title for d in docs],
        "metadata": [json.dumps(d.metadata, ensure_ascii=False, sort_keys=True, default=str) for d in docs],
    }
    schema = DOCS_SCHEMA
    if include_text:
        cols["text"] = [d.text for d in docs]
        schema = schema.append(pa.field("text", pa.string()))
    return pa.table(cols, schema=schema)


def chunks_table(chunks) -> pa.Table:
    """One row per `Chunk`: chunk_id, doc_id, ordinal (int32), text,
    title_path (list<string>), start_char, end_char (int64, character offsets
    in the normalised document text), n_tokens (int32, null without a
    tokenizer), parent_id (string, null unless `parent-child`), sha256,
    embed_text; when any chunk has a context (`sentence`, `parent-child`) also
    context_start, context_end (int64) and context (string): the span and
    text `rag ask` gives the generator. Parents (`parent-child`) use the same
    columns.
    Row order = input order; same input → identical table."""
    chunks = list(chunks)
    cols = {
        "chunk_id": [c.chunk_id for c in chunks],
        "doc_id": [c.doc_id for c in chunks],
        "ordinal": [c.ordinal for c in chunks],
        "text": [c.text for c in chunks],
        "title_path": [list(c.title_path) for c in chunks],
        "start_char": [c.start_char for c in chunks],
        "end_char": [c.end_char for c in chunks],
        "n_tokens": [c.n_tokens for c in chunks],
        "parent_id": [c.parent_id for c in chunks],
        "sha256": [c.sha256 for c in chunks],
        "embed_text": [c.embed_text for c in chunks],
    }
    schema = CHUNKS_SCHEMA
    if any(c.context is not None for c in chunks):
        for name, type_ in CONTEXT_FIELDS:
            cols[name] = [getattr(c, name) for c in chunks]
            schema = schema.append(pa.field(name, type_))
    return pa.table(cols, schema=schema)
