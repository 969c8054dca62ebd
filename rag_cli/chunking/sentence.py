"""Sentence units and sentence windows (the `sentence` strategy, and the
sentences that `semantic` groups).

A sentence ends where the recursive splitter's `paragraph` (blank line) or
`sentence` separator matches (`. ! ?` followed by white space; `。！？；`;
after NFKC `! ? ;` following a CJK character; closing quotes stay with the
sentence): the same patterns as `recursive.SEPARATORS`, not a copy. A single
line break does not end a sentence (hard-wrapped text). Each sentence is
trimmed of surrounding white space; a sentence longer than `size` units is
split by `recursive_spans` into several units.

Sentence windows (LlamaIndex's `SentenceWindowNodeParser` idea): each unit is
one chunk for retrieval, and its context for `rag ask` is the span from the
unit `n` before it to the unit `n` after it, within the same section.
"""

from __future__ import annotations

from .recursive import SEPARATORS, recursive_spans
from .units import SpanCounter

__all__ = ["sentence_units", "sentence_windows"]

_ENDS = [pattern for name, pattern in SEPARATORS if name in ("paragraph", "sentence")]


def sentence_units(text: str, a: int, b: int, count: SpanCounter, size: int, overlap: int) -> list[tuple[int, int]]:
    """Sentences of `text[a:b]` as trimmed, non-empty `(start, end)` character
    spans in order, each at most `size` units (an over-size sentence is split
    with `recursive_spans(..., size, overlap)`; a single unbreakable unit can
    still exceed `size`). Offsets index `text`."""
    cuts = sorted({m.end() for p in _ENDS for m in p.finditer(text, a, b) if a < m.end() < b})
    bounds = [a, *cuts, b]
    out: list[tuple[int, int]] = []
    for s, e in zip(bounds, bounds[1:]):
        piece = text[s:e]
        start, end = s + len(piece) - len(piece.lstrip()), s + len(piece.rstrip())
        if start < end:  # the trimmed sentence; split only when it exceeds `size`
            out.extend(recursive_spans(text, start, end, count, size, overlap))
    return out


def sentence_windows(units: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """For each unit `i` the span `(units[i - n].start, units[i + n].end)`,
    clipped to the first and last unit: `n` sentences of context on each
    side (`n` ≥ 0; `n = 0` gives the unit itself)."""
    last = len(units) - 1
    return [(units[max(0, i - n)][0], units[min(last, i + n)][1]) for i in range(len(units))]
