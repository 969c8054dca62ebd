"""Recursive splitting with exact offsets, after LangChain's
RecursiveCharacterTextSplitter (langchain-text-splitters, `character.py`).

A span is split at the highest-priority separator that occurs inside it:
paragraph (blank line) → line → table cell (the `|` between two cells of a
line that starts with `|`, a Markdown table row) → sentence end (`. ! ?` followed by space;
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
docs/chunking.md ("Chunking: guarantees and LangChain parity").
"""

from __future__ import annotations

import re
import operator
from bisect import bisect_left, bisect_right
from functools import lru_cache

from ..errors import BadInput
from .units import SpanCounter

__all__ = ["recursive_spans", "SEPARATORS", "KEEP_SEPARATOR", "compile_separators"]

_CJK = r"\u2e80-\u9fff\u3040-\u30ff\uac00-\ud7af\uf900-\ufaff"
_CLOSE = r"[\"'”’」』）)\]]*"

class _TableCells:
    """The `cell` separator level: the `|` between two cells of a table row
    (a line whose first non-space character, after at most 3 spaces, is `|`;
    an escaped `\\|` is not a separator), neither the leading nor the trailing
    pipe of the row, nor the pipe before an empty cell. So a row longer than
    the size is cut between whole cells (each keeps its closing pipe, with
    `keep_separator="end"`), never leaving a part that is a pipe alone. Acts like a compiled pattern for
    `_Splitter.cuts_at` (`finditer` yields `re.Match`es); prose lines are
    never cut here."""

    pattern = ""  # not one literal character (`_literal_char`)
    flags = 0
    _PIPE = re.compile(r"(?<!\\)\|")
    _ROW = re.compile(r" {0,3}\|")

    def finditer(self, text: str, a: int, b: int):
        if text.find("|", a, b) < 0:
            return
        ls = text.rfind("\n", 0, a) + 1  # the start of the line holding `a`
        while ls < b:
            le = text.find("\n", ls, b)
            le = b if le < 0 else le
            if self._ROW.match(text, ls):
                pipes = list(self._PIPE.finditer(text, ls, le))
                inner = pipes[1:] if not text[ls:pipes[0].start()].strip() else pipes
                if inner and not text[inner[-1].end():le].strip():
                    inner = inner[:-1]  # the row's closing pipe
                ends = [m.start() for m in pipes[1:]] + [le]  # where the cell after each pipe ends
                after = dict(zip((m.start() for m in pipes), ends))
                # an empty cell stays with the cell before it (no part is a pipe alone)
                yield from (m for m in inner if m.start() >= a and text[m.end():after[m.start()]].strip())
            ls = le + 1

    def search(self, text: str, pos: int = 0):  # `compile_separators` asks whether it matches ""
        return None


#: Separator levels, highest priority first (the default `separators`).
SEPARATORS: list[tuple[str, re.Pattern]] = [
    ("paragraph", re.compile(r"\n[ \t]*\n\s*")),
    ("line", re.compile(re.escape("\n"))),
    ("cell", _TableCells()),  # type: ignore[list-item]
    # `[.!?]+C\s+ | [。！？；]+C\s* | (?<=CJK)[!?;]+C\s*`, written to start with
    # one character class so that `re` skips ahead to candidates (4x faster)
    ("sentence", re.compile(
        rf"[.!?;。！？；](?:(?<=[.!?])[.!?]*{_CLOSE}\s+|(?<=[。！？；])[。！？；]*{_CLOSE}\s*"
        rf"|(?<=[{_CJK}][!?;])[!?;]*{_CLOSE}\s*)")),
    # `,(?![0-9])\s* | [，、]\s* | ;\s+`, likewise
    ("comma", re.compile(r"[,，、;](?:(?<=,)(?![0-9])\s*|(?<=[，、])\s*|(?<=;)\s+)")),
    ("space", re.compile(r"\s+")),
]

_START = re.Match.start
_END = re.Match.end
_FAR = 1 << 62


