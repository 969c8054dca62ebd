"""Time the PDF loader (pdfplumber) on a generated dense PDF.

Builds a PDF with reportlab (the `dev` extra): 150 paragraphs of ~500
characters and a ruled 9-row table after every 10th, about 20 A4 pages; then
times `read_pdf` on its bytes and prints pages, characters, seconds and
seconds per page.

    python bench/pdf_loader.py
"""

from __future__ import annotations

import io
import time

from reportlab.lib import colors
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import Paragraph, SimpleDocTemplate, Table, TableStyle

from rag_cli.loaders.pdf import read_pdf


def build_pdf() -> bytes:
    """The benchmark PDF's bytes (deterministic content)."""
    ss = getSampleStyleSheet()
    story = []
    for i in range(150):
        story.append(Paragraph(f"Paragraph {i}. " + "Retrieval augmented generation splits documents into chunks. " * 8,
                               ss["Normal"]))
        if i % 10 == 0:
            t = Table([["a", "b", "c"]] + [[str(i), str(j), "x"] for j in range(8)])
            t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
            story.append(t)
    buf = io.BytesIO()
    SimpleDocTemplate(buf, invariant=1).build(story)
    return buf.getvalue()


def main() -> None:
    raw = build_pdf()
    t0 = time.perf_counter()
    _title, text, meta = read_pdf(raw, "bench")
    dt = time.perf_counter() - t0
    n = meta["n_pages"]
    print(f"{n} pages, {len(text)} characters, {text.count(chr(10) + '| --- |')} tables: "
          f"{dt:.2f} s, {dt / n:.3f} s/page")


if __name__ == "__main__":
    main()
