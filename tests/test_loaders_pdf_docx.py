"""PDF (pdfplumber) and DOCX (python-docx) loaders, on real files built here
with reportlab and python-docx."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import docx
import pyarrow.parquet as pq
import pytest
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
# reportlab is in the `dev` extra; pdfplumber and python-docx are runtime dependencies
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.pdfencrypt import StandardEncryption
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen import canvas
from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from rag_cli.chunking import chunk_documents
from rag_cli.loaders import load_sources
from rag_cli.loaders.mdtable import markdown_table
from rag_cli.loaders.pdf import read_pdf
from rag_cli.loaders.word import read_docx


# --------------------------------------------------------------------------- building real files

PDF_PAGE1 = (
    "Hybrid search\n"
    "BM25 and dense retrieval are fused by RRF.\n"
    "Second paragraph of page one.\n"
    "\n"
    "| Method | Recall@10 | Notes |\n"
    "| --- | --- | --- |\n"
    "| BM25 | 0.71 | sparse |\n"
    "| Hybrid \\| RRF | 0.78 | fused by rank |\n"
    "\n"
    "Text after the table."
)
PDF_PAGE2 = "Page two starts here.\nIt has two lines."
PDF_TEXT = PDF_PAGE1 + "\n\n" + PDF_PAGE2


def make_pdf(path: Path) -> Path:
    """Two pages: text, a ruled 3x3 table with a '|' in a cell, text; page 2 text."""
    ss = getSampleStyleSheet()
    doc = SimpleDocTemplate(str(path), pagesize=A4, title="Retrieval Notes", author="Ada Lovelace",
                            invariant=1)
    table = Table([["Method", "Recall@10", "Notes"], ["BM25", "0.71", "sparse"],
                   ["Hybrid | RRF", "0.78", "fused by rank"]])
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
    doc.build([
        Paragraph("Hybrid search", ss["Heading1"]),
        Paragraph("BM25 and dense retrieval are fused by RRF.", ss["Normal"]),
        Paragraph("Second paragraph of page one.", ss["Normal"]),
        Spacer(1, 12), table, Spacer(1, 12),
        Paragraph("Text after the table.", ss["Normal"]),
        PageBreak(),
        Paragraph("Page two starts here.<br/>It has two lines.", ss["Normal"]),
    ])
    return path


def make_canvas_pdf(path: Path, lines: list[str], *, font: str = "Helvetica", encrypt=None,
                    image: Path | None = None) -> Path:
    """One page with `lines` drawn top-down (and an image when given)."""
    c = canvas.Canvas(str(path), encrypt=encrypt, invariant=1)
    c.setFont(font, 12)
    for i, line in enumerate(lines):
        c.drawString(72, 720 - 20 * i, line)
    if image is not None:
        c.drawImage(str(image), 72, 400, 100, 100)
    c.save()
    return path


def make_docx(path: Path) -> Path:
    """Headings (levels 1-3), body text, a table with a merged cell, a body
    paragraph that looks like a Markdown heading, core title/author."""
    d = docx.Document()
    d.core_properties.title = "Index Guide"
    d.core_properties.author = "Grace Hopper"
    d.add_paragraph("Guide to indexes", style="Title")
    d.add_heading("Setup", level=1)
    d.add_paragraph("Install the tool.")
    d.add_paragraph("")  # empty paragraphs are dropped
    d.add_heading("Indexes", level=2)
    d.add_paragraph("HNSW builds a graph.")
    t = d.add_table(rows=3, cols=3)
    for i, row in enumerate([["Param", "Default", "Meaning"], ["M", "32", "links per node"],
                             ["ef", "128", "search beam | list"]]):
        for j, v in enumerate(row):
            t.cell(i, j).text = v
    t.cell(1, 1).merge(t.cell(1, 2))  # "32" and "links per node" in one merged cell
    d.add_heading("Tuning", level=3)
    d.add_paragraph("# not a heading, just text")
    d.add_heading("Usage", level=1)
    d.add_paragraph("Run rag index.")
    d.save(str(path))
    return path


DOCX_TEXT = (
    "Guide to indexes\n\n"
    "# Setup\n\n"
    "Install the tool.\n\n"
    "## Indexes\n\n"
    "HNSW builds a graph.\n\n"
    "| Param | Default | Meaning |\n"
    "| --- | --- | --- |\n"
    "| M | 32 links per node |  |\n"
    "| ef | 128 | search beam \\| list |\n\n"
    "### Tuning\n\n"
    "\\# not a heading, just text\n\n"
    "# Usage\n\n"
    "Run rag index."
)


# --------------------------------------------------------------------------- Markdown tables

def test_markdown_table_cells_pipes_padding_and_empty_rows():
    rows = [["a", "b|c", None], ["1\n2", None], [None, "", "  "], ["x", "y", "z"]]
    assert markdown_table(rows) == (
        "| a | b\\|c |  |\n"
        "| --- | --- | --- |\n"
        "| 1 2 |  |  |\n"
        "| x | y | z |"
    )
    assert markdown_table([[None, ""], ["", None]]) == ""
    assert markdown_table([["only", "header"]]) == "| only | header |\n| --- | --- |"


# --------------------------------------------------------------------------- PDF

def test_pdf_text_table_order_pages_and_metadata(tmp_path):
    path = make_pdf(tmp_path / "notes.pdf")
    r = load_sources([str(path)])
    assert not r.skipped
    (doc,) = r.documents
    assert doc.text == PDF_TEXT
    # the table's cells appear only inside the Markdown table
    assert doc.text.count("Recall@10") == 1 and doc.text.count("fused by rank") == 1
    assert doc.fmt == "pdf" and doc.doc_id == "notes.pdf" and doc.title == "Retrieval Notes"
    assert doc.n_chars == len(doc.text)
    assert doc.metadata == {"n_pages": 2, "page_starts": [0, len(PDF_PAGE1) + 2],
                            "title": "Retrieval Notes", "author": "Ada Lovelace"}
    assert doc.text[doc.metadata["page_starts"][1]:] == PDF_PAGE2


def test_pdf_chunks_keep_the_table_whole(tmp_path):
    (doc,) = load_sources([str(make_pdf(tmp_path / "notes.pdf"))]).documents
    table = PDF_PAGE1.split("\n\n")[1]
    chunks = chunk_documents([doc], strategy="recursive", size=len(table) + 10, overlap=0, unit="chars")
    assert table in [c.text for c in chunks]
    assert all(c.title_path == [] for c in chunks)  # PDF is not heading-aware


def test_pdf_without_info_title_uses_stem_and_lists_pages_without_text(tmp_path):
    path = tmp_path / "two.pdf"
    c = canvas.Canvas(str(path), invariant=1)
    c.setTitle("")
    c.showPage()  # page 1: empty
    c.drawString(72, 720, "Only page two has text.")
    c.showPage()
    c.save()
    title, text, meta = read_pdf(path.read_bytes(), "two")
    assert title == "two" and text == "Only page two has text."
    assert meta["n_pages"] == 2 and meta["page_starts"] == [0, 0] and meta["pages_without_text"] == [1]


def test_pdf_one_column_ruled_box_is_text_not_a_table(tmp_path):
    path = tmp_path / "box.pdf"
    box = Table([["Boxed note one."], ["Boxed note two."]])
    box.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))  # pdfplumber finds a 1-column table
    SimpleDocTemplate(str(path), invariant=1).build([Paragraph("Before the box.", getSampleStyleSheet()["Normal"]), box])
    _title, text, _meta = read_pdf(path.read_bytes(), "box")
    assert text == "Before the box.\nBoxed note one.\nBoxed note two."


def test_pdf_chinese_cid_font_is_normalised(tmp_path):
    # No CJK TTF is installed here (fc-list :lang=zh is empty); reportlab's
    # built-in Adobe CID font STSong-Light (not embedded, UniGB-UCS2-H) needs none,
    # and pdfminer maps its CIDs back to Unicode.
    pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    path = make_canvas_pdf(tmp_path / "zh.pdf", ["中文检索需要分词，例如“北京大学”。", "ＡＰＩ 全角字母！"],
                           font="STSong-Light")
    (doc,) = load_sources([str(path)]).documents
    # NFKC: full-width comma, letters and '!' fold to ASCII; '。' and curly quotes stay
    assert doc.text == "中文检索需要分词,例如“北京大学”。\nAPI 全角字母!"


def test_bad_pdfs_are_skipped_with_reasons(tmp_path):
    from PIL import Image

    good = make_pdf(tmp_path / "good.pdf")
    raw = good.read_bytes()
    (tmp_path / "truncated.pdf").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "notapdf.pdf").write_bytes(b"hello, I am plain text with a .pdf name")
    (tmp_path / "zero.pdf").write_bytes(b"")
    make_canvas_pdf(tmp_path / "locked.pdf", ["secret"], encrypt=StandardEncryption("pw", ownerPassword="own"))
    make_canvas_pdf(tmp_path / "open-encrypted.pdf", ["readable without a password"],
                    encrypt=StandardEncryption("", ownerPassword="own"))
    Image.new("RGB", (40, 40), "red").save(tmp_path / "scan.png")
    make_canvas_pdf(tmp_path / "scanned.pdf", [], image=tmp_path / "scan.png")
    make_canvas_pdf(tmp_path / "blank.pdf", [])
    r = load_sources([str(tmp_path)])
    assert [d.doc_id for d in r.documents] == ["good.pdf", "open-encrypted.pdf"]
    assert r.documents[1].text == "readable without a password"
    reasons = {Path(s.path).name: s.reason for s in r.skipped}
    assert reasons == {
        "blank.pdf": "PDF has no text (1 page(s))",
        "locked.pdf": "encrypted PDF (needs a password); decrypt it first, e.g. qpdf --decrypt",
        "notapdf.pdf": "not a readable PDF (PDFSyntaxError: No /Root object! - Is this really a PDF?)",
        "scan.png": reasons["scan.png"],
        "scanned.pdf": "image-only PDF (1 page(s), 1 image(s), no text layer); run OCR first, e.g. ocrmypdf",
        "truncated.pdf": reasons["truncated.pdf"],
        "zero.pdf": "empty file (0 bytes)",
    }
    assert reasons["scan.png"].startswith("unsupported file type '.png'")
    assert reasons["truncated.pdf"].startswith("not a readable PDF (")


# --------------------------------------------------------------------------- DOCX

def test_docx_headings_table_order_and_metadata(tmp_path):
    make_docx(tmp_path / "guide.docx")
    (doc,) = load_sources([str(tmp_path)]).documents
    assert doc.text == DOCX_TEXT
    assert doc.fmt == "docx" and doc.title == "Index Guide"
    assert doc.metadata == {"title": "Index Guide", "author": "Grace Hopper"}
    assert doc.n_chars == len(doc.text)


def test_docx_title_path_from_headings(tmp_path):
    (doc,) = load_sources([str(make_docx(tmp_path / "guide.docx"))]).documents
    chunks = chunk_documents([doc], strategy="recursive", size=400, overlap=0, unit="chars")
    assert [(c.title_path, c.text) for c in chunks] == [
        ([], "Guide to indexes"),
        (["Setup"], "Install the tool."),
        (["Setup", "Indexes"], DOCX_TEXT.split("## Indexes\n\n")[1].split("\n\n### ")[0]),
        (["Setup", "Indexes", "Tuning"], "\\# not a heading, just text"),
        (["Usage"], "Run rag index."),
    ]


def test_docx_title_fallbacks_and_outline_level_headings(tmp_path):
    d = docx.Document()
    d.core_properties.title = ""
    # a localised heading style: no "Heading N" name, outline level 0 => level 1
    style = d.styles.add_style("标题一", WD_STYLE_TYPE.PARAGRAPH)
    lvl = OxmlElement("w:outlineLvl")
    lvl.set(qn("w:val"), "0")
    style.element.get_or_add_pPr().append(lvl)
    d.add_paragraph("第一章 检索", style="标题一")
    d.add_paragraph("向量检索，然后回答。")
    buf = io.BytesIO()
    d.save(buf)
    title, text, meta = read_docx(buf.getvalue(), "stem")
    assert title == "第一章 检索"  # no core title, no Title paragraph: the first heading
    assert text == "# 第一章 检索\n\n向量检索,然后回答。"
    assert "title" not in meta


def test_docx_vertically_merged_cell_written_once():
    d = docx.Document()
    t = d.add_table(rows=3, cols=2)
    for i, row in enumerate([["k", "v"], ["a", "1"], ["b", "2"]]):
        for j, v in enumerate(row):
            t.cell(i, j).text = v
    t.cell(1, 1).merge(t.cell(2, 1))
    buf = io.BytesIO()
    d.save(buf)
    assert read_docx(buf.getvalue(), "s")[1] == "| k | v |\n| --- | --- |\n| a | 1 2 |\n| b |  |"


def test_corrupt_docx_is_skipped_with_reason(tmp_path):
    make_docx(tmp_path / "ok.docx")
    (tmp_path / "garbage.docx").write_bytes(b"PK\x03\x04 not really a zip")
    with zipfile.ZipFile(tmp_path / "nodoc.docx", "w") as z:
        z.writestr("hello.txt", "a zip without word/document.xml")
    r = load_sources([str(tmp_path)])
    assert [d.doc_id for d in r.documents] == ["ok.docx"]
    reasons = {Path(s.path).name: s.reason for s in r.skipped}
    assert sorted(reasons) == ["garbage.docx", "nodoc.docx"]
    assert all(v.startswith("not a readable .docx (") for v in reasons.values()), reasons


# --------------------------------------------------------------------------- end to end

@pytest.mark.e2e
def test_chunk_cli_on_pdf_docx_md_folder(tmp_path, tiny_bi_encoder, check_contract):
    src = tmp_path / "docs"
    src.mkdir()
    make_pdf(src / "notes.pdf")
    make_docx(src / "guide.docx")
    (src / "readme.md").write_text("# Readme\n\nPlain Markdown text.\n", encoding="utf-8")
    (src / "broken.pdf").write_bytes(b"%PDF-1.4\n garbage")
    (src / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    project = tmp_path / "proj"
    cmd = [sys.executable, "-m", "rag_cli", "chunk", str(src), "-p", str(project), "--model",
           str(tiny_bi_encoder), "--unit", "chars", "--size", "400", "--overlap", "0"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    assert res.returncode == 0, res.stderr
    assert "3 documents ->" in res.stderr
    assert f"skipped {src / 'broken.pdf'}: not a readable PDF (" in res.stderr
    assert f"skipped {src / 'logo.png'}: unsupported file type '.png'" in res.stderr
    res = subprocess.run(cmd + ["--json"], capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["n_docs"] == 3 and len(summary["skipped"]) == 2

    docs = {r["doc_id"]: r for r in pq.read_table(project / "docs.parquet").to_pylist()}
    assert sorted(docs) == ["guide.docx", "notes.pdf", "readme.md"]
    assert docs["notes.pdf"]["title"] == "Retrieval Notes" and docs["guide.docx"]["title"] == "Index Guide"
    assert json.loads(docs["notes.pdf"]["metadata"])["n_pages"] == 2
    assert docs["notes.pdf"]["n_chars"] == len(PDF_TEXT)
    chunks = pq.read_table(project / "chunks.parquet").to_pylist()
    paths = [c["title_path"] for c in chunks if c["doc_id"] == "guide.docx"]
    assert paths == [[], ["Setup"], ["Setup", "Indexes"], ["Setup", "Indexes", "Tuning"], ["Usage"]]
    embed = next(c["embed_text"] for c in chunks if c["doc_id"] == "guide.docx" and c["ordinal"] == 1)
    assert embed.startswith("Setup") and embed.endswith("Install the tool.")
    check_contract(project)