def _sub_rev(a: int, b: int) -> int:
    return b - a


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


class _CharCuts:
    """Cuts at a one-character literal separator inside `(a, b)`, found
    lazily with `str.find`/`str.rfind` (no list of every match)."""

    __slots__ = ("text", "ch", "b", "end_keep")

    def __init__(self, text: str, ch: str, b: int, end_keep: bool):
        self.text, self.ch, self.b, self.end_keep = text, ch, b, end_keep

    def next(self, p: int) -> int:
        """The first cut after `p`, else `b`."""
        if self.end_keep:
            i = self.text.find(self.ch, p, self.b - 1)
            return i + 1 if i >= 0 else self.b
        i = self.text.find(self.ch, p + 1, self.b)
        return i if i >= 0 else self.b

    def prev(self, q: int, lo: int) -> int:
        """The last cut `c` with `lo < c <= q`, else -1."""
        if self.end_keep:
            i = self.text.rfind(self.ch, lo, q)
            return i + 1 if i >= 0 else -1
        return self.text.rfind(self.ch, lo + 1, q + 1)


class _ListCuts:
    """Cuts from a sorted list (a pattern's matches inside `(a, b)`)."""

    __slots__ = ("cuts", "b")

    def __init__(self, cuts: list[int], b: int):
        self.cuts, self.b = cuts, b

    def next(self, p: int) -> int:
        k = bisect_right(self.cuts, p)
        return self.cuts[k] if k < len(self.cuts) else self.b

    def prev(self, q: int, lo: int) -> int:
        k = bisect_right(self.cuts, q) - 1
        return self.cuts[k] if k >= 0 and self.cuts[k] > lo else -1


class _EveryChar:
    """Cuts between every two characters (the last resort)."""

    __slots__ = ()

    @staticmethod
    def next(p: int) -> int:
        return p + 1

    @staticmethod
    def prev(q: int, lo: int) -> int:
        return q if q > lo else -1


def _literal_char(pattern: re.Pattern) -> str | None:
    """The character a pattern matches literally, if it is one escaped character."""
    ch = pattern.pattern[-1:]
    return ch if ch and pattern.pattern == re.escape(ch) and not pattern.flags & ~re.UNICODE else None


@lru_cache(maxsize=64)
def _levels(separators: tuple | None, keep_separator: str) -> tuple[tuple[re.Pattern, str | None], ...]:
    """`compile_separators`, each pattern with its literal character (or None), cached."""
    return tuple((p, _literal_char(p)) for p in compile_separators(separators, keep_separator))


