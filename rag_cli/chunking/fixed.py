"""Fixed windows: `size` units per window, exactly `overlap` units shared by
neighbours (the stride is `size - overlap`). For a text of T units and
T > size there are `1 + ceil((T - size) / (size - overlap))` windows; the last
one ends at the end of the text. Windows are not trimmed (that would change the
overlap), but whitespace-only windows are dropped.

In token units a window starts at its first token's start offset (the first
window at 0) and ends where the token after its last starts (the last at the
end of the text). A window boundary is a character offset, so it cannot fall
between two tokens that start at the same character (SentencePiece's prefix
`▁` before a first Chinese character starts where that character does): a
window end or start that would split such a group moves to the group's end,
so a window and an overlap hold fewer tokens then (never more), and a group of
more than `size` tokens is a window of its own (`oversized`). Without such
groups the counts above are exact.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from .units import SpanCounter

__all__ = ["fixed_spans"]


def fixed_spans(text: str, count: SpanCounter, size: int, overlap: int) -> list[tuple[int, int]]:
    """Return the `(start, end)` character offsets (end exclusive) of the
    non-whitespace windows of `text`, in order; `size` and `overlap` are in
    the units of `count` (characters or tokens), `overlap < size`."""
    if count.is_chars:
        return _char_windows(text, size, overlap)
    return _token_windows(text, count.starts, size, overlap)


def _char_windows(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    n = len(text)
    spans = []
    for a in range(0, max(n - overlap, 1), size - overlap):
        b = min(a + size, n)
        if text[a:b].strip():
            spans.append((a, b))
    return spans


def _token_windows(text: str, positions: Sequence[int], size: int, overlap: int) -> list[tuple[int, int]]:
    n, total = len(text), len(positions)
    spans = []
    i = 0  # first token of the window; always the first token of its character
    while i < total:
        a = 0 if i == 0 else positions[i]
        j = i + size
        if j >= total:
            b = n
        else:
            j = bisect_left(positions, positions[j])  # not between tokens of one character
            if j <= i:  # one character of more than `size` tokens
                j = bisect_right(positions, positions[i])
            b = positions[j] if j < total else n
        if text[a:b].strip():
            spans.append((a, b))
        if j >= total:
            break
        k = j - overlap  # the next window's first token, moved up to the first token of a character
        if k <= i:
            i = bisect_right(positions, positions[i])
        else:
            i = bisect_left(positions, positions[k])
            if i < k:
                i = bisect_right(positions, positions[k])
    return spans
