"""Chunking: offsets invariant, coverage, sizes, strategies, flags, tables."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_cli.chunking import (chunk_document, chunk_documents, chunk_stats, chunks_table, docs_table,
                              load_tokenizer)
from rag_cli.errors import BadInput
from rag_cli.loaders import Document, load_sources, normalize_text

EN = ("Retrieval-augmented generation splits documents into chunks. Each chunk is embedded! "
      "Is the nearest chunk relevant? Usually, but not always, it is.\n\n"
      "A second paragraph follows here, with commas, clauses and a list: apples, pears, plums.\n"
      "A new line starts here and goes on for a while without any sentence end at all so that it is long\n\n") * 6
ZH = ("检索增强生成把文档切成小块，再用向量检索找到相关的段落。模型根据这些段落回答问题！"
      "这样做可靠吗？通常可靠；但也不总是这样。\n\n"
      "第二段讲分块的方法、重叠的大小、以及单位的选择。每个块都有起止位置。\n") * 6
MIXED = ("RAG 系统（retrieval-augmented generation）先检索再生成。It uses BM25 和 dense vectors, "
         "然后用 cross-encoder 重排！Offsets must be exact。\n\n# 标题\n\n内容在这里。") * 5


def doc(text: str, doc_id: str = "d", fmt: str = "text") -> Document:
    text = normalize_text(text)
    return Document(doc_id=doc_id, path=doc_id, sha256="0" * 64, mtime=0.0, n_chars=len(text), title=doc_id,
                    text=text, metadata={}, fmt=fmt)


@pytest.fixture(scope="module")
def tok(e5_tokenizer_json):
    """multilingual-e5-small's tokenizer (tests/conftest.py finds it; missing: skip, or fail under CI)."""
    return load_tokenizer(str(e5_tokenizer_json))


def check_invariants(d: Document, chunks, size: int, *, strategy: str = "recursive"):
    assert chunks, "no chunks"
    for i, c in enumerate(chunks):
        assert c.ordinal == i and c.chunk_id == f"{d.doc_id}#{i}" and c.doc_id == d.doc_id
        assert d.text[c.start_char:c.end_char] == c.text
        assert c.text.strip(), "empty chunk"
        if strategy != "fixed":
            assert c.text == c.text.strip()
        assert c.n_units <= size or c.oversized
    covered = [False] * len(d.text)
    for c in chunks:
        for i in range(c.start_char, c.end_char):
            covered[i] = True
    missing = [i for i, ch in enumerate(d.text) if not ch.isspace() and not covered[i]]
    assert not missing, f"uncovered characters at {missing[:5]}"
    starts = [c.start_char for c in chunks]
    assert starts == sorted(starts)


@pytest.mark.parametrize("text", [EN, ZH, MIXED], ids=["en", "zh", "mixed"])
@pytest.mark.parametrize("size,overlap", [(40, 0), (80, 16), (200, 32), (7, 3)])
def test_recursive_chars_invariants(text, size, overlap):
    d = doc(text)
    chunks = chunk_document(d, size=size, overlap=overlap, unit="chars")
    check_invariants(d, chunks, size)
    assert all(c.n_tokens is None for c in chunks)


@pytest.mark.parametrize("text", [EN, ZH, MIXED], ids=["en", "zh", "mixed"])
@pytest.mark.parametrize("size,overlap", [(16, 4), (64, 8), (256, 32)])
def test_recursive_tokens_invariants(tok, text, size, overlap):
    d = doc(text)
    chunks = chunk_document(d, size=size, overlap=overlap, unit="tokens", tokenizer=tok)
    check_invariants(d, chunks, size)
    for c in chunks:
        assert c.n_tokens == c.n_units
        # the count matches encoding the chunk alone (whole-document offsets are additive)
        assert abs(len(tok.encode(c.text, add_special_tokens=False).ids) - c.n_tokens) <= 1


@pytest.mark.parametrize("text", [EN, ZH, MIXED], ids=["en", "zh", "mixed"])
def test_markdown_and_fixed_invariants(tok, text):
    d = doc(text, fmt="markdown")
    check_invariants(d, chunk_document(d, strategy="fixed", size=50, overlap=10, tokenizer=tok), 50,
                     strategy="fixed")
    chunks = chunk_document(d, strategy="markdown", size=50, overlap=10, tokenizer=tok)
    for c in chunks:
        assert d.text[c.start_char:c.end_char] == c.text and c.text.strip()


def test_overlap_is_carried():
    d = doc("One. Two. Three. Four. Five. Six. Seven. Eight. Nine. Ten.")
    chunks = chunk_document(d, size=20, overlap=8, unit="chars")
    assert any(b.start_char < a.end_char for a, b in zip(chunks, chunks[1:]))
    no = chunk_document(d, size=20, overlap=0, unit="chars")
    assert all(b.start_char >= a.end_char for a, b in zip(no, no[1:]))


