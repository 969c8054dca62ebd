"""`chunk_document` / `chunk_documents`: the entry points."""

from __future__ import annotations

from dataclasses import dataclass

from .chunk import Chunk
from .fixed import fixed_spans
from .markdown import markdown_spans
from ..errors import BadInput
from .recursive import compile_separators, recursive_spans
from .units import SpanCounter, char_counter, load_tokenizer, token_counters, validate

__all__ = ["chunk_document", "chunk_documents", "ChunkStats", "chunk_stats", "HEADING_AWARE_FORMATS"]

#: Document formats whose text has Markdown headings (HTML is converted to
#: Markdown-style headings by its loader). `recursive` on these behaves as
#: `markdown`.
HEADING_AWARE_FORMATS = ("markdown", "html")


def _chunks_for(doc, count: SpanCounter, tok_count: SpanCounter | None, strategy: str, size: int,
                overlap: int, split: dict) -> list[Chunk]:
    text = doc.text
    fmt = getattr(doc, "fmt", "text")
    if strategy == "fixed":
        spans = [(a, b, []) for a, b in fixed_spans(text, count, size, overlap)]
    elif strategy == "markdown" or (strategy == "recursive" and fmt in HEADING_AWARE_FORMATS):
        spans = markdown_spans(text, count, size, overlap, **split)
    elif doc.metadata.get("body_start") and doc.title:
        # A BEIR record: the title is context for every chunk, like a heading.
        # Only the body is split, with the title's share of the size left for it.
        start = doc.metadata["body_start"]
        body_size = max(size - count(0, start), size // 2, overlap + 1)
        spans = [(a, b, [doc.title]) for a, b in recursive_spans(text, start, len(text), count, body_size, overlap,
                                                                    **split)]
    else:
        spans = [(a, b, []) for a, b in recursive_spans(text, 0, len(text), count, size, overlap, **split)]
    out = []
    for ordinal, (a, b, path) in enumerate(spans):
        n_units = count(a, b)
        out.append(Chunk.build(
            doc.doc_id, ordinal, text, a, b, path,
            n_tokens=tok_count(a, b) if tok_count is not None else None,
            n_units=n_units, oversized=n_units > size,
        ))
    return out


def chunk_documents(docs, *, strategy: str = "recursive", size: int = 256, overlap: int = 32,
                    unit: str = "tokens", tokenizer=None, separators=None,
                    keep_separator: str = "end") -> list[Chunk]:
    """Chunk every document of `docs` (a list of `Document`); return all chunks,
    documents in the given order, chunks in document order.

    - `strategy`: `recursive` (default; on Markdown/HTML documents it is
      heading-aware, i.e. the same as `markdown`), `fixed` or `markdown`.
    - `size`, `overlap`: in `unit` — `tokens` (of `tokenizer`, the embedder's;
      no special tokens) or `chars` (characters of the normalised text).
      `recursive`/`markdown` emit chunks of at most `size` units with up to
      `overlap` units carried over at separator boundaries; `fixed` emits
      windows of exactly `size` units overlapping by exactly `overlap`
      (in tokens, fewer where tokens share a start character; fixed.py).
    - `tokenizer`: a `tokenizers.Tokenizer`, a path to `tokenizer.json`, or a
      model folder. Required for `unit="tokens"`; with `unit="chars"` it is
      optional and only fills `n_tokens`.
    - `separators`, `keep_separator`: where `recursive`/`markdown` may cut
      (library only, no CLI flag): None = the default levels
      (`recursive.SEPARATORS`: paragraph, line, sentence incl. CJK
      punctuation, comma, space, character), or a list of literal strings /
      compiled patterns, highest priority first (`""` = single characters);
      `keep_separator="end"` (default) attaches a separator to the piece
      before it, `"start"` to the piece after it. LangChain's
      RecursiveCharacterTextSplitter defaults are
      `separators=["\\n\\n", "\\n", " ", ""], keep_separator="start"`.

    Chunks larger than `size` occur only for a single unbreakable unit; they
    have `oversized=True` (see `chunk_stats`).

    A BEIR record with a title (`metadata["body_start"]`) is chunked like a
    section under a heading with `recursive`: only the body is split, each
    chunk's `title_path` is `[title]` (so `embed_text` starts with the title),
    and the body gets `size` minus the title's units, so that `embed_text`
    stays within `size` (a title alone is never a chunk).

    Raises `BadInput` naming `--strategy`, `--unit`, `--size` or `--overlap`
    for invalid parameters (and for `unit="tokens"` without a tokenizer), and
    naming `separators`/`keep_separator` when those are invalid or given with
    `strategy="fixed"`.
    """
    validate(strategy, size, overlap, unit, tokenizer)
    split = {"separators": separators, "keep_separator": keep_separator}
    if strategy == "fixed" and (separators is not None or keep_separator != "end"):
        raise BadInput("separators/keep_separator apply to the recursive and markdown strategies, not to fixed windows")
    compile_separators(separators, keep_separator)  # raises BadInput before any work
    tok = load_tokenizer(tokenizer)
    docs = list(docs)
    tok_counts = token_counters([d.text for d in docs], tok) if tok is not None else [None] * len(docs)
    out: list[Chunk] = []
    for doc, tc in zip(docs, tok_counts):
        count = tc if unit == "tokens" else char_counter
        out.extend(_chunks_for(doc, count, tc, strategy, size, overlap, split))
    return out


def chunk_document(doc, *, strategy: str = "recursive", size: int = 256, overlap: int = 32,
                   unit: str = "tokens", tokenizer=None, separators=None, keep_separator: str = "end") -> list[Chunk]:
    """Chunk one `Document`; see `chunk_documents` for the parameters, units
    and errors. `doc.text[c.start_char:c.end_char] == c.text` for every chunk."""
    return chunk_documents([doc], strategy=strategy, size=size, overlap=overlap, unit=unit, tokenizer=tokenizer,
                           separators=separators, keep_separator=keep_separator)


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
