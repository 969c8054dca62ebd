"""Markdown pipe tables split across chunks: every part after the first gets
the table's header and delimiter lines in front of its `embed_text`, so the
rows of a later part are still read under their column names (and search
and ask show them in front of its text: `rag_cli.store.chunks.shown_text`).
A chunk of header lines alone is dropped (`header_only`); a row longer than
the size is cut between cells (`recursive._TableCells`).

A table is, as in GitHub-flavoured Markdown
(https://github.github.com/gfm/#tables-extension-): a line holding a `|`
(the header), then a delimiter row of as many cells `---`, `:--`, `--:` or `:-:`
separated by `|`, then the rows: the following non-blank lines that hold a
`|`. The PDF and DOCX readers write their tables in this form
(`rag_cli.loaders.mdtable`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["Table", "find_tables", "header_only", "table_header_before"]

_DELIMITER = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_LINE = re.compile(r"[^\n]*\n?")
_PIPE = re.compile(r"(?<!\\)\|")


def _n_cells(line: str) -> int:
    """Cells of a table line: unescaped `|` separate them; a leading and a
    trailing `|` do not."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return len(_PIPE.split(line))


@dataclass(frozen=True, slots=True)
class Table:
    """Character offsets of one table in a text (end exclusive).

    `start`: the header line's start; `body`: the first row's start (just
    after the delimiter row's line end); `end`: the end of the last row's
    line; `header`: the header and delimiter lines, `\\n`-joined, without a
    final line break."""

    start: int
    body: int
    end: int
    header: str


def find_tables(text: str) -> list[Table]:
    """Every pipe table of `text`, in order (see the module doc); `[]` when
    the text has no `|`."""
    if "|" not in text:
        return []
    lines = [(m.start(), m.group()) for m in _LINE.finditer(text) if m.group()]
    out: list[Table] = []
    i = 0
    while i + 1 < len(lines):
        (hs, head), (_ds, delim) = lines[i], lines[i + 1]
        if "|" in head and "-" in delim and _DELIMITER.match(delim.rstrip("\n")) \
                and _n_cells(head) == _n_cells(delim):
            j = i + 2
            while j < len(lines) and lines[j][1].strip() and "|" in lines[j][1]:
                j += 1
            body = lines[i + 2][0] if i + 2 < len(lines) else len(text)
            end = lines[j - 1][0] + len(lines[j - 1][1].rstrip("\n")) if j > i + 2 else body
            out.append(Table(hs, body, end, head.rstrip("\n") + "\n" + delim.rstrip("\n")))
            i = j
        else:
            i += 1
    return out


def _table_at(tables: list[Table], starts: list[int], pos: int) -> Table | None:
    k = bisect.bisect_right(starts, pos) - 1
    return tables[k] if k >= 0 and pos < max(tables[k].end, tables[k].body) else None


def table_header_before(tables: list[Table], starts: list[int], start: int, text: str = "") -> str:
    """The header lines to put before a chunk starting at `start`: the
    table's `header` when the chunk begins inside its rows (after its
    delimiter row, before its end); when it begins on a later line of the
    header block (the delimiter row, after a cut between the header lines;
    needs `text`), the header lines above that line; `""` otherwise.
    `starts` is `[t.start for t in tables]`."""
    t = _table_at(tables, starts, start)
    if t is None:
        return ""
    if t.body <= start < t.end:
        return t.header
    line = text.rfind("\n", t.start, start) + 1 if text else 0
    return text[t.start:line].rstrip("\n") if line > t.start else ""


def header_only(tables: list[Table], starts: list[int], start: int, end: int) -> bool:
    """Whether the chunk `[start, end)` holds nothing but header lines (the
    header and delimiter lines) of a table that has rows: such a chunk is not
    kept; the part that holds the first row gets those lines in front of its
    `embed_text` (`table_header_before`), so a header is never a chunk
    without a row."""
    t = _table_at(tables, starts, start)
    return t is not None and t.end > t.body and end <= t.body