class _Splitter:
    """One document's recursive split; spans go to `self.out`.

    Pieces are merged greedily without listing them: from a window start,
    the chunk ends at the last cut within `size` units (`reach`), and after
    an emitted chunk the next window starts at the first cut from which the
    carried text is at most `overlap` units and the next piece still fits
    (`back`). This is the same greedy merge as LangChain's `_merge_splits`
    with an empty separator, in O(chunks) steps instead of O(pieces).
    """

    __slots__ = ("text", "count", "reach", "back", "size", "overlap", "levels", "end_keep", "out")

    def __init__(self, text: str, count: SpanCounter, size: int, overlap: int,
                 levels: tuple[tuple[re.Pattern, str | None], ...], start_keep: bool):
        self.text = text
        self.size, self.overlap, self.end_keep = size, overlap, not start_keep
        self.levels = levels
        self.out: list[tuple[int, int]] = []
        if count.is_chars:
            self.count = _sub_rev
            self.reach = operator.add   # last position q with count(p, q) <= n
            self.back = operator.sub    # first position q with count(q, p) <= n
        else:
            starts, n_tok = count.starts, len(count.starts)

            def reach(p: int, n: int) -> int:
                k = bisect_left(starts, p) + n
                return starts[k] if k < n_tok else _FAR

            def back(p: int, n: int) -> int:
                m = bisect_left(starts, p) - n
                return starts[m - 1] + 1 if m > 0 else -_FAR

            self.count, self.reach, self.back = count, reach, back

    def cuts_at(self, a: int, b: int, level: int):
        """The cuts of separator `level` strictly inside `(a, b)`, or None when there are none."""
        pattern, ch = self.levels[level]
        if ch is not None:
            cuts = _CharCuts(self.text, ch, b, self.end_keep)
            return cuts if cuts.next(a) < b else None
        if self.end_keep:
            found = list(map(_END, pattern.finditer(self.text, a, b)))
            if found and found[-1] >= b:
                found.pop()
        else:
            found = list(map(_START, pattern.finditer(self.text, a, b)))
            if found and found[0] <= a:
                found.pop(0)
        return _ListCuts(found, b) if found else None

    def split(self, a: int, b: int, level: int) -> None:
        if self.count(a, b) <= self.size:
            self.out.append((a, b))
            return
        cuts = None
        while level < len(self.levels):
            cuts = self.cuts_at(a, b, level)
            if cuts is not None:
                break
            level += 1
        if cuts is None:
            if b - a <= 1:
                self.out.append((a, b))  # one unbreakable unit
                return
            cuts = _EveryChar
            level = len(self.levels)
        self.merge(a, b, cuts, level + 1)

    def merge(self, a: int, b: int, cuts, next_level: int) -> None:
        """Merge the pieces between `cuts` of `(a, b)`; split pieces over the size at `next_level`."""
        count, reach, back, size, overlap, out = self.count, self.reach, self.back, self.size, self.overlap, self.out
        ws = a  # window start
        while True:
            lim = reach(ws, size)
            if lim >= b:
                out.append((ws, b))
                return
            j = cuts.prev(lim, ws)
            if j < 0:  # the piece at ws is over the size
                nc = cuts.next(ws)
                self.split(ws, nc, next_level)
                if nc >= b:
                    return
                ws = nc
                continue
            out.append((ws, j))
            nc = cuts.next(j)
            if count(j, nc) > size:  # the next piece is over the size: no overlap into or out of it
                self.split(j, nc, next_level)
                if nc >= b:
                    return
                ws = nc
                continue
            lo = max(back(j, overlap), back(nc, size))
            if lo > ws:
                ws = cuts.next(lo - 1)


def _trim(text: str, spans, drop_repeats: bool) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if text[a].isspace() or text[b - 1].isspace():
            while a < b and text[a].isspace():
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if a >= b:
                continue
        if drop_repeats and out and out[-1][0] <= a and b <= out[-1][1]:
            continue  # contained in the previous chunk (overlap only)
        out.append((a, b))
    return out


def recursive_spans(text: str, a: int, b: int, count: SpanCounter, size: int, overlap: int, *,
                    separators=None, keep_separator: str = "end",
                    drop_overlap_repeats: bool = True) -> list[tuple[int, int]]:
    """Chunk `text[a:b]`; return trimmed, non-empty `(start, end)` character
    offsets into `text`, in order (end exclusive).

    Units are whatever `count` measures (tokens or characters): each span has
    at most `size` units unless it is one character worth more than `size`
    tokens, and neighbours share at most `overlap` units. `separators` (see
    `compile_separators`; None = `SEPARATORS`) and `keep_separator` (`end` or
    `start`, see `KEEP_SEPARATOR`) choose where text may be cut.
    `drop_overlap_repeats=False` keeps a chunk that trimming leaves inside the
    previous one (LangChain emits it; it repeats only overlap). Raises
    `BadInput` for invalid `separators` or `keep_separator`.
    """
    try:
        levels = _levels(tuple(separators) if isinstance(separators, list) else separators, keep_separator)
    except TypeError:  # unhashable: not a list of strings/patterns
        levels = tuple((p, _literal_char(p)) for p in compile_separators(separators, keep_separator))
    if a >= b:
        return []
    splitter = _Splitter(text, count, size, overlap, levels, keep_separator == "start")
    splitter.split(a, b, 0)
    return _trim(text, splitter.out, drop_overlap_repeats)
