"""DOCX (Word 2007+) reader (python-docx).

The body's paragraphs and tables are read in document order
(`Document.iter_inner_content()`):

- A paragraph whose style is `Heading N` (or whose style chain sets an
  outline level, as localised heading styles do) becomes a Markdown ATX
  heading of level N (`#` … `######`; levels above 6 become 6), so the
  Markdown-aware chunker puts it in `title_path`. Other paragraphs are kept
  as they are; one that would read as a Markdown heading (`# ...`) gets a
  backslash (`\\# ...`) so it stays text. Empty paragraphs are dropped.
- A table becomes a GitHub-flavoured Markdown table (first row = header);
  a merged cell's text is written once, in its first (top-left) grid cell.

Blocks are separated by a blank line. Content outside the body's top level
(headers, footers, footnotes, comments, text boxes, content controls) is not
read. `title`: the core property `title`, else the first `Title`-style
paragraph, else the first heading, else the file stem. `metadata`: `title`
and `author` from the core properties when set. The document's `fmt` is
`docx`, which the chunker treats as heading-aware.
"""

from __future__ import annotations

import io
import re

from .decode import DecodeFailed
from .markdown import iter_headings
from .mdtable import markdown_table
from .normalize import normalize_text

__all__ = ["read_docx", "heading_level"]

_HEADING_STYLE = re.compile(r"^heading\s*(\d+)$", re.IGNORECASE)
_WS = re.compile(r"\s+")


def _outline_level(pPr) -> int | None:
    from docx.oxml.ns import qn

    if pPr is None:
        return None
    el = pPr.find(qn("w:outlineLvl"))
    if el is None:
        return None
    try:
        level = int(el.get(qn("w:val")))
    except (TypeError, ValueError):
        return None
    return level + 1 if 0 <= level <= 8 else None  # 9 = body text


def heading_level(paragraph) -> int | None:
    """Heading level (1-based) of a python-docx `Paragraph`, or None for body text.

    From the style name `Heading N`, else the paragraph's own outline level,
    else the outline level of its style or the style's base styles.
    """
    style = paragraph.style
    m = _HEADING_STYLE.match(style.name or "") if style is not None else None
    if m:
        return int(m.group(1))
    level = _outline_level(paragraph._p.pPr)
    seen = 0
    while level is None and style is not None and seen < 20:
        level = _outline_level(style.element.pPr)
        style, seen = style.base_style, seen + 1
    return level


def _table_rows(table) -> list[list[str]]:
    """Cell texts per row; a merged cell's text only in its first grid cell."""
    rows: list[list[str]] = []
    above: list = []
    for row in table.rows:
        cells = row.cells
        texts = []
        for j, cell in enumerate(cells):
            repeat = (j > 0 and cells[j - 1]._tc is cell._tc) or (j < len(above) and above[j]._tc is cell._tc)
            texts.append("" if repeat else cell.text)
        rows.append(texts)
        above = cells
    return rows


def read_docx(raw: bytes, stem: str) -> tuple[str, str, dict]:
    """DOCX bytes → `(title, text, metadata)`, text normalised with `normalize_text`.

    See the module docstring for the text, title and metadata. Raises
    `DecodeFailed` with a reason for bytes that are not a readable .docx
    (not a ZIP package, no main document part, broken XML).
    """
    import docx
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(raw))
        props = document.core_properties
        core_title, author = props.title or "", props.author or ""
        blocks: list[str] = []
        first_title = first_heading = ""
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                md = markdown_table(_table_rows(block))
                if md:
                    blocks.append(normalize_text(md))
                continue
            text = normalize_text(block.text).strip()
            if not text:
                continue
            level = heading_level(block)
            if level is not None:
                heading = _WS.sub(" ", text)
                blocks.append("#" * min(level, 6) + " " + heading)
                first_heading = first_heading or heading
                continue
            if block.style is not None and block.style.name == "Title":
                first_title = first_title or _WS.sub(" ", text)
            for start, _end, _level, _h in reversed(list(iter_headings(text))):
                text = text[:start] + "\\" + text[start:]  # body text that would parse as a heading
            blocks.append(text)
    except Exception as exc:  # python-docx/lxml/zipfile raise many types on broken files
        raise DecodeFailed(f"not a readable .docx ({type(exc).__name__}: {exc})") from None
    meta: dict = {}
    core_title = _WS.sub(" ", normalize_text(core_title)).strip()
    if core_title:
        meta["title"] = core_title
    author = _WS.sub(" ", normalize_text(author)).strip()
    if author:
        meta["author"] = author
    return core_title or first_title or first_heading or stem, "\n\n".join(blocks), meta
