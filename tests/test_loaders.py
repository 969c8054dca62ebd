"""Loaders: formats, encodings, doc ids, BEIR corpora, errors."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from rag_cli.errors import BadInput
from rag_cli.loaders import decode_bytes, load_sources, normalize_text
from rag_cli.loaders.html import html_available


ZH = "检索增强生成把文档切成小块，再用向量检索找到相关的段落。然后模型根据这些段落回答问题！"


def test_normalize_text():
    assert normalize_text("\ufeffa\r\nb\rc") == "a\nb\nc"
    assert normalize_text("ﬁ Ａ１，！") == "fi A1,!"
    assert normalize_text("你好。") == "你好。"


def test_markdown_front_matter_title_and_metadata(tmp_path):
    (tmp_path / "a.md").write_text(
        "---\ntitle: \"Hello Doc\"\ntags: [x, y]\nauthor: me\nnested:\n  - z\n---\n# Heading One\n\nBody.\n",
        encoding="utf-8")
    (tmp_path / "b.md").write_text("intro\n\n```\n# not a heading\n```\n## Second\ntext\n", encoding="utf-8")
    (tmp_path / "c.markdown").write_text("no headings here\n", encoding="utf-8")
    docs = {d.doc_id: d for d in load_sources([str(tmp_path)]).documents}
    a = docs["a.md"]
    assert a.title == "Hello Doc"
    assert a.metadata["tags"] == ["x", "y"] and a.metadata["author"] == "me"
    assert "nested" in a.metadata  # key with empty value kept
    assert a.text.startswith("# Heading One")  # front matter removed
    assert a.n_chars == len(a.text)
    assert docs["b.md"].title == "Second"  # code-fence '#' is not a heading
    assert docs["c.markdown"].title == "c"
    assert all(d.fmt == "markdown" for d in docs.values())


def test_doc_ids_folder_file_glob(tmp_path):
    sub = tmp_path / "docs" / "sub"
    sub.mkdir(parents=True)
    (sub / "x.txt").write_text("hello", encoding="utf-8")
    (tmp_path / "docs" / "y.rst").write_text("world", encoding="utf-8")
    (tmp_path / "docs" / ".hidden.txt").write_text("secret", encoding="utf-8")
    (tmp_path / "docs" / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    r = load_sources([str(tmp_path / "docs")])
    assert [d.doc_id for d in r.documents] == ["sub/x.txt", "y.rst"]
    assert any(s.path.endswith("img.png") and "unsupported" in s.reason for s in r.skipped)
    r = load_sources([str(sub / "x.txt")])
    assert r.documents[0].doc_id == "x.txt"
    r = load_sources([str(tmp_path / "docs" / "**" / "*.txt")])
    assert [d.doc_id for d in r.documents] == ["sub/x.txt"]


def test_document_fields(tmp_path):
    p = tmp_path / "n.txt"
    p.write_bytes(b"line1\r\nline2\r\n")
    d = load_sources([str(p)]).documents[0]
    import hashlib
    assert d.sha256 == hashlib.sha256(b"line1\r\nline2\r\n").hexdigest()
    assert d.text == "line1\nline2\n" and d.n_chars == 12
    assert isinstance(d.mtime, float) and abs(d.mtime - os.stat(p).st_mtime) < 1e-6
    assert d.title == "n" and d.path == str(p)


@pytest.mark.parametrize("encoding", ["gbk", "gb18030", "utf-16", "utf-16-le", "utf-8-sig"])
def test_encoding_detection(tmp_path, encoding):
    text = ZH + "\n" + ZH.replace("检索", "搜索") + "\n"
    p = tmp_path / f"doc-{encoding}.txt"
    p.write_bytes(text.encode(encoding))
    d = load_sources([str(p)]).documents[0]
    assert d.text == normalize_text(text)
    assert not d.text.startswith("\ufeff")


FR_LONG = ("Le café est très apprécié à Paris. Les élèves vont à l'école le matin, "
           "où le maître leur apprend le français. Naïve idée, très déçu.\n") * 3
DE_LONG = ("Die Größe der Straße überrascht. Müller fährt früh nach Köln, "
           "äußerst schön ist die Brücke über den Fluß.\n") * 3


@pytest.mark.parametrize("text, encoding", [
    (FR_LONG, "latin-1"), ("café naïve", "latin-1"), (FR_LONG, "cp1252"), ("Naïve à l'école", "cp1252"),
    (DE_LONG, "latin-1"), ("Grüße aus Köln", "latin-1"), (DE_LONG, "cp1252"), ("Größe", "cp1252"),
    ("“Smart quotes” – en dash… café", "cp1252"),
    ("日本語のテキストです。東京は日本の首都です。カタカナもひらがなも使います。", "shift_jis"),
    ("日本語です", "shift_jis"),
])
def test_decode_legacy_western_and_japanese(text, encoding):
    # charset-normalizer over all codecs read these as cp1257/iso8859_10/cp1006
    # ("très" → "trčs", "café" → "cafķ"); the restricted candidate list does not.
    decoded, _ = decode_bytes(text.encode(encoding))
    assert decoded == text


def test_decode_latin1_file_loads_exactly(tmp_path):
    p = tmp_path / "fr.txt"
    p.write_bytes(FR_LONG.encode("latin-1"))
    d = load_sources([str(p)]).documents[0]
    assert d.text == normalize_text(FR_LONG)


def test_decode_implausible_bytes_refused_with_reason():
    from rag_cli.loaders import DecodeFailed
    with pytest.raises(DecodeFailed, match="convert it to UTF-8"):
        decode_bytes(bytes(range(1, 256)) * 8)


def test_decode_bytes_utf8_bom_and_binary():
    assert decode_bytes(b"\xef\xbb\xbfabc") == ("abc", "utf-8-sig")
    from rag_cli.loaders import DecodeFailed
    with pytest.raises(DecodeFailed):
        decode_bytes(bytes(range(256)) * 8)


def test_binary_and_empty_skipped_not_crash(tmp_path):
    (tmp_path / "bin.txt").write_bytes(bytes(range(256)) * 16)
    (tmp_path / "empty.md").write_text("  \n\n", encoding="utf-8")
    (tmp_path / "ok.txt").write_text("fine", encoding="utf-8")
    r = load_sources([str(tmp_path)])
    assert [d.doc_id for d in r.documents] == ["ok.txt"]
    reasons = {Path(s.path).name: s.reason for s in r.skipped}
    assert "binary" in reasons["bin.txt"] or "encoding" in reasons["bin.txt"]
    assert "no text" in reasons["empty.md"]


def test_html(tmp_path):
    assert html_available(), "beautifulsoup4, a dependency of rag-cli, is not installed"
    (tmp_path / "p.html").write_text(
        "<html><head><title>Page T</title><style>.x{}</style><script>var a=1;</script></head>"
        "<body><nav>Home | About</nav><h1>Main</h1><p>First <b>bold</b> para.</p>"
        "<h2>Sub</h2><p>Line<br>break</p><pre>  code\n  # hash</pre></body></html>", encoding="utf-8")
    d = load_sources([str(tmp_path / "p.html")]).documents[0]
    assert d.title == "Page T"
    assert "var a" not in d.text and "Home" not in d.text and ".x{}" not in d.text
    assert "# Main" in d.text and "## Sub" in d.text
    assert "First bold para." in d.text and "Line\nbreak" in d.text
    assert "```\n  code\n  # hash\n```" in d.text


def test_missing_source_and_no_documents(tmp_path):
    with pytest.raises(BadInput, match="nope"):
        load_sources([str(tmp_path / "nope")])
    with pytest.raises(BadInput, match=r"\*\.zzz"):
        load_sources([str(tmp_path / "*.zzz")])
    (tmp_path / "a.bin").write_bytes(b"\x00\x01")
    with pytest.raises(BadInput, match="no documents"):
        load_sources([str(tmp_path)])
    with pytest.raises(BadInput, match="--format"):
        load_sources([str(tmp_path)], fmt="pdfx")


def test_duplicate_doc_id_is_bad_input(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "README.md").write_text("# x\n", encoding="utf-8")
    with pytest.raises(BadInput, match="README.md"):
        load_sources([str(tmp_path / "a"), str(tmp_path / "b")])


def test_same_file_twice_is_skipped(tmp_path):
    (tmp_path / "a.txt").write_text("x", encoding="utf-8")
    r = load_sources([str(tmp_path), str(tmp_path / "a.txt")])
    assert len(r.documents) == 1 and "already loaded" in r.skipped[0].reason


def test_beir_scifact(scifact_dir):
    corpus = scifact_dir / "corpus.jsonl.gz"
    r = load_sources([str(corpus)], fmt="beir")
    docs = r.documents
    assert len(docs) == 5183 and not r.skipped
    assert all(isinstance(d.doc_id, str) for d in docs)
    assert len({d.doc_id for d in docs}) == 5183
    d = docs[0]
    assert d.doc_id == "4983" and d.fmt == "beir" and d.path == str(corpus)
    with gzip.open(corpus, "rb") as fh:
        first = fh.readline().rstrip(b"\n")
    rec = json.loads(first)
    import hashlib
    assert d.sha256 == hashlib.sha256(first).hexdigest()
    assert d.title == rec["title"]
    assert d.text == rec["title"] + "\n\n" + normalize_text(rec["text"])
    assert d.text[d.metadata["body_start"]:] == normalize_text(rec["text"])
    # auto detects a .jsonl.gz file source as BEIR too
    assert len(load_sources([str(corpus)]).documents) == 5183


def test_beir_cmrc(cmrc_dir):
    docs = load_sources([str(cmrc_dir / "corpus.jsonl")], fmt="beir").documents
    assert len(docs) == 256
    assert docs[0].doc_id == "TRIAL_800" and docs[0].title == "泡泡战士"
    assert docs[0].text.startswith("泡泡战士\n\n")


def test_beir_errors(tmp_path):
    p = tmp_path / "corpus.jsonl"
    p.write_text('{"_id": "1", "text": "a"}\n{"_id": "1", "text": "b"}\n', encoding="utf-8")
    with pytest.raises(BadInput, match="line 2"):
        load_sources([str(p)], fmt="beir")
    p.write_text('{"_id": "1", "text": "a"}\nnot json\n', encoding="utf-8")
    with pytest.raises(BadInput, match="line 2"):
        load_sources([str(p)], fmt="beir")
    p.write_text('{"title": "t", "text": "a"}\n', encoding="utf-8")
    with pytest.raises(BadInput, match="_id"):
        load_sources([str(p)], fmt="beir")
    p.write_text('{"_id": 7, "text": "no title"}\n{"_id": "8", "title": "", "text": ""}\n', encoding="utf-8")
    r = load_sources([str(p)], fmt="beir")
    assert [d.doc_id for d in r.documents] == ["7"] and r.documents[0].text == "no title"
    assert r.documents[0].metadata["body_start"] == 0 and len(r.skipped) == 1


def test_html_table_becomes_markdown_table(tmp_path):
    assert html_available(), "beautifulsoup4, a dependency of rag-cli, is not installed"
    # Like the PDF and DOCX readers: the first row is the header, `|` escaped,
    # whitespace collapsed, colspan padded, empty rows dropped.
    (tmp_path / "t.html").write_text(
        "<html><body><p>Before</p><table><caption>Scores</caption>"
        "<thead><tr><th>a</th><th>b</th><th>c</th></tr></thead>"
        "<tbody><tr><td>1</td><td>2\n  two</td><td>x|y</td></tr>"
        "<tr><td colspan='2'>wide</td><td>3</td></tr><tr><td></td><td> </td></tr>"
        "<tr><td>4<script>bad()</script></td></tr></tbody></table><p>After</p></body></html>",
        encoding="utf-8")
    d = load_sources([str(tmp_path / "t.html")]).documents[0]
    assert d.text == ("Before\n\nScores\n\n| a | b | c |\n| --- | --- | --- |\n| 1 | 2 two | x\\|y |\n"
                      "| wide |  | 3 |\n| 4 |  |  |\n\nAfter")
