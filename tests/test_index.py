"""Unit tests of the dense (hnswlib), sparse (bm25s) and fusion (RRF) modules."""

import numpy as np
import pytest

from rag_cli.index.dense import DenseIndex
from rag_cli.index.fusion import rrf
from rag_cli.index.sparse import SparseIndex, analyze, top_k


def test_analyze_english_matches_bm25s_tokenize():
    import bm25s
    import Stemmer

    texts = ["The Quick brown foxes are jumping over the lazy dogs.", "Vitamin D deficiency in 2020 and beyond!"]
    want = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False,
                          show_progress=False)
    assert [analyze(t) for t in texts] == want


def test_analyze_chinese_is_segmented_into_words():
    terms = analyze("中文检索需要分词")
    assert "检索" in terms and "分词" in terms
    assert all(t.strip() for t in terms)


def test_analyze_mixed_text():
    terms = analyze("BM25 排序函数 ranking functions")
    assert "bm25" in terms and "rank" in terms and "function" in terms and "排序" in terms


def test_sparse_search_ranks_the_matching_document_first(tmp_path):
    idx = SparseIndex.build(["cats purr softly", "dogs bark loudly", "中文分词很重要", "birds sing"])
    rows, scores = idx.search("barking dog", 10)
    assert rows.tolist() == [1] and scores[0] > 0
    rows, _ = idx.search("分词", 10)
    assert rows.tolist() == [2]
    idx.save(tmp_path / "sparse")
    again = SparseIndex.load(tmp_path / "sparse")
    assert np.allclose(again.scores("dogs"), idx.scores("dogs"))
    # a filter mask removes rows; a query of stopwords only finds nothing
    assert idx.search("dogs", 10, mask=np.array([True, False, True, True]))[0].tolist() == []
    assert idx.search("the of and", 10)[0].tolist() == []


def test_bm25_score_is_lucene_formula():
    # Lucene BM25: idf = ln(1 + (N - df + 0.5) / (df + 0.5)); tf part = tf / (tf + k1 (1 - b + b dl/avgdl))
    docs = ["apple banana", "apple apple cherry", "banana"]
    idx = SparseIndex.build(docs, k1=1.2, b=0.75)
    N, dl, avgdl = 3, [2, 3, 1], 2.0
    df = 2
    idf = np.log(1 + (N - df + 0.5) / (df + 0.5))
    want = [idf * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * d / avgdl)) for tf, d in zip([1, 2, 0], dl)]
    assert np.allclose(idx.scores("apple"), want, atol=1e-6)


def test_top_k_orders_by_score_then_index():
    rows, vals = top_k(np.array([0.5, 0.9, 0.5, 0.0, 0.9], dtype=np.float32), 4, min_exclusive=0.0)
    assert rows.tolist() == [1, 4, 0, 2]
    assert vals.tolist() == pytest.approx([0.9, 0.9, 0.5, 0.5])


def test_rrf_formula_and_inputs_untouched():
    a, b = [1, 2, 3], [3, 1, 4]
    fused = rrf([a, b], k=60)
    assert a == [1, 2, 3] and b == [3, 1, 4]
    scores = dict(fused)
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[4] == pytest.approx(1 / 63)
    assert [i for i, _ in fused] == [1, 3, 2, 4]


def test_dense_index_returns_cosines_and_respects_k_and_mask(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx = DenseIndex.build(x, m=16, ef_construction=100, ef=50)
    [(rows, cos)] = idx.search(x[7:8], 5)
    assert rows[0] == 7 and cos[0] == pytest.approx(1.0, abs=1e-5)
    exact = np.sort(x @ x[7])[::-1][:5]
    assert np.allclose(cos, exact, atol=1e-5)
    # k larger than the corpus gives every row once
    [(rows, _)] = idx.search(x[:1], 500)
    assert sorted(rows.tolist()) == list(range(50))
    mask = np.zeros(50, dtype=bool)
    mask[[3, 9]] = True
    [(rows, _)] = idx.search(x[:1], 10, mask=mask)
    assert sorted(rows.tolist()) == [3, 9]
    idx.save(tmp_path / "dense")
    again = DenseIndex.load(tmp_path / "dense")
    [(rows2, cos2)] = again.search(x[7:8], 5)
    assert rows2.tolist() == idx.search(x[7:8], 5)[0][0].tolist()


def test_idf_and_coverage():
    idx = SparseIndex.build(["apple banana", "apple cherry", "banana durian"])
    idf = idx.idf(["appl", "durian", "zebra"])
    assert idf["appl"] == pytest.approx(np.log(1 + (3 - 2 + 0.5) / (2 + 0.5)))
    assert idf["durian"] == pytest.approx(np.log(1 + (3 - 1 + 0.5) / (1 + 0.5)))
    assert idf["zebra"] == pytest.approx(np.log(1 + (3 + 0.5) / 0.5))  # unseen: df = 0
    # "apples" (stem appl) is found, "zebras" is not: coverage is the idf share found
    cov = idx.coverage("apples and zebras", ["an apple a day"])
    assert cov == pytest.approx(idf["appl"] / (idf["appl"] + idf["zebra"]))
    assert idx.coverage("the of", ["anything"]) == 0.0
    assert idx.coverage("apple", []) == 0.0
