"""`rag chunk`: files, folders, globs or a BEIR corpus -> docs.parquet, chunks.parquet
(and parents.parquet for `parent-child`)."""

from __future__ import annotations

import collections
import itertools
import time
from typing import TYPE_CHECKING, Callable, Iterator

from rag_cli.chunking.core import iter_chunks
from rag_cli.chunking.setup import check_chunk_options, chunk_options, chunk_settings
from rag_cli.config import ChunkConfig, ModelConfig
from rag_cli.loaders.document import Document, Skipped
from rag_cli.loaders.sources import encoding_warning, iter_sources, no_documents, without_chunks
from rag_cli.progress import Progress
from rag_cli.store.chunks import chunks_schema, chunks_table, table_writers
from rag_cli.store.docs import DOCS_SCHEMA, docs_table

#: Chunk rows (and document rows) buffered before they are written as a row
#: group: a corpus with at most this many chunks gets one row group, and the
#: same bytes as a file written in one piece.
ROW_GROUP = 65536
#: ... unless the buffered texts pass this many characters first.
ROW_GROUP_CHARS = 8 << 20

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder


def chunk_sources(project: "ProjectFolder", sources: list[str], *, fmt: str, params: ChunkConfig, model: ModelConfig,
                  progress: Progress | None = None, encoding: str | None = None) -> dict:
    """Load `sources` (text files in `encoding`, None = detected) and chunk
    them with `params` (the `[chunk]` config).

    Streams: documents are chunked one at a time (tokenized `DOC_BATCH` at a
    time) and the chunks written to chunks.parquet by a ParquetWriter, a row
    group per `ROW_GROUP` rows (or `ROW_GROUP_CHARS` characters of chunk
    text), so memory does not grow with the number of chunks; the files are
    renamed into place together at the end (on error none is changed). `parent-child` also writes
    parents.parquet (the parent chunks, same columns); any other strategy
    removes a parents.parquet left by an earlier run. Sizes in tokens load
    the configured bi-encoder's tokenizer (no ONNX session); sizes in chars
    load nothing, and `n_tokens` is then null. `semantic` loads the
    bi-encoder to embed sentences. Progress: ("chunking", documents done, documents).

    A document that gives no chunk (a Markdown file of headings only, a BEIR
    record of a title only) is not kept: it is listed in `skipped` with the
    reason (`without_chunks`), as an empty file is.

    Raises BadInput for bad flags (checked before any document is read),
    missing sources, or no documents (naming each skipped file).
    Returns a summary: n_docs, n_chunks, n_parents, n_oversized, max_tokens, skipped, seconds,
    warnings (list of str: files whose encoding was a guess; a size in tokens
    above what the embedder embeds whole).
    """
    from rag_cli.models.loading import embedder_token_room

    t0 = time.perf_counter()
    scanned = time.time()  # when the sources were first read (`rag update` reads files modified near it again)
    # a missing source fails before the tokenizer loads; the project folder inside a source is not a source
    items = iter_sources(sources, fmt=fmt, encoding=encoding, exclude=[project.root])
    check_chunk_options(params)  # checks the settings before any document is read
    warnings: list[str] = []
    skipped: list[Skipped] = []
    parent_child = params.strategy == "parent-child"
    with_context = params.strategy in ("sentence", "parent-child")  # every chunk then has a context
    schemas = {project.docs_path: DOCS_SCHEMA, project.chunks_path: chunks_schema(with_context)}
    if parent_child:
        schemas[project.parents_path] = chunks_schema(False)
    with table_writers(schemas, remove=[] if parent_child else [project.parents_path]) as write:
        docs = _Rows(write[project.docs_path], docs_table, "n_chars")
        chunks = _Rows(write[project.chunks_path], lambda rows: chunks_table(rows, with_context=with_context))
        parents = _Rows(write.get(project.parents_path), lambda rows: chunks_table(rows, with_context=False))

        pending: collections.deque[Document] = collections.deque()  # read, not chunked yet (in order)

        def documents() -> Iterator[Document]:
            for item in items:
                if isinstance(item, Skipped):
                    skipped.append(item)
                    continue
                warnings.extend(w for w in [encoding_warning(item)] if w)
                pending.append(item)
                yield item

        found = documents()
        first = next(found, None)  # the model (tokenizer) loads once there is a document to chunk
        if first is None:
            raise no_documents(sources, skipped)
        options = chunk_options(params, model)
        room = embedder_token_room(model.__dict__) if params.unit == "tokens" else None
        if room is not None and params.size > room[1]:  # chunks are embedded, parents are not
            warnings.insert(0, f"--size {params.size} tokens is more than the embedder {model.embedder} embeds whole: "
                            f"its max_length is {room[0]} tokens, {room[0] - room[1]} of them taken by its prefix "
                            f"and special tokens, so `rag embed` will cut chunks longer than {room[1]} tokens; use "
                            f"--size {room[1]} or less")
        chunks_iter = iter_chunks(itertools.chain([first], found),
                                  progress=(lambda done, n: progress("chunking", done, n)) if progress else None,
                                  **options)
        n_oversized, max_tokens = 0, None
        for doc_chunks, doc_parents in chunks_iter:
            doc = pending.popleft()
            if not doc_chunks:  # headings only, a title only: skipped with the reason, as a blank file is
                skipped.append(without_chunks(doc))
                continue
            docs.add([doc])
            for c in doc_chunks:
                n_oversized += c.oversized
                if c.n_tokens is not None and (max_tokens is None or c.n_tokens > max_tokens):
                    max_tokens = c.n_tokens
            chunks.add(doc_chunks)
            parents.add(doc_parents)
        if not docs.n:
            raise no_documents(sources, skipped)
        for rows in (docs, chunks, parents):
            rows.flush()
    skipped = [{"path": s.path, "reason": s.reason} for s in skipped]
    seconds = time.perf_counter() - t0
    project.record("chunk", params=chunk_settings(params, model, fmt, encoding), inputs={"sources": list(sources)},
                   outputs=[p.name for p in schemas], rows={"docs": docs.n, "chunks": chunks.n,
                                                            "parents": parents.n},
                   skipped=skipped, n_oversized=n_oversized, seconds=round(seconds, 3), scanned=scanned)
    return {"n_docs": docs.n, "n_chunks": chunks.n, "n_parents": parents.n,
            "n_oversized": n_oversized, "max_tokens": max_tokens, "skipped": skipped,
            "seconds": seconds, "warnings": warnings}


class _Rows:
    """Rows (documents or chunks) buffered for one file: written as a row
    group by `write(to_table(rows))` once `ROW_GROUP` rows or
    `ROW_GROUP_CHARS` characters (of `chars_attr`, default the chunk text)
    are buffered, and by `flush`. `n` counts the rows added."""

    def __init__(self, write: Callable | None, to_table: Callable, chars_attr: str = "") -> None:
        self.write, self.to_table, self.chars_attr = write, to_table, chars_attr
        self.rows: list = []
        self.chars = 0
        self.n = 0

    def add(self, rows: list) -> None:
        self.rows.extend(rows)
        self.n += len(rows)
        self.chars += sum(getattr(r, self.chars_attr) if self.chars_attr else len(r.text) for r in rows)
        if len(self.rows) >= ROW_GROUP or self.chars >= ROW_GROUP_CHARS:
            self.flush()

    def flush(self) -> None:
        if self.rows and self.write is not None:
            self.write(self.to_table(self.rows))
        self.rows, self.chars = [], 0
