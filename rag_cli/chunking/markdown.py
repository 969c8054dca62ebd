"""Markdown-aware chunking: split at ATX headings first (`#` lines inside
``` / ~~~ code fences are not headings), then split each section longer than
`size` with the recursive splitter.

Each chunk carries the heading path of its section in `title_path`
(outermost heading first). The heading lines themselves are not part of any
chunk's text (they are in `title_path`, and so in `embed_text`); the text
before the first heading has an empty path.
"""

from __future__ import annotations

from ..loaders.markdown import iter_headings
from .recursive import recursive_spans
from .units import SpanCounter

__all__ = ["markdown_spans"]


def markdown_spans(text: str, count: SpanCounter, size: int, overlap: int, *, separators=None,
                   keep_separator: str = "end") -> list[tuple[int, int, list[str]]]:
    """Return `(start, end, title_path)` per chunk (character offsets into
    `text`, end exclusive), in document order. Sections are split by
    `recursive_spans` with `separators` and `keep_separator`; no chunk crosses
    a heading."""
    sections: list[tuple[int, int, list[str]]] = []
    stack: list[tuple[int, str]] = []
    body_start = 0
    path: list[str] = []
    for hs, he, level, title in iter_headings(text):
        sections.append((body_start, hs, path))
        while stack and stack[-1][0] >= level:
            stack.pop()
        if title:
            stack.append((level, title))
        path = [t for _l, t in stack]
        body_start = he
    sections.append((body_start, len(text), path))
    out = []
    for a, b, p in sections:
        if a >= b or not text[a:b].strip():
            continue
        for s, e in recursive_spans(text, a, b, count, size, overlap, separators=separators,
                                      keep_separator=keep_separator):
            out.append((s, e, p))
    return out
