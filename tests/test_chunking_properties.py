"""Chunking invariants as hypothesis properties on random English, Chinese and
mixed text, for `recursive`, `fixed` and `markdown`, in characters and in
tokens of the default model's tokenizer (multilingual-e5-small's
tokenizer.json), plus the CLI's determinism and its oversized-chunk report.

What is guaranteed (`check_chunks` asserts all of it):

- offsets: `text[start_char:end_char] == chunk.text` of the normalised
  document; `chunk_id == doc_id#ordinal`, ordinals 0, 1, ...; starts
  ascending; `n_units` is the span's size in the unit, `n_tokens` its tokens.
- coverage: every non-whitespace character is inside at least one chunk,
  except heading lines with `markdown` (they are `title_path`) and the title
  of a BEIR record (it is `title_path`); so what lies between and around
  chunks is whitespace only (plus those headings/title). (The header lines of
  a Markdown table that alone would be a chunk are dropped too; the texts
  drawn here have no `|`: tests/test_hardening.py covers tables.)
- no chunk is empty or whitespace-only; `recursive`/`markdown` chunks have no
  leading or trailing whitespace (`fixed` windows are not trimmed).
- overlap: `fixed` neighbours share exactly `overlap` units (windows start at
  multiples of `size - overlap`; a missing window was whitespace-only);
  `recursive`/`markdown` neighbours share at most `overlap` units.
- size: `n_units <= size`, except a chunk that is one unbreakable unit (all
  its tokens start at one character), which has `oversized=True`;
  `oversized == (n_units > size)` always. In characters nothing is oversized.
- in tokens, `fixed` is exact as above when no two tokens share a start
  character; otherwise windows and overlaps only shrink (fixed.py).
"""

from __future__ import annotations

import json
import shutil
from bisect import bisect_left
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rag_cli.chunking import chunk_document, chunk_stats, load_tokenizer
from rag_cli.chunking.units import char_counter, token_counters
from rag_cli.cli import app
from rag_cli.loaders import Document, normalize_text
from rag_cli.loaders.markdown import iter_headings

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"

EN = ["the", "chunk", "retrieval", "BM25", "vectors", "e.g.", "3.14", "don't", "HNSW", "a", "is", "overlap",
      "x" * 23, "embedding-model", "U.S."]
ZH = ["检索", "增强", "生成", "文档", "切", "块", "向量", "模型", "中文", "的", "重叠", "长度"]
PUNCT = [".", ",", "!", "?", ";", ":", "。", "，", "！", "？", "；", "、", "（", "）", "“", "”", "\"", "-"]
SPACE = [" ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u3000", " \n \n"]
ODD = ["ﬁ", "Ａ", "😀", "①", "e\u0301", "\u200b"]
HEADINGS = ["\n# 标题\n", "\n## Section two\n", "\n### 三级 heading\n", "\n```\n# not a heading\n```\n", "\n#\n"]

POOLS = {"en": EN + PUNCT[:9], "zh": ZH + PUNCT[6:], "mixed": EN + ZH + PUNCT + ODD}


@st.composite
def texts(draw, markdown: bool = False) -> str:
    """A random document in one of three languages; with `markdown`, with headings and code fences."""
    lang = draw(st.sampled_from(sorted(POOLS)))
    parts = [st.sampled_from(POOLS[lang]), st.sampled_from(SPACE)]
    if markdown:
        parts.append(st.sampled_from(HEADINGS))
    return "".join(draw(st.lists(st.one_of(*parts), max_size=120)))


def make_doc(text: str, fmt: str = "text", title: str | None = None) -> Document:
    """A normalised Document; with `title`, a BEIR record (`title\\n\\ntext`, `body_start`)."""
    text = normalize_text(text)
    meta = {}
    if title is not None:
        title = normalize_text(title)
        text = title + "\n\n" + text
        meta = {"body_start": len(title) + 2}
    return Document(doc_id="doc", path="doc", sha256="0" * 64, mtime=0.0, n_chars=len(text), title=title or "doc",
                    text=text, metadata=meta, fmt=fmt)


@pytest.fixture(scope="module")
def tok(e5_tokenizer_json):
    """multilingual-e5-small's tokenizer (tests/conftest.py finds it; missing: skip, or fail under CI)."""
    return load_tokenizer(str(e5_tokenizer_json))


def excluded_ranges(d: Document, strategy: str) -> list[tuple[int, int]]:
    """Character ranges whose text is `title_path`, not chunk text."""
    if strategy == "markdown":
        return [(hs, he) for hs, he, _l, _t in iter_headings(d.text)]
    if strategy == "recursive" and d.metadata.get("body_start"):
        return [(0, d.metadata["body_start"])]
    return []


