"""A search reads bm25s's saved index with NumPy (rag_cli.index.sparse.Bm25Arrays): the same scores as
bm25s's own `get_scores` for every method, and a search process that imports neither bm25s nor scipy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag_cli.index.sparse import Bm25Arrays, SparseIndex, analyze

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    "Cats purr softly when they are content; a cat purrs at a frequency of 25 to 150 Hz.",
    "Dogs bark loudly. The dog barks, the dogs bark, and barking dogs seldom bite.",
    "BM25 ranks documents by term frequency, inverse document frequency and length.",
    "中文检索需要分词，因为中文的词之间没有空格。",
    "为什么中文检索需要分词？BM25 对中文也有效。",
    "the of and",  # stopwords only: no terms
    "",
    "Reciprocal rank fusion (RRF) combines BM25 and dense retrieval ranks with k = 60.",
    "cat cat cat cat cat cat dog",
]
QUERIES = ["cats purr", "dog barking dogs", "BM25 ranking frequency", "为什么中文检索需要分词？",
           "BM25 中文 分词 rank", "cat cat dog", "unseenword another", "RRF k fusion dense cat 中文"]
METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


@pytest.mark.parametrize("method", METHODS)
def test_numpy_scores_equal_bm25s_get_scores(tmp_path, method):
    import bm25s

    idx = SparseIndex.build(DOCS, method=method)
    idx.save(tmp_path / "sparse")
    ref = bm25s.BM25.load(str(tmp_path / "sparse"), show_progress=False, mmap=True)
    mine = SparseIndex.load(tmp_path / "sparse")
    assert isinstance(mine.retriever, Bm25Arrays)
    assert (mine.retriever.nonoccurrence_array is not None) == (method in ("bm25l", "bm25+"))
    for q in QUERIES:
        terms = analyze(q)
        want = ref.get_scores(terms)
        got = mine.retriever.get_scores(terms)
        assert got.dtype == want.dtype and got.shape == (len(DOCS),)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(mine.scores(q), np.asarray(want, np.float32))
        # and the in-memory bm25s index it was built from
        np.testing.assert_array_equal(got, idx.retriever.get_scores(terms))
    assert mine.retriever.vocab_dict == ref.vocab_dict
    assert mine.idf(["cat", "中文", "nothere"]) == idx.idf(["cat", "中文", "nothere"])


def test_a_loaded_index_saved_again_is_the_same_bm25s_index(tmp_path):
    import bm25s

    SparseIndex.build(DOCS, method="bm25+").save(tmp_path / "a")
    again = SparseIndex.load(tmp_path / "a")
    again.save(tmp_path / "b")
    ref = bm25s.BM25.load(str(tmp_path / "b"), show_progress=False)
    for q in QUERIES:
        np.testing.assert_array_equal(ref.get_scores(analyze(q)), again.retriever.get_scores(analyze(q)))
    assert SparseIndex.load(tmp_path / "b").params == again.params


def test_a_damaged_index_raises(tmp_path):
    SparseIndex.build(DOCS).save(tmp_path / "s")
    np.save(tmp_path / "s" / "data.csc.index.npy", np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        SparseIndex.load(tmp_path / "s")
    (tmp_path / "s" / "params.index.json").unlink()
    with pytest.raises(OSError):
        SparseIndex.load(tmp_path / "s")


def test_stopwords_are_bm25s_english_list():
    from bm25s.stopwords import STOPWORDS_EN

    from rag_cli.index import sparse

    assert tuple(STOPWORDS_EN) == sparse.STOPWORDS_EN


def _modules_after(code: str) -> list[str]:
    probe = code + "\nimport sys\nprint(sorted(m for m in ('scipy', 'bm25s') if m in sys.modules))\n"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_loading_and_searching_a_sparse_index_imports_neither_scipy_nor_bm25s(tmp_path):
    SparseIndex.build(DOCS, method="bm25l").save(tmp_path / "s")
    code = ("from pathlib import Path\n"
            "from rag_cli.index.sparse import SparseIndex\n"
            f"idx = SparseIndex.load(Path({str(tmp_path / 's')!r}))\n"
            "assert idx.search('cats purr 中文', 3)[0].size\n"
            "idx.idf(['cat']); idx.coverage('cats', ['a cat'])")
    assert _modules_after(code) == "[]"


def test_a_project_search_imports_neither_scipy_nor_bm25s(tmp_path, make_sample_project):
    p = make_sample_project(tmp_path / "p")
    code = ("from rag_cli import Project\n"
            f"p = Project.open({str(p.root)!r})\n"
            "for mode in ('sparse', 'hybrid'):\n"
            "    assert p.search('What does b control in BM25?', mode=mode, k=3).hits")
    assert _modules_after(code) == "[]"