def test_chinese_sentence_splitting():
    sents = ["第一句话在这里。", "第二句话很激动！", "第三句是问题吗？", "第四句有分号；", "第五句结束。"]
    d = doc("".join(sents))
    chunks = chunk_document(d, size=9, overlap=0, unit="chars")
    assert [c.text for c in chunks] == [normalize_text(s) for s in sents]


def test_comma_level_split_before_characters():
    d = doc("苹果、香蕉、橘子、葡萄、西瓜、草莓、蓝莓、芒果")
    chunks = chunk_document(d, size=7, overlap=0, unit="chars")
    assert all(c.text.endswith("、") or c is chunks[-1] for c in chunks)


def test_unbreakable_unit_is_reported():
    d = doc("x" * 50 + " short")
    chunks = chunk_document(d, size=10, overlap=0, unit="chars")
    # no separator inside the x-run: split at characters, never over size
    assert all(c.n_units <= 10 for c in chunks)
    check_invariants(d, chunks, 10)


def test_oversized_token_unit_counted(tok):
    # "▁" and "中文" both start at the first character: one character worth two
    # tokens cannot be split, so with size=1 those chunks are oversized and counted
    d = doc("中文 中文 中文")
    chunks = chunk_document(d, size=1, overlap=0, tokenizer=tok)
    check_invariants(d, chunks, 1)
    stats = chunk_stats(chunks)
    assert stats.n_oversized >= 1 and stats.max_units == 2
    assert all(c.oversized == (c.n_units > 1) for c in chunks)