def check_chunks(d: Document, chunks, strategy: str, size: int, overlap: int, count) -> None:
    """Assert every property of the module docstring for `chunks` of `d`."""
    text = d.text
    starts = count.starts
    for i, c in enumerate(chunks):
        assert (c.ordinal, c.chunk_id, c.doc_id) == (i, f"doc#{i}", "doc")
        assert text[c.start_char:c.end_char] == c.text
        assert c.text.strip(), "empty or whitespace-only chunk"
        if strategy != "fixed":
            assert c.text == c.text.strip()
        assert c.n_units == count(c.start_char, c.end_char)
        assert c.oversized == (c.n_units > size)
        if c.oversized:  # one unbreakable unit: every token starts at one character
            assert starts is not None, "a chunk over the size in characters"
            assert len(set(starts[bisect_left(starts, c.start_char):bisect_left(starts, c.end_char)])) == 1
    assert [c.start_char for c in chunks] == sorted(c.start_char for c in chunks)

    covered = bytearray(len(text))
    for c in chunks:
        covered[c.start_char:c.end_char] = b"\1" * (c.end_char - c.start_char)
    for a, b in excluded_ranges(d, strategy):
        covered[a:b] = b"\1" * (b - a)
    missing = [i for i, ch in enumerate(text) if not covered[i] and not ch.isspace()]
    assert not missing, f"characters in no chunk at {missing[:5]}: {[text[i] for i in missing[:5]]}"

    for a, b in zip(chunks, chunks[1:]):
        shared = count(b.start_char, a.end_char) if b.start_char < a.end_char else 0
        assert shared <= overlap
    if strategy == "fixed":
        check_fixed(text, chunks, size, overlap, count)


