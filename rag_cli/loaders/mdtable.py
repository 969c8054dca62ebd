"""Table cells → a GitHub-flavoured Markdown table (used by the PDF and DOCX readers)."""

from __future__ import annotations

import re

__all__ = ["markdown_table", "clean_cell"]

_WS = re.compile(r"\s+")


def clean_cell(cell: str | None) -> str:
    """One cell's text for a Markdown table row: `None` → `""`, every run of
    whitespace (line breaks included) → one space, `|` escaped as `\\|`."""
    if cell is None:
        return ""
    return _WS.sub(" ", cell).strip().replace("|", "\\|")


def markdown_table(rows: list[list[str | None]]) -> str:
    """Rows of cells (the first row is the header) → a GFM pipe table.

    `rows`: a list of rows, each a list of cell strings or `None` (a merged
    or missing cell); short rows are padded with empty cells to the widest
    row. Rows whose cells are all empty are dropped; the header row stays
    (possibly empty) so the table keeps its columns. Returns lines joined
    by `\\n` with no trailing newline: `| h1 | h2 |`, `| --- | --- |`, then
    one line per body row; `""` when no cell has text. Format:
    https://github.github.com/gfm/#tables-extension-
    """
    cleaned = [[clean_cell(c) for c in row] for row in rows]
    if not any(any(row) for row in cleaned):
        return ""
    width = max(len(row) for row in cleaned)
    cleaned = [row + [""] * (width - len(row)) for row in cleaned]
    header, body = cleaned[0], [row for row in cleaned[1:] if any(row)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] * width) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in body)
    return "\n".join(lines)
