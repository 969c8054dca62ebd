"""HTML reader (beautifulsoup4 with Python's built-in `html.parser` backend).

The visible text is kept; `script`, `style`, `nav`, `noscript`, `template`,
`svg`, `iframe` and `head` (except `<title>`) are dropped. Block elements are
separated by blank lines, `<br>` gives a line break, headings `h1`–`h6` become
Markdown ATX headings (`# ...`), `<pre>` becomes a ``` fenced block and
`<table>` becomes a GFM pipe table (`mdtable.markdown_table`, as the PDF and
DOCX readers do), so the Markdown-aware chunker sees the document's structure.
"""

from __future__ import annotations

import re

from .mdtable import markdown_table

__all__ = ["parse_html", "html_available"]

_DROP = {"script", "style", "nav", "noscript", "template", "svg", "iframe", "head", "button", "form", "select"}
_BLOCK = {
    "address", "article", "aside", "blockquote", "body", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "header", "hr", "html", "li", "main", "ol", "p",
    "section", "summary", "table", "tbody", "thead", "tfoot", "tr", "ul", "caption",
}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_WS = re.compile(r"\s+")
_BR = "\x00"


def html_available() -> bool:
    try:
        import bs4  # noqa: F401
    except ImportError:
        return False
    return True


def _table_rows(table) -> list[list[str]]:
    """A `<table>` Tag → its rows of cell texts, in document order (rows of
    `thead`, `tbody`, `tfoot` alike; rows of nested tables excluded, their
    text stays in the enclosing cell). A cell with `colspan=n` is followed by
    n-1 empty cells so the columns line up. Text inside dropped elements
    (`script`, `style`, ...) is left out."""
    rows: list[list[str]] = []
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue
        row: list[str] = []
        for cell in tr.find_all(("td", "th"), recursive=False):
            for dropped in cell.find_all(_DROP):
                dropped.decompose()
            row.append(cell.get_text(" "))
            try:
                span = int(cell.get("colspan", 1))
            except (TypeError, ValueError):
                span = 1
            row.extend([""] * (min(max(span, 1), 1000) - 1))
        rows.append(row)
    return rows


def parse_html(text: str, stem: str) -> tuple[str, str]:
    """Normalised HTML source → `(title, text)`. Needs beautifulsoup4."""
    from bs4 import BeautifulSoup, Comment, NavigableString, Tag
    from bs4.element import Declaration, Doctype, ProcessingInstruction

    soup = BeautifulSoup(text, "html.parser")
    title_tag = soup.find("title")
    title = _WS.sub(" ", title_tag.get_text()).strip() if title_tag else ""

    blocks: list[str] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            s = _WS.sub(" ", "".join(buf)).replace(" " + _BR, _BR).replace(_BR + " ", _BR)
            s = s.strip(" ").strip(_BR).replace(_BR, "\n").strip()
            if s:
                blocks.append(s)
            buf.clear()

    skip_strings = (Comment, Declaration, Doctype, ProcessingInstruction)

    def walk(node) -> None:
        for child in node.children:
            if isinstance(child, NavigableString):
                if isinstance(child, skip_strings):
                    continue
                buf.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name.lower()
            if name in _DROP:
                continue
            if name == "br":
                buf.append(_BR)
            elif name in _HEADINGS:
                flush()
                h = _WS.sub(" ", child.get_text(" ")).strip()
                if h:
                    blocks.append("#" * _HEADINGS[name] + " " + h)
            elif name == "pre":
                flush()
                code = child.get_text().strip("\n")
                if code.strip():
                    blocks.append("```\n" + code + "\n```")
            elif name == "table":
                flush()
                caption = child.find("caption")
                if caption is not None and caption.find_parent("table") is child:
                    c = _WS.sub(" ", caption.get_text(" ")).strip()
                    if c:
                        blocks.append(c)
                table = markdown_table(_table_rows(child))
                if table:
                    blocks.append(table)
            elif name in _BLOCK:
                flush()
                walk(child)
                flush()
            else:
                walk(child)

    walk(soup)
    flush()
    if not title:
        h1 = soup.find("h1")
        title = _WS.sub(" ", h1.get_text(" ")).strip() if h1 else ""
    return title or stem, "\n\n".join(blocks)