def check_fixed(text: str, chunks, size: int, overlap: int, count) -> None:
    """Windows start every `size - overlap` units, hold `size` units (the last: to the end), and
    neighbours share exactly `overlap`; skipped windows are whitespace-only. In tokens this is exact
    when no two tokens share a start character (else check_chunks' bounds are what holds)."""
    stride = size - overlap
    starts = count.starts
    if starts is not None and len(set(starts)) != len(starts):
        return
    n_units = len(text) if starts is None else len(starts)

    def unit_index(pos: int) -> int:
        return pos if starts is None else (0 if pos == 0 else bisect_left(starts, pos))

    def pos_of(k: int) -> int:
        if k >= n_units:
            return len(text)
        return k if starts is None else (0 if k == 0 else starts[k])

    expected = 1 + max(0, -(-(n_units - size) // stride))  # 1 + ceil((T - C) / (C - O))
    windows = [(pos_of(k * stride), pos_of(k * stride + size)) for k in range(expected)]
    kept = [w for w in windows if text[w[0]:w[1]].strip()]
    assert [(c.start_char, c.end_char) for c in chunks] == kept
    assert windows[-1][1] == len(text)
    for c in chunks:
        assert unit_index(c.start_char) % stride == 0
        assert c.n_units == size or c.end_char == len(text)
    for a, b in zip(chunks, chunks[1:]):
        if unit_index(b.start_char) - unit_index(a.start_char) == stride:
            assert count(b.start_char, a.end_char) == overlap


STRATEGY = st.sampled_from(["recursive", "fixed", "markdown"])


def size_overlap(max_size: int):
    return st.integers(1, max_size).flatmap(lambda c: st.tuples(st.just(c), st.integers(0, c - 1)))


def doc_for(strategy: str, text: str, title: str | None) -> Document:
    if strategy == "markdown":
        return make_doc(text, fmt="markdown")
    return make_doc(text, title=title if strategy == "recursive" else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=STRATEGY, data=st.data(), so=size_overlap(60),
       title=st.one_of(st.none(), st.sampled_from(["A title", "标题：检索", "x"])))
def test_properties_chars(strategy, data, so, title):
    size, overlap = so
    d = doc_for(strategy, data.draw(texts(markdown=strategy == "markdown")), title)
    chunks = chunk_document(d, strategy=strategy, size=size, overlap=overlap, unit="chars")
    check_chunks(d, chunks, strategy, size, overlap, char_counter)
    assert not any(c.oversized for c in chunks)
    assert all(c.n_tokens is None for c in chunks)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(strategy=STRATEGY, data=st.data(), so=size_overlap(40),
       title=st.one_of(st.none(), st.sampled_from(["A title", "标题：检索"])))
def test_properties_tokens(tok, strategy, data, so, title):
    size, overlap = so
    d = doc_for(strategy, data.draw(texts(markdown=strategy == "markdown")), title)
    chunks = chunk_document(d, strategy=strategy, size=size, overlap=overlap, unit="tokens", tokenizer=tok)
    count = token_counters([d.text], tok)[0]
    check_chunks(d, chunks, strategy, size, overlap, count)
    assert all(c.n_tokens == c.n_units for c in chunks)


@pytest.mark.parametrize("size,overlap,first", [(1, 0, "中文"), (2, 1, "中文"), (3, 1, "中文 ")])
def test_fixed_tokens_shared_start_character(tok, size, overlap, first):
    # "▁" and "中文" both start at character 0: no window splits them, none grows over the size
    d = make_doc("中文 中文 中文 中文")
    count = token_counters([d.text], tok)[0]
    assert list(count.starts[:2]) == [0, 0]
    chunks = chunk_document(d, strategy="fixed", size=size, overlap=overlap, tokenizer=tok)
    check_chunks(d, chunks, "fixed", size, overlap, count)
    assert chunks[0].text == first and chunks[0].n_units == max(2, size) and chunks[0].oversized == (size < 2)
    assert chunk_stats(chunks).n_oversized == (1 if size < 2 else 0)
    assert [c.text for c in chunks[1:]][:2] == {1: ["中文", "中文"], 2: [" 中文", "中文 "], 3: [" 中文 ", " 中文 "]}[size]


def test_fixed_known_windows_chars():
    d = make_doc("abcdefghij")
    chunks = chunk_document(d, strategy="fixed", size=4, overlap=1, unit="chars")
    assert [c.text for c in chunks] == ["abcd", "defg", "ghij"]
    chunks = chunk_document(make_doc("ab      cd"), strategy="fixed", size=3, overlap=1, unit="chars")
    assert [(c.start_char, c.text) for c in chunks] == [(0, "ab "), (6, "  c"), (8, "cd")]  # "   " windows dropped


# ------------------------------------------------------------------ the CLI
_runner = CliRunner()


def rag(*args):
    res = _runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.stdout, res.stderr, res.exception)
    return res


@pytest.mark.parametrize("flags", [
    ["--unit", "chars", "--size", "300", "--overlap", "40"],
    ["--unit", "tokens", "--size", "48", "--overlap", "8"],
    ["--strategy", "fixed", "--unit", "tokens", "--size", "40", "--overlap", "10"],
    ["--strategy", "markdown", "--unit", "chars", "--size", "200", "--overlap", "0"],
], ids=["recursive-chars", "recursive-tokens", "fixed-tokens", "markdown-chars"])
def test_cli_chunks_parquet_byte_identical(tmp_path, tiny_bi_encoder, flags):
    projects = [tmp_path / "p1", tmp_path / "sub" / "p2"]
    for p in projects:
        rag("chunk", SAMPLE_DOCS, *flags, "--model", tiny_bi_encoder, "-p", p)
    one, two = (p / "chunks.parquet" for p in projects)
    assert one.read_bytes() == two.read_bytes()
    assert (projects[0] / "docs.parquet").read_bytes() == (projects[1] / "docs.parquet").read_bytes()
    before = one.read_bytes()
    rag("chunk", SAMPLE_DOCS, *flags, "--model", tiny_bi_encoder, "-p", projects[0])  # again, same project
    assert one.read_bytes() == before
    table = pq.read_table(one)
    ids = table.column("chunk_id").to_pylist()
    docs = table.column("doc_id").to_pylist()
    ords = table.column("ordinal").to_pylist()
    assert ids == [f"{d}#{o}" for d, o in zip(docs, ords)] and len(set(ids)) == len(ids)
    assert set(docs) == set(pq.read_table(projects[0] / "docs.parquet").column("doc_id").to_pylist())


def test_cli_reports_oversized(tmp_path, tiny_bi_encoder, e5_tokenizer_json):
    # a model folder with the default model's tokenizer (chunking reads only the tokenizer)
    model = tmp_path / "model"
    shutil.copytree(tiny_bi_encoder, model)
    shutil.copy(e5_tokenizer_json, model / "tokenizer.json")
    src = tmp_path / "zh.txt"
    src.write_text("中文 中文 中文\n", encoding="utf-8")
    p = tmp_path / "proj"
    res = rag("chunk", src, "--size", "1", "--overlap", "0", "--model", model, "--json", "-p", p)
    summary = json.loads(res.stdout)
    # the first character carries two tokens ("▁", "中文"): one chunk over the size
    assert summary["n_oversized"] == 1 and summary["max_tokens"] == 2
    manifest = json.loads((p / "manifest.json").read_text())
    assert manifest["chunk"]["n_oversized"] == 1
    res = rag("chunk", src, "--size", "1", "--overlap", "0", "--model", model, "-p", p)
    assert "1 chunk(s) exceed the size" in " ".join(res.stderr.split())
    res = rag("chunk", src, "--size", "2", "--overlap", "0", "--model", model, "--json", "-p", p)
    assert json.loads(res.stdout)["n_oversized"] == 0
