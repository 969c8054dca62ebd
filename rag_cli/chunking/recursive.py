"""Recursive splitting with exact offsets (in the spirit of LangChain's
RecursiveCharacterTextSplitter).

A span is split at the highest-priority separator that occurs in it:
paragraph (blank line) → line → sentence end (`. ! ?` followed by space;
`。！？；` and, after NFKC, `! ? ;` following a CJK character; closing quotes
stay with the sentence) → comma (`, ` `，` `、` `; `) → whitespace → single
character. Separators stay attached to the preceding piece, so the pieces
concatenate back to the span. Pieces that fit are merged greedily up to `size`
units; when a chunk is emitted, trailing pieces worth at most `overlap` units
are carried into the next chunk (overlap only at separator boundaries). A
piece larger than `size` is split again at the next separator level.
Chunks are then trimmed of leading/trailing whitespace (by moving offsets) and
whitespace-only chunks are dropped.
"""

from __future__ import annotations

import re
from collections import deque

from .units import SpanCounter

__all__ = ["recursive_spans", "SEPARATORS"]

_CJK = r"\u2e80-\u9fff\u3040-\u30ff\uac00-\ud7af\uf900-\ufaff"
_CLOSE = r"[\"'”’」』）)\]]*"

#: Separator levels, highest priority first; a boundary is the end of a match.
SEPARATORS: list[tuple[str, re.Pattern]] = [
    ("paragraph", re.compile(r"\n[ \t]*\n\s*")),
    ("line", re.compile(r"\n")),
    ("sentence", re.compile(
        rf"[.!?]+{_CLOSE}\s+|[。！？；]+{_CLOSE}\s*|(?<=[{_CJK}])[!?;]+{_CLOSE}\s*")),
    ("comma", re.compile(r",(?![0-9])\s*|[，、]\s*|;\s+")),
    ("space", re.compile(r"\s+")),
]


def _pieces(text: str, a: int, b: int, pattern: re.Pattern) -> list[tuple[int, int]]:
    cuts = [m.end() for m in pattern.finditer(text, a, b) if a < m.end() < b]
    if not cuts:
        return []
    bounds = [a, *cuts, b]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]


def _merge(pieces, count: SpanCounter, size: int, overlap: int, out: list) -> None:
    window: deque = deque()
    total = 0
    for a, b in pieces:
        c = count(a, b)
        if window and total + c > size:
            out.append((window[0][0], window[-1][1]))
            while window and (total > overlap or total + c > size):
                pa, pb = window.popleft()
                total -= count(pa, pb)
        window.append((a, b))
        total += c
    if window:
        out.append((window[0][0], window[-1][1]))


def _split(text: str, a: int, b: int, level: int, count: SpanCounter, size: int, overlap: int, out: list) -> None:
    if count(a, b) <= size:
        out.append((a, b))
        return
    pieces: list[tuple[int, int]] = []
    while level < len(SEPARATORS):
        pieces = _pieces(text, a, b, SEPARATORS[level][1])
        if pieces:
            break
        level += 1
    if not pieces:  # character level
        if b - a <= 1:
            out.append((a, b))  # unbreakable
            return
        pieces = [(i, i + 1) for i in range(a, b)]
        level = len(SEPARATORS)
    good: list[tuple[int, int]] = []
    for pa, pb in pieces:
        if count(pa, pb) <= size:
            good.append((pa, pb))
            continue
        if good:
            _merge(good, count, size, overlap, out)
            good = []
        _split(text, pa, pb, level + 1, count, size, overlap, out)
    if good:
        _merge(good, count, size, overlap, out)


def _trim(text: str, spans) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a >= b:
            continue
        if out and out[-1][0] <= a and b <= out[-1][1]:
            continue  # contained in the previous chunk (overlap only)
        out.append((a, b))
    return out


def recursive_spans(text: str, a: int, b: int, count: SpanCounter, size: int, overlap: int) -> list[tuple[int, int]]:
    """Chunk `text[a:b]`; return trimmed, non-empty `(start, end)` spans in
    order. Units are whatever `count` measures (tokens or characters)."""
    raw: list[tuple[int, int]] = []
    _split(text, a, b, 0, count, size, overlap, raw)
    return _trim(text, raw)
