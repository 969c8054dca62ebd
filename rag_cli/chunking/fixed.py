"""Fixed windows: `size` units per window, exactly `overlap` units shared by
neighbours (the stride is `size - overlap`). For a text of T units and
T > size there are `1 + ceil((T - size) / (size - overlap))` windows; the last
one ends at the end of the text. Windows are not trimmed (that would change the
overlap), but whitespace-only windows are dropped.

In token units a window starts at its first token's start offset (the first
window at 0) and ends where the token after its last starts (the last at the
end of the text).
"""

from __future__ import annotations

from .units import SpanCounter

__all__ = ["fixed_spans"]


def fixed_spans(text: str, count: SpanCounter, size: int, overlap: int) -> list[tuple[int, int]]:
    n = len(text)
    if count.is_chars:
        positions = None
        total = n
    else:
        positions = count.starts
        total = len(positions)
    if total == 0:
        return []
    stride = size - overlap
    spans = []
    i = 0
    while True:
        j = i + size
        if positions is None:
            a, b = i, min(j, n)
        else:
            a = 0 if i == 0 else positions[i]
            b = positions[j] if j < total else n
        if text[a:b].strip():
            spans.append((a, b))
        if j >= total:
            break
        i += stride
    return spans