@pytest.mark.parametrize("T,C,O,k", [(3360, 1024, 128, 4), (3000, 512, 64, 7), (3000, 512, 128, 8)])
def test_fixed_window_counts_chars(T, C, O, k):
    d = doc(("abcdefghi " * (T // 10 + 1))[:T])
    chunks = chunk_document(d, strategy="fixed", size=C, overlap=O, unit="chars")
    assert len(chunks) == k == 1 + math.ceil((T - C) / (C - O))
    for a, b in zip(chunks, chunks[1:]):
        assert a.end_char - b.start_char == O
    assert all(c.end_char - c.start_char == C for c in chunks[:-1])
    assert chunks[-1].end_char == T


def test_fixed_window_tokens(tok):
    d = doc(EN)
    T = len(tok.encode(d.text, add_special_tokens=False).ids)
    C, O = 64, 16
    chunks = chunk_document(d, strategy="fixed", size=C, overlap=O, tokenizer=tok)
    assert len(chunks) == 1 + math.ceil((T - C) / (C - O))
    assert all(c.n_tokens == C for c in chunks[:-1])


MD = """Intro text before any heading.

# Guide

Welcome.

## Install

Run this:

```bash
# this is a comment, not a heading
pip install rag-cli
```

### Linux

Use apt.

## Usage

Call it.

# Appendix

The end.
"""


def test_markdown_heading_paths_and_code_fences():
    d = doc(MD, fmt="markdown")
    for strategy in ("markdown", "recursive"):  # recursive on Markdown is heading-aware
        chunks = chunk_document(d, strategy=strategy, size=200, overlap=0, unit="chars")
        by_text = {c.text.splitlines()[0]: c.title_path for c in chunks}
        assert by_text["Intro text before any heading."] == []
        assert by_text["Welcome."] == ["Guide"]
        assert by_text["Run this:"] == ["Guide", "Install"]
        assert by_text["Use apt."] == ["Guide", "Install", "Linux"]
        assert by_text["Call it."] == ["Guide", "Usage"]
        assert by_text["The end."] == ["Appendix"]
        install = next(c for c in chunks if c.text.startswith("Run this:"))
        assert "# this is a comment" in install.text  # stayed inside the section
        assert install.embed_text == "Guide > Install\n" + install.text
        assert all(d.text[c.start_char:c.end_char] == c.text for c in chunks)
        assert not any(c.text.startswith("#") and not c.text.startswith("# this") for c in chunks)


def test_markdown_long_section_split_recursively():
    body = "Sentence number one is here. " * 40
    d = doc("# Big\n\n" + body, fmt="markdown")
    chunks = chunk_document(d, strategy="markdown", size=100, overlap=20, unit="chars")
    assert len(chunks) > 5 and all(c.title_path == ["Big"] and c.n_units <= 100 for c in chunks)


def test_plain_text_embed_text_is_text():
    d = doc("# not markdown\n\nplain")
    chunks = chunk_document(d, size=100, overlap=0, unit="chars")
    assert all(c.title_path == [] and c.embed_text == c.text for c in chunks)


@pytest.mark.parametrize("kwargs,flag", [
    (dict(size=0), "--size"), (dict(size=-5), "--size"), (dict(overlap=-1), "--overlap"),
    (dict(size=10, overlap=10), "--overlap"), (dict(size=10, overlap=20), "--overlap"),
    (dict(strategy="semantic"), "--strategy"), (dict(unit="words"), "--unit"),
    (dict(unit="tokens"), "--unit"),  # tokens without a tokenizer
])
def test_bad_flags(kwargs, flag):
    args = dict(size=100, overlap=10, unit="chars")
    args.update(kwargs)
    with pytest.raises(BadInput, match=flag):
        chunk_document(doc("hello"), **args)


def test_tables_columns_and_determinism():
    docs = [doc(EN, "a.txt"), doc(MD, "b.md", fmt="markdown")]
    docs[1].metadata = {"title": "B", "tags": ["x"]}
    chunks = chunk_documents(docs, size=120, overlap=20, unit="chars")
    ct = chunks_table(chunks)
    assert ct.column_names == ["chunk_id", "doc_id", "ordinal", "text", "title_path", "start_char", "end_char",
                               "n_tokens", "parent_id", "sha256", "embed_text"]
    assert str(ct.schema.field("title_path").type) == "list<item: string>"
    assert ct.column("parent_id").null_count == ct.num_rows
    dt = docs_table(docs)
    assert dt.column_names == ["doc_id", "path", "sha256", "mtime", "n_chars", "title", "metadata"]
    assert docs_table(docs, include_text=True).column_names[-1] == "text"
    import hashlib
    assert ct.column("sha256")[0].as_py() == hashlib.sha256(chunks[0].text.encode()).hexdigest()
    again = chunk_documents(docs, size=120, overlap=20, unit="chars")
    assert chunks_table(again).equals(ct) and docs_table(docs).equals(dt)


def test_tables_pass_contract_check(tmp_path, check_contract):
    from rag_cli.atomic import write_parquet
    docs = [doc(EN, "a.txt"), doc(ZH, "z.txt")]
    write_parquet(tmp_path / "docs.parquet", docs_table(docs))
    write_parquet(tmp_path / "chunks.parquet", chunks_table(chunk_documents(docs, size=60, overlap=10, unit="chars")))
    check_contract(tmp_path)
    b1 = (tmp_path / "chunks.parquet").read_bytes()
    write_parquet(tmp_path / "chunks.parquet", chunks_table(chunk_documents(docs, size=60, overlap=10, unit="chars")))
    assert (tmp_path / "chunks.parquet").read_bytes() == b1


def test_cmrc_corpus_tokens(tok, cmrc_dir):
    docs = load_sources([str(cmrc_dir / "corpus.jsonl")], fmt="beir").documents
    chunks = chunk_documents(docs, size=64, overlap=8, tokenizer=tok)
    by_id = {d.doc_id: d for d in docs}
    assert {c.doc_id for c in chunks} == set(by_id)
    for c in chunks:
        assert by_id[c.doc_id].text[c.start_char:c.end_char] == c.text
        assert c.n_tokens <= 64 or c.oversized


@pytest.mark.e2e
def test_scifact_corpus_tokens(tok, scifact_dir):
    docs = load_sources([str(scifact_dir / "corpus.jsonl.gz")], fmt="beir").documents
    chunks = chunk_documents(docs, size=256, overlap=32, tokenizer=tok)
    by_id = {d.doc_id: d for d in docs}
    assert {c.doc_id for c in chunks} == set(by_id)
    assert all(by_id[c.doc_id].text[c.start_char:c.end_char] == c.text for c in chunks)
    assert chunk_stats(chunks).n_oversized == 0
    assert max(c.n_tokens for c in chunks) <= 256


_alphabet = st.sampled_from(list("abc xyz.,!?\n\n\t") + list("中文字。！？；，、") + ["\r\n", "ﬁ", "Ａ", "😀"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(_alphabet, max_size=300), size=st.integers(1, 40), overlap=st.integers(0, 39),
       strategy=st.sampled_from(["recursive", "fixed", "markdown"]))
def test_property_offsets_invariant_chars(parts, size, overlap, strategy):
    overlap = min(overlap, size - 1)
    d = doc("".join(parts), fmt="markdown" if strategy == "markdown" else "text")
    chunks = chunk_document(d, strategy=strategy, size=size, overlap=overlap, unit="chars")
    for c in chunks:
        assert d.text[c.start_char:c.end_char] == c.text and c.text.strip()
        assert c.n_units <= size
    if strategy != "markdown" and d.text.strip():
        check_invariants(d, chunks, size, strategy=strategy)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_alphabet, max_size=200), size=st.integers(2, 30))
def test_property_offsets_invariant_tokens(tok, parts, size):
    d = doc("".join(parts))
    if not d.text.strip():
        return
    chunks = chunk_document(d, size=size, overlap=size // 4, tokenizer=tok)
    check_invariants(d, chunks, size)
