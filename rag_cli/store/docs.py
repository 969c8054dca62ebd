"""docs.parquet: one row per source document (see docs/layout.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

DOCS_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("path", pa.string()), ("sha256", pa.string()), ("mtime", pa.float64()),
    ("n_chars", pa.int64()), ("title", pa.string()), ("metadata", pa.string()),
])


def docs_table(docs, *, include_text: bool = False) -> pa.Table:
    """One row per `Document`: doc_id, path (absolute: `rag status` and
    `rag update` compare it with the files on disk from any working
    folder), sha256, mtime (float64 seconds),
    n_chars (int64), title, metadata (JSON object string, sorted keys, non-ASCII
    kept). `include_text=True` appends the normalised `text` column.
    Row order = input order; same input → identical table."""
    docs = list(docs)
    cols = {
        "doc_id": [d.doc_id for d in docs],
        "path": [os.path.abspath(d.path) for d in docs],
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


def read_docs(path: str | Path) -> pa.Table:
    """Read docs.parquet. Raises BadInput (naming the file) if it is unreadable or lacks doc_id/path."""
    from rag_cli.store.parquet import read_parquet, rerun

    return read_parquet(path, rerun("chunk"), required=["doc_id", "path"])
