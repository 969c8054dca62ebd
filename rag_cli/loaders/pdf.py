"""PDF reader (pdfplumber, on pdfminer.six).

Per page, in reading order as pdfplumber gives it (lines top to bottom,
words left to right within a line; no column detection):

- Tables found by `page.find_tables()` (pdfplumber's default "lines"
  strategy: tables drawn with ruling lines) become GitHub-flavoured Markdown
  tables (first row = header) placed where the table's top edge is. The
  characters inside a table's box are removed from the running text, so table
  text appears once. A one-column "table" (usually a framed box) is not a
  table: its text stays running text.
- The other characters become lines (`page.extract_text_lines()`, default
  tolerances); consecutive lines join with `\\n`, and text and tables are
  separated by a blank line.

Pages are joined with a blank line (pages without text add nothing).
`metadata`: `n_pages`, `page_starts` (character offset in the document text
where each page's text starts, one per page; a page without text gets the
offset of the text that follows it), `title`/`author` from the PDF info
dictionary when present, and `pages_without_text` (1-based) when some pages
have no text layer. The document's `fmt` is `pdf`: not heading-aware, since a
PDF line starting with `#` is text, not a heading; the recursive chunker still
keeps each table (one paragraph, no blank lines inside) whole when it fits and
otherwise splits it between rows.

Encrypted (password-protected), corrupt and image-only PDFs raise
`DecodeFailed` with the reason; the loader turns that into a skipped file.
"""

from __future__ import annotations

import io
import re

from .decode import DecodeFailed
from .mdtable import markdown_table
from .normalize import normalize_text

__all__ = ["read_pdf"]

_WS = re.compile(r"\s+")


def _info_str(info: dict, key: str) -> str:
    value = info.get(key)
    return _WS.sub(" ", normalize_text(value)).strip() if isinstance(value, str) else ""


def _outside(bboxes):
    """pdfplumber object filter: keep objects whose centre is outside every bbox
    (the recipe from pdfplumber's docs/issues for text outside tables)."""
    def keep(obj) -> bool:
        if obj.get("object_type") != "char":
            return True
        xm, ym = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
        return not any(x0 <= xm < x1 and top <= ym < bottom for x0, top, x1, bottom in bboxes)
    return keep


def _page_text(page) -> str:
    """One page → text with Markdown tables, in top-to-bottom order."""
    items: list[tuple[float, int, str]] = []  # (top, kind 0=line/1=table, text)
    bboxes = []
    for table in page.find_tables():
        rows = table.extract()
        if max((len(r) for r in rows), default=0) < 2:
            continue  # one column: a framed box, not a table; its text stays running text
        md = markdown_table(rows)
        bboxes.append(table.bbox)
        if md:
            items.append((table.bbox[1], 1, md))
    text_page = page.filter(_outside(bboxes)) if bboxes else page
    for line in text_page.extract_text_lines(return_chars=False):
        if line["text"].strip():
            items.append((line["top"], 0, line["text"].rstrip()))
    items.sort(key=lambda it: it[0])  # stable: equal tops keep lines before tables
    blocks: list[str] = []
    prev_kind = None
    for _top, kind, text in items:
        if kind == 0 and prev_kind == 0:
            blocks[-1] += "\n" + text
        else:
            blocks.append(text)
        prev_kind = kind
    return "\n\n".join(blocks)


def read_pdf(raw: bytes, stem: str) -> tuple[str, str, dict]:
    """PDF bytes → `(title, text, metadata)`, text normalised with `normalize_text`.

    `title`: the info dictionary's `Title`, else `stem`. `text` and
    `metadata` are as described in the module docstring (offsets in
    characters of the normalised text).

    Raises `DecodeFailed` with a reason for a password-protected PDF, bytes
    that pdfminer cannot parse (not a PDF, truncated, corrupt), or a PDF with
    no text layer at all (image-only/scanned: OCR it first).
    """
    import pdfplumber
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect
    from pdfplumber.utils.exceptions import PdfminerException

    try:
        pdf = pdfplumber.open(io.BytesIO(raw))
    except PdfminerException as exc:
        cause = exc.args[0] if exc.args else exc
        if isinstance(cause, PDFPasswordIncorrect):
            raise DecodeFailed("encrypted PDF (needs a password); decrypt it first, e.g. qpdf --decrypt") from None
        if isinstance(cause, PDFEncryptionError):
            raise DecodeFailed(f"encrypted PDF that pdfminer cannot decrypt ({cause})") from None
        raise DecodeFailed(f"not a readable PDF ({type(cause).__name__}: {cause})") from None
    except Exception as exc:  # pdfminer raises many types on broken files
        raise DecodeFailed(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    with pdf:
        pages: list[str] = []
        n_images = 0
        try:
            for page in pdf.pages:
                pages.append(normalize_text(_page_text(page)).strip())
                n_images += len(page.images)
                page.close()  # free the page's parsed objects (large PDFs)
            info = pdf.metadata or {}
        except Exception as exc:  # a page that cannot be parsed: the file is corrupt
            raise DecodeFailed(f"corrupt PDF: page {len(pages) + 1} cannot be read "
                               f"({type(exc).__name__}: {exc})") from None
    if not any(pages):
        if n_images:
            raise DecodeFailed(f"image-only PDF ({len(pages)} page(s), {n_images} image(s), no text layer); "
                               "run OCR first, e.g. ocrmypdf")
        raise DecodeFailed(f"PDF has no text ({len(pages)} page(s))")
    parts: list[str] = []
    starts: list[int] = []
    offset = 0
    pending = 0  # pages without text waiting for the start of the next text
    for text in pages:
        if not text:
            pending += 1
            continue
        if parts:
            offset += 2  # the blank line before this page
        starts.extend([offset] * (pending + 1))
        pending = 0
        parts.append(text)
        offset += len(text)
    starts.extend([offset] * pending)
    meta: dict = {"n_pages": len(pages), "page_starts": starts}
    empty = [i + 1 for i, t in enumerate(pages) if not t]
    if empty:
        meta["pages_without_text"] = empty
    title, author = _info_str(info, "Title"), _info_str(info, "Author")
    if title:
        meta["title"] = title
    if author:
        meta["author"] = author
    return title or stem, "\n\n".join(parts), meta
