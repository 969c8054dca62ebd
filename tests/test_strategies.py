"""The `code`, `sentence`, `parent-child` and `semantic` strategies: exact
boundaries on small English and Chinese inputs, the offsets invariant on
random text, `code` on real modules of this repository, `semantic` with the
default bi-encoder on two-topic texts, flag validation through the CLI, and
`rag ask` given the sentence window / the parent (end to end with
`python -m rag_cli`)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rag_cli.chunking import chunk_documents, chunk_with_parents, chunks_table, load_tokenizer
from rag_cli.chunking.semantic import neighbour_distances, semantic_breaks
from rag_cli.cli import app
from rag_cli.errors import BadInput
from rag_cli.loaders import Document, load_sources, normalize_text

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"


def doc(text: str, doc_id: str = "d", fmt: str = "text") -> Document:
    text = normalize_text(text)
    return Document(doc_id=doc_id, path=doc_id, sha256="0" * 64, mtime=0.0, n_chars=len(text), title=doc_id,
                    text=text, metadata={}, fmt=fmt)


def spans(chunks) -> list[tuple[int, int, str]]:
    return [(c.start_char, c.end_char, c.text) for c in chunks]


def topic_embed(topics: list[str]):
    """A bag-of-topics embedding for exact tests of the breakpoint logic: the
    vector of a text counts, per topic, the occurrences of that topic's
    characters/words (a real, transparent embedding, not a model)."""
    def embed(texts: list[str]) -> np.ndarray:
        return np.array([[sum(t.count(w) for w in topic.split()) for topic in topics] for t in texts],
                        dtype=np.float32)
    return embed


# --------------------------------------------------------------------------- sentence
EN = "First sentence here. Second one! Third?\n\nNew paragraph line one\nstill going. Last."
ZH = "检索增强生成把文档切成小块，再检索相关段落。模型根据段落回答问题！\n\n这样做可靠吗？通常可靠；但也不总是这样。"


def test_sentence_english_exact():
    d = doc(EN)
    chunks = chunk_documents([d], strategy="sentence", size=100, overlap=0, unit="chars", context_sentences=1)
    assert spans(chunks) == [
        (0, 20, "First sentence here."),
        (21, 32, "Second one!"),
        (33, 39, "Third?"),
        (41, 76, "New paragraph line one\nstill going."),  # a single line break does not end a sentence
        (77, 82, "Last."),
    ]
    assert [(c.context_start, c.context_end) for c in chunks] == [(0, 32), (0, 39), (21, 76), (33, 82), (41, 82)]
    assert chunks[2].context == "Second one! Third?\n\nNew paragraph line one\nstill going."
    assert all(c.parent_id is None for c in chunks)


def test_sentence_chinese_exact():
    d = doc(ZH)  # NFKC: ，！？； become , ! ? ;
    chunks = chunk_documents([d], strategy="sentence", size=100, overlap=0, unit="chars", context_sentences=2)
    assert [c.text for c in chunks] == ["检索增强生成把文档切成小块,再检索相关段落。", "模型根据段落回答问题!",
                                        "这样做可靠吗?", "通常可靠;", "但也不总是这样。"]
    assert [(c.start_char, c.end_char) for c in chunks] == [(0, 22), (22, 33), (35, 42), (42, 47), (47, 55)]
    assert [(c.context_start, c.context_end) for c in chunks] == [(0, 42), (0, 47), (0, 55), (22, 55), (35, 55)]


def test_sentence_context_zero_and_oversized_sentence():
    d = doc("Short one. " + "word " * 30 + "end.")
    chunks = chunk_documents([d], strategy="sentence", size=40, overlap=0, unit="chars", context_sentences=0)
    assert chunks[0].text == "Short one."
    assert all(c.n_units <= 40 for c in chunks) and len(chunks) > 2  # the long sentence split by `recursive`
    assert all((c.context_start, c.context_end) == (c.start_char, c.end_char) for c in chunks)


def test_sentence_context_stays_in_its_markdown_section():
    d = doc("# A\n\nOne. Two.\n\n# B\n\nThree. Four.", fmt="markdown")
    chunks = chunk_documents([d], strategy="sentence", size=100, overlap=0, unit="chars", context_sentences=5)
    assert [(c.text, c.title_path, c.context) for c in chunks] == [
        ("One.", ["A"], "One. Two."), ("Two.", ["A"], "One. Two."),
        ("Three.", ["B"], "Three. Four."), ("Four.", ["B"], "Three. Four."),
    ]


# --------------------------------------------------------------------------- parent-child
def test_parent_child_english_exact():
    chunks, parents = chunk_with_parents([doc(EN)], strategy="parent-child", size=20, overlap=0, unit="chars",
                                         parent_size=45)
    assert [(p.chunk_id, p.start_char, p.end_char, p.text) for p in parents] == [
        ("d#p0", 0, 39, "First sentence here. Second one! Third?"),
        ("d#p1", 41, 82, "New paragraph line one\nstill going. Last."),
    ]
    assert [(c.chunk_id, c.parent_id, c.text) for c in chunks] == [
        ("d#0", "d#p0", "First sentence"), ("d#1", "d#p0", "here."), ("d#2", "d#p0", "Second one! Third?"),
        ("d#3", "d#p1", "New paragraph line"), ("d#4", "d#p1", "one"), ("d#5", "d#p1", "still going. Last."),
    ]
    by_id = {p.chunk_id: p for p in parents}
    for c in chunks:
        assert c.context == by_id[c.parent_id].text
        assert (c.context_start, c.context_end) == (by_id[c.parent_id].start_char, by_id[c.parent_id].end_char)


def test_parent_child_chinese_exact():
    chunks, parents = chunk_with_parents([doc(ZH)], strategy="parent-child", size=12, overlap=0, unit="chars",
                                         parent_size=30)
    assert [(p.start_char, p.end_char, p.text) for p in parents] == [
        (0, 22, "检索增强生成把文档切成小块,再检索相关段落。"), (22, 33, "模型根据段落回答问题!"),
        (35, 55, "这样做可靠吗?通常可靠;但也不总是这样。"),
    ]
    assert [(c.parent_id, c.text) for c in chunks] == [
        ("d#p0", "检索增强生成把文档切成小"), ("d#p0", "块,"), ("d#p0", "再检索相关段落。"),
        ("d#p1", "模型根据段落回答问题!"), ("d#p2", "这样做可靠吗?通常可靠;"), ("d#p2", "但也不总是这样。"),
    ]


def test_chunks_table_has_context_columns():
    chunks, parents = chunk_with_parents([doc(EN)], strategy="parent-child", size=20, overlap=0, unit="chars",
                                         parent_size=45)
    t = chunks_table(chunks).to_pylist()
    assert t[0]["parent_id"] == "d#p0" and t[0]["context_start"] == 0 and t[0]["context_end"] == 39
    assert chunks_table(parents).column("parent_id").to_pylist() == [None, None]
    plain = chunks_table(chunk_documents([doc(EN)], strategy="recursive", size=50, overlap=0, unit="chars"))
    assert "context" not in plain.column_names  # only strategies with a context add the columns


# --------------------------------------------------------------------------- code
PY = '''"""Module doc."""
import os

# helper comment
@decorator
def f(x):
    return x


X = 1


class C:
    """Doc."""

    def m(self):
        pass
if __name__ == "__main__":
    f(X)
'''

ZH_PY = '''# 计算总和
def 总和(数):
    """返回总和。"""
    return sum(数)

打印 = print
class 账户:
    余额 = 0
'''

JS = '''import x from "x";
import y from "y";

function add(a, b) {
  return a + b;
}

// 中文注释：乘法
function mul(a, b) {
  return a * b;
}
'''


def test_code_python_exact():
    chunks = chunk_documents([doc(PY, "m.py", "code")], strategy="code", size=200, overlap=0, unit="chars")
    assert spans(chunks) == [
        (0, 27, '"""Module doc."""\nimport os'),
        (29, 79, "# helper comment\n@decorator\ndef f(x):\n    return x"),  # comment + decorator belong to the def
        (82, 87, "X = 1"),  # module-level code between definitions
        (90, 144, 'class C:\n    """Doc."""\n\n    def m(self):\n        pass'),
        (145, 180, 'if __name__ == "__main__":\n    f(X)'),
    ]


def test_code_python_chinese_exact():
    chunks = chunk_documents([doc(ZH_PY, "z.py", "code")], strategy="code", size=200, overlap=0, unit="chars")
    assert [c.text for c in chunks] == ['# 计算总和\ndef 总和(数):\n    """返回总和。"""\n    return sum(数)',
                                        "打印 = print", "class 账户:\n    余额 = 0"]


def test_code_long_function_falls_back_to_recursive():
    chunks = chunk_documents([doc(PY, "m.py", "code")], strategy="code", size=40, overlap=0, unit="chars")
    # class C (54 chars) is split at its blank line, then the method at its lines
    assert [c.text for c in chunks if 90 <= c.start_char < 144] == [
        'class C:\n    """Doc."""', "def m(self):\n        pass"]
    assert [c.text for c in chunks if 29 <= c.start_char < 79] == [
        "# helper comment\n@decorator\ndef f(x):", "return x"]


def test_code_other_language_blank_line_blocks():
    chunks = chunk_documents([doc(JS, "a.js", "code")], strategy="code", size=60, overlap=0, unit="chars")
    assert [c.text for c in chunks] == [
        'import x from "x";\nimport y from "y";',
        "function add(a, b) {\n  return a + b;\n}",
        "// 中文注释:乘法\nfunction mul(a, b) {\n  return a * b;\n}",
    ]


def test_code_invalid_python_and_non_code_documents():
    bad = "def broken(:\n    pass\n\nx = 1\n"
    assert [c.text for c in chunk_documents([doc(bad, "b.py", "code")], strategy="code", size=14, overlap=0,
                                            unit="chars")] == ["def broken(:", "pass", "x = 1"]
    md = doc("# T\n\nSome text.", fmt="markdown")  # not code: the default (heading-aware recursive)
    assert [(c.text, c.title_path) for c in chunk_documents([md], strategy="code", size=50, overlap=0,
                                                            unit="chars")] == [("Some text.", ["T"])]


@pytest.mark.parametrize("module", ["rag_cli/chunking/core.py", "rag_cli/evaluate/metrics.py"])
def test_code_on_a_module_of_this_repo(module, tmp_path, e5_tokenizer_json):
    """Loaded like `rag chunk` does: each top-level definition that fits is
    exactly one chunk, from its first decorator/comment line to its last line."""
    loaded = load_sources([str(REPO / module)])
    (d,) = loaded.documents
    assert d.fmt == "code"
    tok = load_tokenizer(str(e5_tokenizer_json))
    chunks = chunk_documents([d], strategy="code", size=2048, overlap=0, unit="tokens", tokenizer=tok)
    lines = d.text.split("\n")
    tree = ast.parse(d.text)
    texts = [c.text for c in chunks]
    n_defs = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [x.lineno for x in node.decorator_list])
            body = "\n".join(lines[first - 1:node.end_lineno]).strip()
            owners = [t for t in texts if t.endswith(body)]
            assert len(owners) == 1, node.name  # the whole definition in one chunk ...
            lead = owners[0][:len(owners[0]) - len(body)]  # ... with only its comment lines before it
            assert all(line.lstrip().startswith("#") for line in lead.strip().splitlines()), node.name
            n_defs += 1
    assert n_defs >= 3
    for c in chunks:
        assert d.text[c.start_char:c.end_char] == c.text and c.text == c.text.strip()
    covered = "".join(d.text[c.start_char:c.end_char] for c in chunks)
    assert "".join(covered.split()) == "".join(d.text.split())  # every non-space character, once


def test_loader_reads_code_files(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n", encoding="utf-8")
    (tmp_path / "b.js").write_text("let y = 2;\n", encoding="utf-8")
    (tmp_path / "c.bin").write_bytes(b"\x00\x01")
    r = load_sources([str(tmp_path)])
    assert [(d.doc_id, d.fmt, d.title) for d in r.documents] == [("a.py", "code", "a"), ("b.js", "code", "b")]
    assert [Path(s.path).name for s in r.skipped] == ["c.bin"]


# --------------------------------------------------------------------------- semantic
TWO_TOPICS_EN = ("The cat sat on the mat. A dog chased the cat. The dog and cat are pets. "
                 "The star is bright. A planet orbits the star. The planet and star shine.")
TWO_TOPICS_ZH = "猫坐在垫子上。狗追着猫跑。猫和狗都是宠物。星星很亮。行星绕着星星转。行星和星星都在发光。"


def test_semantic_breaks_exact():
    assert semantic_breaks(np.array([0.0, 0.1, 0.9, 0.1]), 95).tolist() == [False, False, True, False]
    assert semantic_breaks(np.array([0.2, 0.2, 0.2]), 95).tolist() == [False, False, False]  # nothing above
    assert semantic_breaks(np.zeros(0), 95).tolist() == []
    v = np.array([[1, 0], [2, 0], [0, 3]], dtype=np.float32)
    assert np.allclose(neighbour_distances(v), [0.0, 1.0])


@pytest.mark.parametrize("text,topics,first", [
    (TWO_TOPICS_EN, ["cat dog mat pets", "star planet"],
     "The cat sat on the mat. A dog chased the cat. The dog and cat are pets."),
    (TWO_TOPICS_ZH, ["猫 狗 垫 宠", "星 行"], "猫坐在垫子上。狗追着猫跑。猫和狗都是宠物。"),
])
def test_semantic_exact_with_a_transparent_embedding(text, topics, first):
    d = doc(text)
    chunks = chunk_documents([d], strategy="semantic", size=500, overlap=0, unit="chars",
                             embed=topic_embed(topics))
    assert [c.text for c in chunks] == [first, d.text[len(first):].strip()]
    # capped at --size: the groups are split again by `recursive` (at sentence ends)
    small = chunk_documents([d], strategy="semantic", size=len(first) - 1, overlap=0, unit="chars",
                            embed=topic_embed(topics))
    assert all(c.n_units <= len(first) - 1 for c in small) and len(small) > 2
    assert not any(c.start_char < len(first) < c.end_char for c in small)  # the topic break stays a break


EN_TOPICS = ("Boil a large pot of salted water for the pasta. Add the spaghetti and stir it so it does not stick. "
             "Cook it for nine minutes until it is al dente. Drain the pasta and toss it with the tomato sauce. "
             "Serve the dish with grated parmesan and fresh basil. ",
             "The telescope collected light from a distant galaxy. Astronomers measured the redshift of its "
             "spectrum. The galaxy is receding from us at a tenth of the speed of light. Dark matter holds its "
             "spiral arms together. Such observations show that the universe is expanding.")
ZH_TOPICS = ("把水烧开后放入面条。煮面时要不停地搅拌。面条煮八分钟就熟了。捞出面条后拌上番茄酱。最后撒上芝士和罗勒叶。",
             "望远镜收集了遥远星系的光。天文学家测量了光谱的红移。这个星系正以十分之一光速远离我们。暗物质维系着它的旋臂。"
             "这些观测表明宇宙正在膨胀。")


@pytest.mark.parametrize("parts", [EN_TOPICS, ZH_TOPICS], ids=["en", "zh"])
def test_semantic_breaks_where_the_topic_changes(parts, default_model):
    """The default bi-encoder (multilingual-e5-small) on 5 cooking + 5
    astronomy sentences: one break, exactly at the change of topic."""
    from rag_cli.models.loading import load_embedder

    enc = load_embedder({"embedder": str(default_model), "precision": "int8", "threads": 0})
    d = doc("".join(parts))
    chunks = chunk_documents([d], strategy="semantic", size=2000, overlap=0, unit="chars",
                             embed=enc.encode_passages)
    assert [c.text for c in chunks] == [parts[0].strip(), parts[1].strip()]


# --------------------------------------------------------------------------- offsets invariant
ALPHABET = st.sampled_from(list("abc xyz 数据检索模型。！？；，、.!?;,") + [" ", "\n", "\n\n", "def f():\n    ", "# c\n"])
TEXTS = st.lists(ALPHABET, min_size=1, max_size=120).map("".join).filter(lambda s: s.strip())


def char_hist(texts: list[str]) -> np.ndarray:
    """A character-histogram embedding (deterministic, fast) for the invariant tests."""
    keys = "abcxyz数据检索模型"
    return np.array([[t.count(k) for k in keys] + [1] for t in texts], dtype=np.float32)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, strategy=st.sampled_from(["code", "sentence", "parent-child", "semantic"]),
       size=st.integers(1, 30), fmt=st.sampled_from(["text", "markdown", "code-py", "code-js"]),
       n=st.integers(0, 3), pct=st.sampled_from([0.0, 50.0, 95.0, 100.0]))
def test_offsets_invariant(text, strategy, size, fmt, n, pct):
    doc_id = {"code-py": "x.py", "code-js": "x.js"}.get(fmt, "x.txt")
    d = doc(text, doc_id, "code" if fmt.startswith("code") else fmt)
    chunks, parents = chunk_with_parents([d], strategy=strategy, size=size + 1, overlap=size // 3, unit="chars",
                                         context_sentences=n, parent_size=3 * size + 2, breakpoint_percentile=pct,
                                         embed=char_hist)
    parent_of = {p.chunk_id: p for p in parents}
    for i, c in enumerate(chunks):
        assert c.chunk_id == f"{doc_id}#{i}" and d.text[c.start_char:c.end_char] == c.text
        assert c.text.strip() and c.text == c.text.strip()
        assert c.n_units <= size + 1 or c.oversized
        if c.context is not None:
            assert d.text[c.context_start:c.context_end] == c.context
            assert c.context_start <= c.start_char and c.end_char <= c.context_end
        if strategy == "parent-child":
            p = parent_of[c.parent_id]
            assert p.start_char <= c.start_char and c.end_char <= p.end_char and p.text == c.context
        else:
            assert c.parent_id is None
    for p in parents:
        assert d.text[p.start_char:p.end_char] == p.text and p.n_units <= 3 * size + 2 or p.oversized
    covered = set()
    for c in chunks:
        covered.update(range(c.start_char, c.end_char))
    heading_lines = d.fmt == "markdown"  # headings are in title_path, not in chunks
    for i, ch in enumerate(d.text):
        if not ch.isspace() and not heading_lines:
            assert i in covered, (i, ch)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, strategy=st.sampled_from(["code", "sentence", "parent-child", "semantic"]),
       size=st.integers(1, 12))
def test_offsets_invariant_tokens(e5_tokenizer_json, text, strategy, size):
    tok = load_tokenizer(str(e5_tokenizer_json))
    d = doc(text, "x.py", "code")
    chunks, parents = chunk_with_parents([d], strategy=strategy, size=size, overlap=0, unit="tokens", tokenizer=tok,
                                         parent_size=size * 3, embed=char_hist)
    for c in chunks + parents:
        assert d.text[c.start_char:c.end_char] == c.text and c.text.strip()
        assert c.n_units == c.n_tokens
        assert c.n_units <= (size * 3 if c.chunk_id.split("#")[1].startswith("p") else size) or c.oversized


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs,flag", [
    ({"strategy": "paragraph"}, "--strategy"),
    ({"strategy": "sentence", "context_sentences": -1}, "--context-sentences"),
    ({"strategy": "sentence", "context_sentences": 1.5}, "--context-sentences"),
    ({"strategy": "parent-child", "size": 128, "parent_size": 128}, "--parent-size"),
    ({"strategy": "parent-child", "parent_size": 0}, "--parent-size"),
    ({"strategy": "semantic", "breakpoint_percentile": 101.0}, "--breakpoint-percentile"),
    ({"strategy": "semantic"}, "--strategy semantic"),  # no embed given
])
def test_bad_parameters_raise_badinput_naming_the_flag(kwargs, flag):
    args = {"strategy": "recursive", "size": 256, "overlap": 0, "unit": "chars", **kwargs}
    with pytest.raises(BadInput, match=flag):
        chunk_documents([doc(EN)], **args)


def test_parent_size_only_checked_for_parent_child():
    assert chunk_documents([doc(EN)], strategy="recursive", size=600, overlap=0, unit="chars", parent_size=512)


@pytest.mark.parametrize("args,flag", [
    (["--strategy", "nope"], "--strategy"),
    (["--strategy", "sentence", "--context-sentences", "-1"], "--context-sentences"),
    (["--strategy", "parent-child", "--size", "128", "--parent-size", "100"], "--parent-size"),
    (["--strategy", "semantic", "--breakpoint-percentile", "150"], "--breakpoint-percentile"),
])
def test_cli_bad_flags_exit_2_and_write_nothing(args, flag, tmp_path):
    project = tmp_path / "proj"
    res = CliRunner().invoke(app, ["chunk", str(SAMPLE_DOCS), "-p", str(project), "--unit", "chars", *args])
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert flag in res.stderr and res.stdout == ""
    assert not project.exists() or not any(project.iterdir())  # nothing written (the lock file at most)


# --------------------------------------------------------------------------- end to end: ask small-to-big
def rag_proc(*args) -> subprocess.CompletedProcess:
    """`python -m rag_cli ARGS`, the real entry point; asserts exit 0."""
    res = subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args)], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=600)
    assert res.returncode == 0, f"exit {res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}"
    return res


@pytest.fixture(scope="module")
def hnsw_docs(tmp_path_factory) -> Path:
    """One document of the sample corpus (the HNSW one), to keep the embedding small."""
    folder = tmp_path_factory.mktemp("docs")
    (folder / "dense_retrieval_hnsw.txt").write_bytes((SAMPLE_DOCS / "dense_retrieval_hnsw.txt").read_bytes())
    return folder


QUESTION = "What does the ef parameter of HNSW control, and can it be changed after the index is built?"  # q3


def build(project: Path, docs: Path, model: Path, *chunk_args) -> None:
    rag_proc("chunk", docs, "-p", project, "--model", model, *chunk_args)
    rag_proc("embed", "-p", project)
    rag_proc("index", "-p", project)


@pytest.mark.e2e
def test_parent_child_end_to_end(tmp_path, hnsw_docs, default_model, check_contract):
    project = tmp_path / "pc"
    # children of 16 tokens are sentence fragments: a quoted sentence can only come from a parent
    build(project, hnsw_docs, default_model, "--strategy", "parent-child", "--size", "16", "--parent-size", "160",
          "--overlap", "0")
    check_contract(project)
    chunks = pq.read_table(project / "chunks.parquet").to_pylist()
    parents = {p["chunk_id"]: p for p in pq.read_table(project / "parents.parquet").to_pylist()}
    assert len(parents) >= 2 and len(chunks) > len(parents)
    for c in chunks:
        p = parents[c["parent_id"]]
        assert p["start_char"] <= c["start_char"] and c["end_char"] <= p["end_char"]
        assert c["context"] == p["text"] and c["n_tokens"] <= 16 and p["n_tokens"] <= 160
    assert "parent_size = 160" in (project / "rag.toml").read_text()

    out = json.loads(rag_proc("ask", QUESTION, "-p", project, "--json").stdout)
    assert out["refused"] is False and out["citations"]
    by_id = {c["chunk_id"]: c for c in chunks}
    for e in out["evidence"]:  # the evidence is the retrieved child; the generator read its parent
        c = by_id[e["chunk_id"]]
        assert e["text"] == c["text"] and e["context"] == parents[c["parent_id"]]["text"]
    quoted = [s.rsplit(" [", 1)[0] for s in out["answer"].split("] ") if s]
    contexts = " ".join(" ".join(e["context"].split()) for e in out["evidence"])
    children = [" ".join(e["text"].split()) for e in out["evidence"]]
    assert quoted and all(q in contexts for q in quoted)
    assert any(all(q not in child for child in children) for q in quoted), "no quote from beyond a child"

    # answers.parquet: contexts list the retrieved chunk ids (children), not parent ids
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"_id": "q1", "text": QUESTION}) + "\n", encoding="utf-8")
    rag_proc("ask", "--queries", qfile, "-p", project)
    row = pq.read_table(project / "answers" / "q.parquet").to_pylist()[0]
    assert row["contexts"] and all(cid in by_id for cid in row["contexts"])
    assert set(row["citations"]) <= set(row["contexts"])
    check_contract(project)

    # another strategy removes the stale parents.parquet
    rag_proc("chunk", hnsw_docs, "-p", project, "--strategy", "recursive")
    assert not (project / "parents.parquet").exists()


@pytest.mark.e2e
def test_sentence_end_to_end(tmp_path, hnsw_docs, default_model, check_contract):
    project = tmp_path / "sent"
    build(project, hnsw_docs, default_model, "--strategy", "sentence", "--context-sentences", "1")
    check_contract(project)
    chunks = {c["chunk_id"]: c for c in pq.read_table(project / "chunks.parquet").to_pylist()}
    assert not (project / "parents.parquet").exists()
    out = json.loads(rag_proc("ask", QUESTION, "-p", project, "--json").stdout)
    assert out["refused"] is False and out["citations"]
    for e in out["evidence"]:
        c = chunks[e["chunk_id"]]
        assert e["text"] == c["text"] and e["context"] == c["context"] and c["text"] in c["context"]
    contexts = " ".join(" ".join(e["context"].split()) for e in out["evidence"])
    quoted = [s.rsplit(" [", 1)[0] for s in out["answer"].split("] ") if s]
    assert all(q in contexts for q in quoted)
