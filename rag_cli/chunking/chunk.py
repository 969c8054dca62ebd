"""The chunk record."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = ["Chunk", "make_embed_text", "HEADING_SEPARATOR"]

#: Joins the heading path in `embed_text`.
HEADING_SEPARATOR = " > "


def make_embed_text(title_path: list[str], text: str, table_header: str = "") -> str:
    """The text to embed: `"H1 > H2\\n" + text` when there is a heading path,
    else `text`; a `table_header` (the header and delimiter lines of the
    Markdown table a chunk starts inside, see `tables.py`) goes, with a line
    break, right before `text`."""
    if table_header:
        text = table_header + "\n" + text
    if title_path:
        return HEADING_SEPARATOR.join(title_path) + "\n" + text
    return text


@dataclass(slots=True)
class Chunk:
    """One chunk of a document.

    - `chunk_id` = `doc_id + "#" + str(ordinal)`; `ordinal` counts from 0 in
      document order.
    - `text` == `doc.text[start_char:end_char]` always (offsets in characters
      of the normalised document text, end exclusive).
    - `title_path`: the Markdown heading path (outermost first), `[]` outside
      headings and for non-Markdown documents.
    - `n_tokens`: tokens of the span under the given tokenizer, counted as the
      tokens of the whole-document encoding (no special tokens) whose start
      offset falls in the span; None when no tokenizer was given. Encoding the
      chunk alone may differ by a token or so, and the embedder adds its
      special tokens and prefix on top.
    - `n_units`: the size in the chunking unit (tokens or chars);
      `oversized` is True when `n_units > size` because the chunk is one
      unbreakable unit (a single character/token run with no separator).
    - `parent_id`: None, except for `parent-child` children: the chunk id
      (`doc_id + "#p" + parent ordinal`) of the parent chunk, a row of
      `parents.parquet` whose span contains this chunk's span.
    - `context_start`, `context_end`, `context`: the span and text that
      `rag ask` gives the generator instead of `text` (`sentence`: the
      sentence with its neighbours; `parent-child`: the parent);
      `context == doc.text[context_start:context_end]`; all None for the
      other strategies (the chunk is its own context).
    - `sha256`: hex SHA-256 of `text` encoded as UTF-8.
    - `embed_text`: see `make_embed_text`; a chunk that starts inside the
      rows of a Markdown table gets the table's header and delimiter lines
      there (`tables.py`), so a split table keeps its column names.
    """

    chunk_id: str
    doc_id: str
    ordinal: int
    text: str
    title_path: list[str]
    start_char: int
    end_char: int
    n_tokens: int | None
    parent_id: str | None = None
    sha256: str = ""
    embed_text: str = ""
    n_units: int = 0
    oversized: bool = False
    context_start: int | None = None
    context_end: int | None = None
    context: str | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def build(cls, doc_id: str, ordinal: int, doc_text: str, start: int, end: int, title_path: list[str],
              n_tokens: int | None, n_units: int, oversized: bool, parent_id: str | None = None,
              context_span: tuple[int, int] | None = None, id_prefix: str = "",
              table_header: str = "") -> "Chunk":
        """The chunk `doc_text[start:end]`; `context_span` (start, end) sets
        the context fields; `id_prefix` goes between `#` and the ordinal
        (`"p"` for parents); `table_header` goes into `embed_text` only
        (`make_embed_text`)."""
        text = doc_text[start:end]
        cs, ce = context_span if context_span is not None else (None, None)
        return cls(
            chunk_id=f"{doc_id}#{id_prefix}{ordinal}", doc_id=doc_id, ordinal=ordinal, text=text,
            title_path=list(title_path), start_char=start, end_char=end, n_tokens=n_tokens,
            parent_id=parent_id, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            embed_text=make_embed_text(title_path, text, table_header), n_units=n_units, oversized=oversized,
            context_start=cs, context_end=ce, context=doc_text[cs:ce] if context_span is not None else None,
        )
