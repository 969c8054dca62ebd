"""Recursive splitting with exact offsets, after LangChain's
RecursiveCharacterTextSplitter (langchain-text-splitters, `character.py`).

A span is split at the highest-priority separator that occurs inside it:
paragraph (blank line) → line → sentence end (`. ! ?` followed by space;
`。！？；` and, after NFKC, `! ? ;` following a CJK character; closing quotes
stay with the sentence) → comma (`, ` `，` `、` `; `) → whitespace → single
character. By default a separator stays attached to the preceding piece
(`keep_separator="end"`), so a sentence keeps its full stop; the pieces always
concatenate back to the span. Pieces under the size are merged greedily up to
`size` units; when a chunk is emitted, trailing pieces worth at most `overlap`
units are carried into the next chunk (overlap only at separator boundaries).
A piece larger than `size` is split again at the next separator level.
Chunks are then trimmed of leading/trailing whitespace (by moving offsets),
whitespace-only chunks are dropped, and so is a chunk that trimming leaves
inside the previous one (it would repeat only overlap).

With `separators=["\\n\\n", "\\n", " ", ""]` and `keep_separator="start"` the
chunk texts are those of LangChain's splitter with `length_function=len`
(checked by tests/test_chunking_parity.py); the differences are listed in the
README ("Chunking: LangChain parity").
"""

from __future__ import annotations

import re
from collections import deque

from ..errors import BadInput
from .units import SpanCounter

__all__ = ["recursive_spans", "SEPARATORS", "KEEP_SEPARATOR", "compile_separators"]

_CJK = r"\u2e80-\u9fff\u3040-\u30ff\uac00-\ud7af\uf900-\ufaff"
_CLOSE = r"[\"'”’」』）)\]]*"

#: Separator levels, highest priority first (the default `separators`).
SEPARATORS: list[tuple[str, re.Pattern]] = [
    ("paragraph", re.compile(r"\n[ \t]*\n\s*")),
    ("line", re.compile(r"\n")),
    ("sentence", re.compile(
        rf"[.!?]+{_CLOSE}\s+|[。！？；]+{_CLOSE}\s*|(?<=[{_CJK}])[!?;]+{_CLOSE}\s*")),
    ("comma", re.compile(r",(?![0-9])\s*|[，、]\s*|;\s+")),
    ("space", re.compile(r"\s+")),
]

#: Where a separator goes: `end` of the piece before it, or `start` of the
#: piece after it (LangChain's `keep_separator=True`).
KEEP_SEPARATOR = ("end", "start")


def compile_separators(separators, keep_separator: str = "end") -> list[re.Pattern]:
    """The separator levels for `separators`: None → the default `SEPARATORS`;
    otherwise a list of literal strings (matched as is, like LangChain's
    `is_separator_regex=False`) and/or compiled `re.Pattern`s, highest priority
    first. `""` means single characters and ends the list (later entries are
    never reached, as in LangChain). Splitting at single characters is always
    the last resort, so only a one-character unit can exceed the size.

    Raises `BadInput` naming `separators` when it is not such a list or has a
    pattern that can match the empty string, and naming `keep_separator` when
    it is not one of `KEEP_SEPARATOR`.
    """
    if keep_separator not in KEEP_SEPARATOR:
        raise BadInput(f"keep_separator {keep_separator!r} is not known; use one of: {', '.join(KEEP_SEPARATOR)}")
    if separators is None:
        return [p for _name, p in SEPARATORS]
    if isinstance(separators, (str, re.Pattern)) or not isinstance(separators, (list, tuple)):
        raise BadInput(f"separators {separators!r} is not valid; give a list of strings or compiled "
                       "patterns, e.g. [\"\\n\\n\", \"\\n\", \" \", \"\"]")
    levels = []
    for s in separators:
        if isinstance(s, str):
            if s == "":
                break
            levels.append(re.compile(re.escape(s)))
        elif isinstance(s, re.Pattern):
            if s.search("") is not None:
                raise BadInput(f"separators: pattern {s.pattern!r} matches the empty string; give a pattern "
                               "that matches at least one character, or \"\" for single characters")
            levels.append(s)
        else:
            raise BadInput(f"separators: {s!r} is not a string or compiled pattern")
    return levels


class _Splitter:
    """One document's recursive split; spans go to `self.out`."""

    __slots__ = ("text", "count", "size", "overlap", "levels", "start_keep", "out")

    def __init__(self, text, count, size, overlap, levels, start_keep):
        self.text = text
        self.count = (lambda a, b: b - a) if count.is_chars else count
        self.size, self.overlap, self.levels, self.start_keep = size, overlap, levels, start_keep
        self.out: list[tuple[int, int]] = []

    def cuts(self, a: int, b: int, pattern: re.Pattern) -> list[int]:
        if self.start_keep:
            return [p for m in pattern.finditer(self.text, a, b) if a < (p := m.start()) < b]
        return [p for m in pattern.finditer(self.text, a, b) if a < (p := m.end()) < b]

    def split(self, a: int, b: int, level: int) -> None:
        count, size = self.count, self.size
        if count(a, b) <= size:
            self.out.append((a, b))
            return
        levels = self.levels
        cuts: list[int] = []
        while level < len(levels):
            cuts = self.cuts(a, b, levels[level])
            if cuts:
                break
            level += 1
        if cuts:
            bounds = [a, *cuts, b]
        elif b - a <= 1:
            self.out.append((a, b))  # one unbreakable unit
            return
        else:  # character level
            bounds = list(range(a, b + 1))
            level = len(levels)
        good: list[tuple[int, int, int]] = []
        for i in range(len(bounds) - 1):
            pa, pb = bounds[i], bounds[i + 1]
            if pa >= pb:
                continue
            c = count(pa, pb)
            if c <= size:
                good.append((pa, pb, c))
                continue
            if good:
                self.merge(good)
                good = []
            self.split(pa, pb, level + 1)
        if good:
            self.merge(good)

    def merge(self, pieces: list[tuple[int, int, int]]) -> None:
        size, overlap, out = self.size, self.overlap, self.out
        window: deque = deque()
        total = 0
        for piece in pieces:
            c = piece[2]
            if window and total + c > size:
                out.append((window[0][0], window[-1][1]))
                while window and (total > overlap or total + c > size):
                    total -= window.popleft()[2]
            window.append(piece)
            total += c
        if window:
            out.append((window[0][0], window[-1][1]))


def _trim(text: str, spans) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if text[a].isspace() or text[b - 1].isspace():
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


def recursive_spans(text: str, a: int, b: int, count: SpanCounter, size: int, overlap: int, *,
                    separators=None, keep_separator: str = "end") -> list[tuple[int, int]]:
    """Chunk `text[a:b]`; return trimmed, non-empty `(start, end)` character
    offsets into `text`, in order (end exclusive).

    Units are whatever `count` measures (tokens or characters): each span has
    at most `size` units unless it is one character worth more than `size`
    tokens, and neighbours share at most `overlap` units. `separators` (see
    `compile_separators`; None = `SEPARATORS`) and `keep_separator` (`end` or
    `start`, see `KEEP_SEPARATOR`) choose where text may be cut. Raises
    `BadInput` for invalid `separators` or `keep_separator`.
    """
    levels = compile_separators(separators, keep_separator)
    if a >= b:
        return []
    splitter = _Splitter(text, count, size, overlap, levels, keep_separator == "start")
    splitter.split(a, b, 0)
    return _trim(text, splitter.out)
