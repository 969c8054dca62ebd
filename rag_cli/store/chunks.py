"""chunks.parquet (and parents.parquet for `parent-child`): one row per chunk
(see docs/layout.md)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pyarrow as pa

CHUNKS_SCHEMA = pa.schema([
    ("chunk_id", pa.string()), ("doc_id", pa.string()), ("ordinal", pa.int32()), ("text", pa.string()),
    ("title_path", pa.list_(pa.string())), ("start_char", pa.int64()), ("end_char", pa.int64()),
    ("n_tokens", pa.int32()), ("parent_id", pa.string()), ("sha256", pa.string()), ("embed_text", pa.string()),
])

#: Appended to CHUNKS_SCHEMA when a chunk has a context (`sentence`, `parent-child`).
CONTEXT_FIELDS = [("context_start", pa.int64()), ("context_end", pa.int64()), ("context", pa.string())]


def chunks_schema(with_context: bool) -> pa.Schema:
    """CHUNKS_SCHEMA, plus CONTEXT_FIELDS when `with_context`."""
    schema = CHUNKS_SCHEMA
    for name, type_ in CONTEXT_FIELDS if with_context else ():
        schema = schema.append(pa.field(name, type_))
    return schema


def chunks_table(chunks, with_context: bool | None = None) -> pa.Table:
    """One row per `Chunk`: chunk_id, doc_id, ordinal (int32), text,
    title_path (list<string>), start_char, end_char (int64, character offsets
    in the normalised document text), n_tokens (int32, null without a
    tokenizer), parent_id (string, null unless `parent-child`), sha256,
    embed_text; when any chunk has a context (`sentence`, `parent-child`) also
    context_start, context_end (int64) and context (string): the span and
    text `rag ask` gives the generator. Parents (`parent-child`) use the same
    columns. `with_context` True/False forces the context columns in or out
    (a writer that streams windows of chunks keeps one schema).
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
    if with_context is None:
        with_context = any(c.context is not None for c in chunks)
    if with_context:
        for name, _type in CONTEXT_FIELDS:
            cols[name] = [getattr(c, name) for c in chunks]
    return pa.table(cols, schema=chunks_schema(with_context))


def write_tables(tables: dict[Path, pa.Table], remove: Sequence[Path] = ()) -> None:
    """Write several Parquet tables (docs, chunks, parents) so that all are
    renamed into place together at the end, and remove the files `remove`
    (a parents.parquet left by another strategy); on error none changes."""
    import pyarrow.parquet as pq

    from rag_cli import atomic

    need = sum(t.nbytes for t in tables.values())  # uncompressed: at most what the files take
    with contextlib.ExitStack() as stack:
        for path, table in tables.items():
            pq.write_table(table, stack.enter_context(atomic.atomic_path(path, need=need)), compression="zstd")
        for path in remove:
            Path(path).unlink(missing_ok=True)


@contextlib.contextmanager
def table_writers(schemas: dict[Path, pa.Schema],
                  remove: Sequence[Path] = ()) -> Iterator[dict[Path, Callable[[pa.Table], None]]]:
    """Stream several Parquet files (docs, chunks, parents) at once: yields
    {path: write(table)}; each `write` appends the table as one or more row
    groups (zstd) to a temporary file. When the block ends without an error
    every file is renamed into place together and the files `remove` are
    removed; on error none changes. A file given no rows holds its schema
    and no row group. A file written in one `write` call is byte for byte
    what `write_tables` writes for that table."""
    import pyarrow.parquet as pq

    from rag_cli import atomic

    with contextlib.ExitStack() as stack:
        writers = {}
        for path, schema in schemas.items():
            tmp = stack.enter_context(atomic.atomic_path(path))
            writers[path] = stack.enter_context(pq.ParquetWriter(tmp, schema, compression="zstd"))
        yield {path: w.write_table for path, w in writers.items()}
        for w in writers.values():
            w.close()
        for path in remove:
            Path(path).unlink(missing_ok=True)


def read_chunks(path: str | Path, columns: Sequence[str] | None = None,
                required: Sequence[str] = ("chunk_id", "doc_id", "text")) -> pa.Table:
    """Read chunks.parquet (or only `columns`). Raises BadInput naming the
    file if it is unreadable or lacks a `required` column."""
    from rag_cli.store.parquet import read_parquet, rerun

    return read_parquet(path, rerun("chunk"), columns=columns, required=required)


def embedded_column(names: list[str]) -> str:
    """Of a chunk table's column `names`, the one whose text is embedded (and
    BM25-indexed and reranked): `embed_text` when present, else `text`."""
    return "embed_text" if "embed_text" in names else "text"


def shown_text(text: str, embed_text: str | None, title_path: list[str] | None) -> str:
    """The text of a chunk as search and ask show it: `text`, with the
    header and delimiter lines of the Markdown table it starts inside in
    front (what `embed_text` holds between the heading path and `text`, see
    `rag_cli.chunking.tables`), so a hit on a later part of a split table
    still shows its column names; else `text`. `text` itself stays the exact
    span of the document."""
    from rag_cli.chunking.chunk import HEADING_SEPARATOR

    if not embed_text:
        return text
    rest = embed_text[len(HEADING_SEPARATOR.join(title_path)) + 1 if title_path else 0:]
    return rest if len(rest) > len(text) + 1 and rest.endswith("\n" + text) else text


def embed_text_column(path: str | Path) -> str:
    """The column whose text is embedded: `embed_text` (the text with its
    heading path) when the file has it, else `text`. Raises BadInput as
    `read_chunks` for an unreadable file or one without chunk_id/text."""
    from rag_cli.store.parquet import open_parquet, rerun

    with open_parquet(path, rerun("chunk"), required=["chunk_id", "text"]) as pf:
        names = pf.schema_arrow.names
    return embedded_column(names)


def iter_chunk_batches(path: str | Path, columns: Sequence[str], window: int) -> Iterator[pa.RecordBatch]:
    """Record batches of at most `window` rows of `columns` of chunks.parquet."""
    from rag_cli.store.parquet import iter_parquet_batches, rerun

    yield from iter_parquet_batches(path, rerun("chunk"), columns, window)
