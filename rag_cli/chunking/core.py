"""`chunk_with_parents` / `chunk_documents` / `chunk_document`: the entry points."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import BadInput
from .chunk import Chunk
from .code import code_spans
from .fixed import fixed_spans
from .markdown import markdown_spans
from .recursive import compile_separators, recursive_spans
from .semantic import semantic_spans
from .tables import find_tables, header_only, table_header_before
from .sentence import sentence_units, sentence_windows
from .units import SpanCounter, char_counter, load_tokenizer, token_counters, validate

__all__ = ["chunk_document", "chunk_documents", "chunk_with_parents", "iter_chunks", "ChunkStats", "chunk_stats",
           "HEADING_AWARE_FORMATS"]

#: Document formats whose text has Markdown headings (the HTML and DOCX
#: loaders write their headings as `#` lines). `recursive` on these behaves as
#: `markdown`. PDF is not among them: its loader emits no headings, and a PDF
#: line starting with `#` is text.
HEADING_AWARE_FORMATS = ("markdown", "html", "docx")

#: A size no section reaches: `_base_spans` with it gives whole sections.
_WHOLE = sys.maxsize


@dataclass(slots=True)
class _Options:
    context_sentences: int
    parent_size: int
    breakpoint_percentile: float
    embed: Callable[[list[str]], np.ndarray] | None
    split: dict  # `separators` and `keep_separator` for recursive_spans/markdown_spans


def _base_spans(doc, count: SpanCounter, size: int, overlap: int, split: dict) -> list[tuple[int, int, list[str]]]:
    """`recursive` (heading-aware on Markdown/HTML, title-aware on BEIR
    records) spans `(start, end, title_path)` of `doc`; with `size=_WHOLE`
    the sections themselves."""
    text = doc.text
    if getattr(doc, "fmt", "text") in HEADING_AWARE_FORMATS:
        return markdown_spans(text, count, size, overlap, **split)
    if doc.metadata.get("body_start") and doc.title:
        # A BEIR record: the title is context for every chunk, like a heading.
        # Only the body is split, with the title's share of the size left for it.
        start = doc.metadata["body_start"]
        body_size = max(size - count(0, start), size // 2, overlap + 1)
        return [(a, b, [doc.title]) for a, b in recursive_spans(text, start, len(text), count, body_size, overlap,
                                                                   **split)]
    return [(a, b, []) for a, b in recursive_spans(text, 0, len(text), count, size, overlap, **split)]


def _chunks_for(doc, count: SpanCounter, tok_count: SpanCounter | None, strategy: str, size: int,
                overlap: int, opts: _Options) -> tuple[list[Chunk], list[Chunk]]:
    """(chunks, parents) of one document; parents only for `parent-child`."""
    text = doc.text
    fmt = getattr(doc, "fmt", "text")
    contexts: list[tuple[int, int] | None] | None = None
    parent_of: list[int] | None = None
    parents: list[Chunk] = []
    if strategy == "fixed":
        spans = [(a, b, []) for a, b in fixed_spans(text, count, size, overlap)]
    elif strategy == "markdown":
        spans = markdown_spans(text, count, size, overlap, **opts.split)
    elif strategy == "code" and fmt == "code":
        spans = [(a, b, []) for a, b in code_spans(text, doc.path, count, size, overlap)]
    elif strategy == "sentence":
        spans, contexts = [], []
        for sa, sb, path in _base_spans(doc, count, _WHOLE, 0, opts.split):
            units = sentence_units(text, sa, sb, count, size, overlap)
            spans.extend((a, b, path) for a, b in units)
            contexts.extend(sentence_windows(units, opts.context_sentences))
    elif strategy == "semantic":
        spans = semantic_spans(text, _base_spans(doc, count, _WHOLE, 0, opts.split), count, size, overlap, opts.embed,
                               opts.breakpoint_percentile)
    elif strategy == "parent-child":
        spans, contexts, parent_of = [], [], []
        for j, (pa, pb, path) in enumerate(_base_spans(doc, count, opts.parent_size, 0, opts.split)):
            n_units = count(pa, pb)
            parents.append(Chunk.build(doc.doc_id, j, text, pa, pb, path,
                                       n_tokens=tok_count(pa, pb) if tok_count is not None else None,
                                       n_units=n_units, oversized=n_units > opts.parent_size, id_prefix="p"))
            for a, b in recursive_spans(text, pa, pb, count, size, overlap, **opts.split):
                spans.append((a, b, path))
                contexts.append((pa, pb))
                parent_of.append(j)
    else:  # recursive, and `code` on documents that are not code
        spans = _base_spans(doc, count, size, overlap, opts.split)
    tables = find_tables(text) if fmt != "code" else []
    starts = [t.start for t in tables]
    keep = range(len(spans))
    if tables and strategy != "fixed" and opts.split["separators"] is None:
        # a chunk of a table's header lines alone is dropped: they go with its first row (custom separators,
        # e.g. LangChain's, keep the splitter's chunks as they are)
        keep = [i for i, (a, b, _p) in enumerate(spans) if not header_only(tables, starts, a, b)]
    out = []
    for ordinal, i in enumerate(keep):
        a, b, path = spans[i]
        n_units = count(a, b)
        out.append(Chunk.build(
            doc.doc_id, ordinal, text, a, b, path,
            n_tokens=tok_count(a, b) if tok_count is not None else None,
            n_units=n_units, oversized=n_units > size,
            parent_id=parents[parent_of[i]].chunk_id if parent_of is not None else None,
            context_span=contexts[i] if contexts is not None else None,
            table_header=table_header_before(tables, starts, a, text) if tables else "",
        ))
    return out, parents


def chunk_with_parents(docs, *, strategy: str = "recursive", size: int = 256, overlap: int = 32,
                       unit: str = "tokens", tokenizer=None, context_sentences: int = 2, parent_size: int = 512,
                       breakpoint_percentile: float = 95.0,
                       embed: Callable[[list[str]], np.ndarray] | None = None, separators=None,
                       keep_separator: str = "end",
                       progress: Callable[[int, int], None] | None = None) -> tuple[list[Chunk], list[Chunk]]:
    """Chunk every document of `docs` (a list of `Document`); return
    `(chunks, parents)`: all chunks (documents in the given order, chunks in
    document order) and, for `parent-child`, the parent chunks (else `[]`).

    Strategies (sizes in `unit`):

    - `recursive` (default; on Markdown/HTML/DOCX documents heading-aware, i.e.
      the same as `markdown`), `fixed`, `markdown`: see their modules.
    - `code`: documents loaded as code (`fmt == "code"`) split at top-level
      definitions (Python, by `ast`) or blank-line blocks (other languages);
      other documents as `recursive`. See `code.py`.
    - `sentence`: one chunk per sentence, its `context` the
      `context_sentences` sentences on each side (within a section).
    - `parent-child`: parents of at most `parent_size` units (the recursive
      splitter, no overlap; in `parents`, ids `doc_id#p<j>`), each split into
      children of at most `size` units with `overlap`; each child's
      `parent_id` is its parent's id and its `context` the parent's text.
    - `semantic`: sentences grouped by where the bi-encoder's cosine between
      neighbouring sentences drops (`breakpoint_percentile`), groups capped at
      `size`; needs `embed` (list of n texts -> (n, d) float32 vectors).

    `size`, `overlap`: in `unit` — `tokens` (of `tokenizer`, the embedder's;
    no special tokens) or `chars` (characters of the normalised text).
    `tokenizer`: a `tokenizers.Tokenizer`, a path to `tokenizer.json`, or a
    model folder. Required for `unit="tokens"`; with `unit="chars"` it is
    optional and only fills `n_tokens`.
    `recursive`/`markdown` emit chunks of at most `size` units with up to
    `overlap` units carried over at separator boundaries; `fixed` emits
    windows of exactly `size` units overlapping by exactly `overlap` (in
    tokens, fewer where tokens share a start character; fixed.py).
    `separators`, `keep_separator`: where the recursive splitter may cut
    (library only, no CLI flag): None = the default levels
    (`recursive.SEPARATORS`: paragraph, line, table cell, sentence incl.
    CJK punctuation, comma, space, character), or a list of literal strings /
    compiled patterns, highest priority first (`""` = single characters);
    `progress(documents done, documents)` is called after each document.
    `keep_separator="end"` (default) attaches a separator to the piece
    before it, `"start"` to the piece after it. LangChain's
    RecursiveCharacterTextSplitter defaults are
    `separators=["\\n\\n", "\\n", " ", ""], keep_separator="start"`.

    A chunk of a Markdown table's header lines alone (no row) is dropped
    with the default separators; the part holding the first row carries
    them in its `embed_text` (`tables.header_only`).

    Chunks larger than `size` occur only for a single unbreakable unit; they
    have `oversized=True` (see `chunk_stats`). `doc.text[c.start_char:c.end_char]
    == c.text` for every chunk and parent; a child's span lies within its
    parent's.

    A BEIR record with a title (`metadata["body_start"]`) is chunked like a
    section under a heading with `recursive`: only the body is split, each
    chunk's `title_path` is `[title]` (so `embed_text` starts with the title),
    and the body gets `size` minus the title's units, so that `embed_text`
    stays within `size` (a title alone is never a chunk).

    Raises `BadInput` naming `--strategy`, `--unit`, `--size`, `--overlap`,
    `--context-sentences`, `--parent-size` or `--breakpoint-percentile` for
    invalid parameters (and for `unit="tokens"` without a tokenizer, or
    `semantic` without `embed`), and naming `separators`/`keep_separator`
    when those are invalid or given with `strategy="fixed"`.
    """
    chunks: list[Chunk] = []
    parents: list[Chunk] = []
    for c, p in iter_chunks(docs, strategy=strategy, size=size, overlap=overlap, unit=unit, tokenizer=tokenizer,
                            context_sentences=context_sentences, parent_size=parent_size,
                            breakpoint_percentile=breakpoint_percentile, embed=embed, separators=separators,
                            keep_separator=keep_separator, progress=progress):
        chunks.extend(c)
        parents.extend(p)
    return chunks, parents


#: Documents tokenized at a time by `iter_chunks` (their token offsets are the
#: only per-document state it holds beyond the document being chunked).
DOC_BATCH = 256


def iter_chunks(docs, *, strategy: str = "recursive", size: int = 256, overlap: int = 32, unit: str = "tokens",
                tokenizer=None, context_sentences: int = 2, parent_size: int = 512,
                breakpoint_percentile: float = 95.0, embed: Callable[[list[str]], np.ndarray] | None = None,
                separators=None, keep_separator: str = "end",
                progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[list[Chunk], list[Chunk]]]:
    """`chunk_with_parents` one document at a time: yields `(chunks, parents)`
    per document of `docs` (`Document`s: a sequence, or any iterable, read
    `DOC_BATCH` at a time; progress then gets total None, and (n, n) once
    the documents run out), in order, so a caller
    can write them out as they come; memory is bounded by `DOC_BATCH`
    documents' token offsets plus one document's chunks. Same parameters,
    results and errors as `chunk_with_parents`; the parameters are checked
    (BadInput) when this is called, before the first document."""
    validate(strategy, size, overlap, unit, tokenizer, context_sentences=context_sentences,
             parent_size=parent_size, breakpoint_percentile=breakpoint_percentile)
    if strategy == "semantic" and embed is None:
        raise BadInput("--strategy semantic needs the bi-encoder (--model) to embed sentences")
    if strategy == "fixed" and (separators is not None or keep_separator != "end"):
        raise BadInput("separators/keep_separator apply to the recursive and markdown strategies, not to fixed windows")
    compile_separators(separators, keep_separator)  # raises BadInput before any work
    opts = _Options(context_sentences, parent_size, float(breakpoint_percentile), embed,
                    {"separators": separators, "keep_separator": keep_separator})
    tok = load_tokenizer(tokenizer)
    total = len(docs) if isinstance(docs, Sequence) else None
    docs = iter(docs)

    def generate() -> Iterator[tuple[list[Chunk], list[Chunk]]]:
        done = 0
        while batch := list(itertools.islice(docs, DOC_BATCH)):
            tok_counts = token_counters([d.text for d in batch], tok) if tok is not None else [None] * len(batch)
            for doc, tc in zip(batch, tok_counts):
                count = tc if unit == "tokens" else char_counter
                yield _chunks_for(doc, count, tc, strategy, size, overlap, opts)
                done += 1
                if progress is not None:
                    progress(done, total)
        if progress is not None and total is None:
            progress(done, done)  # the total is known at the end

    return generate()


def chunk_documents(docs, *, strategy: str = "recursive", size: int = 256, overlap: int = 32,
                    unit: str = "tokens", tokenizer=None, **options) -> list[Chunk]:
    """The chunks of `chunk_with_parents` (same parameters, units and errors;
    `options`: `context_sentences`, `parent_size`, `breakpoint_percentile`,
    `embed`, `separators`, `keep_separator`), without the parents."""
    return chunk_with_parents(docs, strategy=strategy, size=size, overlap=overlap, unit=unit,
                              tokenizer=tokenizer, **options)[0]


def chunk_document(doc, *, strategy: str = "recursive", size: int = 256, overlap: int = 32,
                   unit: str = "tokens", tokenizer=None, **options) -> list[Chunk]:
    """Chunk one `Document`; see `chunk_with_parents` for the parameters, units
    and errors. `doc.text[c.start_char:c.end_char] == c.text` for every chunk."""
    return chunk_documents([doc], strategy=strategy, size=size, overlap=overlap, unit=unit, tokenizer=tokenizer,
                           **options)


@dataclass(slots=True)
class ChunkStats:
    """Summary for reports: chunk count, documents with chunks, oversized
    chunks (one unbreakable unit longer than `size`), and unit statistics."""

    n_chunks: int
    n_docs: int
    n_oversized: int
    max_units: int
    mean_units: float
    max_tokens: int | None


def chunk_stats(chunks: list[Chunk]) -> ChunkStats:
    """Summarise `chunks` (see `ChunkStats`)."""
    units = [c.n_units for c in chunks]
    toks = [c.n_tokens for c in chunks if c.n_tokens is not None]
    return ChunkStats(
        n_chunks=len(chunks), n_docs=len({c.doc_id for c in chunks}),
        n_oversized=sum(c.oversized for c in chunks), max_units=max(units, default=0),
        mean_units=(sum(units) / len(units)) if units else 0.0, max_tokens=max(toks) if toks else None,
    )
