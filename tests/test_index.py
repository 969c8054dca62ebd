"""Unit tests of the dense (hnswlib), sparse (bm25s) and fusion (RRF) modules."""

import os
from pathlib import Path

import numpy as np
import pytest

from rag_cli.config import IndexConfig
from rag_cli.index.backends import load_dense
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


def test_sparse_build_from_term_ids_equals_bm25s_from_tokens():
    """SparseIndex.build hands bm25s flat int32 term ids (TermIds), not lists of str: every score
    equals bm25s's own build from token lists, for English, Chinese, stopword-only and empty texts,
    and the vocabulary is numbered in order of first appearance (the same on every run)."""
    import bm25s

    from rag_cli.index.sparse import TermIds

    docs = ["Cats purr softly; cats sleep.", "", "the a of", "Dogs bark loudly at cats",
            "中文分词是检索的第一步。", "BM25 需要词，cats 也需要。", "birds sing songs of birds"]
    idx = SparseIndex.build(docs)
    ref = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    ref.index([analyze(t) for t in docs], show_progress=False)
    for q in ["cats", "birds songs", "中文检索", "需要 cats", "bark dogs 词"]:
        want = np.asarray(ref.get_scores(analyze(q)), dtype=np.float32)
        assert np.array_equal(idx.scores(q), want), q
    corpus = TermIds.analyze(["beta alpha beta", "gamma alpha"])
    assert list(corpus.vocab) == ["beta", "alpha", "gamma"]
    assert list(corpus.ids) == [[0, 1, 0], [2, 1]] and corpus.ids[1] == [2, 1] and len(corpus.ids) == 2
    empty = SparseIndex.build(["", "the of"])
    assert empty.params["n_docs"] == 2 and not empty.scores("anything").any()


def test_top_k_orders_by_score_then_index():
    rows, vals = top_k(np.array([0.5, 0.9, 0.5, 0.0, 0.9], dtype=np.float32), 4, min_exclusive=0.0)
    assert rows.tolist() == [1, 4, 0, 2]
    assert vals.tolist() == pytest.approx([0.9, 0.9, 0.5, 0.5])


def test_top_k_breaks_a_tie_across_the_kth_place_by_the_lowest_index():
    """100,000 equal scores (identical lines): -k 5 is rows 0-4, not whichever argpartition left (#31 item 10)."""
    rows, _ = top_k(np.ones(100_000, dtype=np.float32), 5)
    assert rows.tolist() == [0, 1, 2, 3, 4]
    scores = np.random.default_rng(0).integers(0, 3, 100_000).astype(np.float32)
    rows, vals = top_k(scores, 5, min_exclusive=0.0)
    assert rows.tolist() == np.flatnonzero(scores == 2)[:5].tolist() and vals.tolist() == [2.0] * 5
    sparse = SparseIndex.build(["same words here"] * 2000 + ["other text"])
    assert sparse.search("same words", 5)[0].tolist() == [0, 1, 2, 3, 4]


def test_exact_and_hnsw_dense_ties_are_ordered_by_row():
    """Exact dense search keeps the lowest rows of a tie at the k-th place (across its blocks); HNSW orders the
    ties it finds by row."""
    from rag_cli.index.dense_common import top_k_blocks

    rng = np.random.default_rng(1)
    x = np.repeat(rng.normal(size=(1, 8)).astype(np.float32), 5000, axis=0)  # 5,000 identical vectors
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    [(rows, cos)] = top_k_blocks(x, x[:1], 10, block=1000)
    assert rows.tolist() == list(range(10))
    [(rows, _)] = top_k_blocks(x, x[:1], 5, rows=np.arange(100, 5000), block=1000)
    assert rows.tolist() == [100, 101, 102, 103, 104]
    [(rows, cos)] = DenseIndex.build(x[:300], IndexConfig(hnsw_m=16, hnsw_ef_construction=100, hnsw_ef=50)).search(x[:1], 10)
    assert rows.tolist() == sorted(rows.tolist()) and len(set(cos.tolist())) <= 2


def test_rrf_exact_ties_are_ties_and_break_by_id():
    """Id 1 at ranks (1, 7, 2) and id 2 at ranks (2, 1, 7) of three lists: the same reciprocal ranks, summed
    in another order, used to differ in the last bit (0.04744784801534369 vs ...437) and rank 2 first. Now
    the scores are equal and the tie breaks by best rank (both 1), then id (#31 item 11)."""
    lists = []
    for j, (r1, r2) in enumerate([(1, 2), (7, 1), (2, 7)]):
        ids = [100 + 10 * j + i for i in range(10)]
        ids[r1 - 1], ids[r2 - 1] = 1, 2
        lists.append(ids)
    fused = rrf(lists, k=60)
    assert fused[0][0] == 1 and fused[1][0] == 2 and fused[0][1] == fused[1][1]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62 + 1 / 67, abs=1e-15)
    assert dict(rrf(lists[::-1], k=60)) == dict(fused)


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
    idx = DenseIndex.build(x, IndexConfig(hnsw_m=16, hnsw_ef_construction=100, hnsw_ef=50))
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
    again = load_dense(tmp_path / "dense")
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


# --------------------------------------------------------------------------- the dense backends
#: (id, [index] settings) of every dense backend and faiss index type
BACKENDS = [("hnswlib", {"backend": "hnswlib"}), ("exact", {"backend": "exact"}),
            ("faiss-hnsw-sq8", {"backend": "faiss", "index_type": "hnsw-sq8"}),
            ("faiss-sq8", {"backend": "faiss", "index_type": "sq8"}),
            ("faiss-ivf-pq", {"backend": "faiss", "index_type": "ivf-pq"})]


@pytest.fixture(params=[b for b, _ in BACKENDS])
def backend(request):
    """(name, IndexConfig) of one dense backend; a faiss backend needs faiss (fails under CI without it)."""
    from rag_cli.config import IndexConfig

    settings = dict(BACKENDS)[request.param]
    if settings["backend"] == "faiss":
        request.getfixturevalue("faiss")
    return request.param, IndexConfig(hnsw_m=16, hnsw_ef_construction=100, hnsw_ef=64, **settings)


def clustered(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    """n unit vectors around 40 centres (neighbourhoods as text embeddings have, unlike uniform noise)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, d))
    x = centres[rng.integers(0, 40, n)] + 0.35 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def exact_top(x: np.ndarray, q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[list[int]]:
    sims = q @ x.T
    if allowed is not None:
        sims[:, ~allowed] = -np.inf
    return [np.lexsort((np.arange(len(x)), -row))[:k].tolist() for row in sims]


def recall(got, want) -> float:
    return float(np.mean([len(set(g[0].tolist()) & set(w)) / len(w) for g, w in zip(got, want)]))


def test_every_backend_returns_cosines_k_and_mask(backend, tmp_path):
    from rag_cli.index.backends import build_dense, load_dense

    name, settings = backend
    x = clustered(3000)
    idx = build_dense(x, settings)
    assert idx.params["backend"] == settings.backend
    [(rows, cos)] = idx.search(x[7:8], 5)
    assert rows[0] == 7 and cos[0] == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(cos, x[rows] @ x[7], atol=1e-5)  # exact cosines (faiss: re-ranked)
    q = x[:50] + 0.05
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    assert recall(idx.search(q, 10), exact_top(x, q, 10)) >= (1.0 if name == "exact" else 0.9)
    # a mask that allows more than EXACT_MAX_ROWS rows is applied inside the search (hnswlib filter,
    # faiss IDSelectorBitmap); every hit is allowed, and the hits are the allowed rows' best
    mask = np.zeros(3000, dtype=bool)
    mask[::3] = mask[1::3] = True
    got = idx.search(q, 10, mask=mask)
    assert all(mask[r].all() and len(r) == 10 for r, _ in got)
    assert recall(got, exact_top(x, q, 10, mask)) >= (1.0 if name == "exact" else 0.9)
    # a selective mask: exactly the allowed rows, min(k, allowed) of them
    few = np.zeros(3000, dtype=bool)
    few[[3, 9, 2500]] = True
    [(rows, _)] = idx.search(x[:1], 10, mask=few)
    assert sorted(rows.tolist()) == [3, 9, 2500]
    # k above the corpus gives every row once
    small = build_dense(x[:40], settings)
    [(rows, _)] = small.search(x[:1], 500)
    assert sorted(rows.tolist()) == list(range(40))
    # saved and loaded (vectors and codes memory-mapped): the same results
    idx.save(tmp_path / "dense")
    again = load_dense(tmp_path / "dense")
    assert type(again) is type(idx) and again.params == idx.params
    for (r1, s1), (r2, s2) in zip(again.search(q, 10, mask=mask), got):
        assert r1.tolist() == r2.tolist() and np.allclose(s1, s2, atol=1e-6)
    np.testing.assert_allclose(again.vectors([5, 1]), x[[5, 1]], atol=1e-6)


def test_every_backend_updates_in_place_with_adds_and_deletes(backend, tmp_path):
    """The update `rag update` makes: labels of removed chunks deleted, new chunks added under new labels,
    rows renumbered; deleted rows never come back, added ones are found, and it survives save/load."""
    from rag_cli.index.backends import build_dense, load_dense

    name, settings = backend
    x = clustered(2600)
    old, new = x[:2500], x[2500:]
    idx = build_dense(old, settings)
    idx.save(tmp_path / "g1")
    idx = load_dense(tmp_path / "g1")  # updated from a loaded (memory-mapped) index, as `rag update` does
    gone = list(range(0, 2500, 25))  # 100 labels deleted
    keep = [i for i in range(2500) if i % 25]
    row_labels = np.array(keep + list(range(2500, 2600)), dtype=np.int64)
    vectors = np.concatenate([old[keep], new])
    idx.update(row_labels, gone, new, np.arange(2500, 2600, dtype=np.int64), vectors=vectors, settings=settings)
    assert idx.params["n"] == 2500
    idx.save(tmp_path / "g2")
    for index in (idx, load_dense(tmp_path / "g2", row_labels)):
        [(rows, cos)] = index.search(new[3:4], 3)  # a new vector finds itself: row 2400 + 3
        assert rows[0] == 2403 and cos[0] == pytest.approx(1.0, abs=1e-5)
        got = index.search(old[gone[:20]], 10)  # a deleted vector's query never returns a row for it
        want = exact_top(vectors, old[gone[:20]], 10)
        assert recall(got, want) >= (1.0 if name == "exact" else 0.9)
        assert all((r >= 0).all() and (r < 2500).all() for r, _ in got)
        np.testing.assert_allclose(index.vectors([0, 2403]), vectors[[0, 2403]], atol=1e-6)


def test_every_backend_recall_on_real_e5_vectors(backend):
    """1,500 real multilingual-e5-small vectors of SciFact chunks and 100 real query vectors
    (tests/data/e5_scifact_vectors.npz, written by `bench/scale.py --only fixture`): recall@10 of each
    backend against exact search."""
    from rag_cli.index.backends import build_dense, unit

    name, settings = backend
    data = np.load(Path(__file__).parent / "data" / "e5_scifact_vectors.npz")
    x, q = unit(data["chunks"].astype(np.float32)), unit(data["queries"].astype(np.float32))
    idx = build_dense(x, settings)
    got = idx.search(q, 10)
    want = exact_top(x, q, 10)
    assert recall(got, want) >= {"exact": 1.0, "hnswlib": 0.98, "faiss-hnsw-sq8": 0.97, "faiss-sq8": 0.98,
                                 "faiss-ivf-pq": 0.95}[name]


def test_rebuild_reason_and_search_params():
    from rag_cli.config import IndexConfig
    from rag_cli.index.backends import rebuild_reason, same_search_params

    x = clustered(200)
    from rag_cli.index.backends import build_dense

    hnsw = build_dense(x, IndexConfig()).params
    assert rebuild_reason(hnsw, IndexConfig()) is None
    assert rebuild_reason({k: v for k, v in hnsw.items() if k != "backend"}, IndexConfig()) is None  # old generation
    assert rebuild_reason(hnsw, IndexConfig(hnsw_m=8)) == "the HNSW parameters M / ef_construction changed"
    assert rebuild_reason(hnsw, IndexConfig(backend="exact")) == "the dense backend changed (hnswlib -> exact)"
    assert same_search_params(hnsw, IndexConfig()) and not same_search_params(hnsw, IndexConfig(hnsw_ef=7))
    exact = build_dense(x, IndexConfig(backend="exact")).params
    assert rebuild_reason(exact, IndexConfig(backend="exact", hnsw_m=8)) is None
    assert same_search_params(exact, IndexConfig(backend="exact", hnsw_ef=7))


def test_faiss_structure_and_search_params(faiss):
    from rag_cli.config import IndexConfig
    from rag_cli.index.backends import build_dense, rebuild_reason, same_search_params
    from rag_cli.index.faiss_index import auto_nlist, auto_pq_m

    x = clustered(2000)
    ivf = build_dense(x, IndexConfig(backend="faiss", index_type="ivf-pq", pq_m=8, nprobe=4)).params
    assert (ivf["nlist"], ivf["pq_m"], ivf["pq_nbits"], ivf["code_bytes"]) == (auto_nlist(2000), 8, 8, 8)
    assert auto_nlist(1_000_000) == 4096 and auto_nlist(50) == 1 and auto_pq_m(384) == 64 and auto_pq_m(20) == 2 and auto_pq_m(16) == 2
    settings = IndexConfig(backend="faiss", index_type="ivf-pq", pq_m=8, nprobe=4)
    assert rebuild_reason(ivf, settings) is None
    assert "pq_m changed" in rebuild_reason(ivf, IndexConfig(backend="faiss", index_type="ivf-pq", nprobe=4))
    assert "index_type" in rebuild_reason(ivf, IndexConfig(backend="faiss", index_type="sq8", pq_m=8, nprobe=4))
    assert same_search_params(ivf, settings)
    assert not same_search_params(ivf, IndexConfig(backend="faiss", index_type="ivf-pq", pq_m=8, nprobe=9))
    from rag_cli.errors import BadInput

    with pytest.raises(BadInput, match=r"--pq-m 7 \(config index.ivf.pq_m\): must divide the vectors' dimension 32"):
        build_dense(x, IndexConfig(backend="faiss", index_type="ivf-pq", pq_m=7))


def test_missing_faiss_is_exit_2_naming_the_extra(tmp_path, tiny_bi_encoder, faiss):
    """Without faiss, `rag index` with index.backend = "faiss" exits 2 before reading anything, and a
    faiss generation cannot be searched: both name the extra."""
    import subprocess
    import sys

    from rag_cli import Project

    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.chunk([Path(__file__).resolve().parents[1] / "sample_corpus" / "docs"])
    p.embed()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "faiss.py").write_text("raise ImportError('No module named faiss (hidden by the test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(Path(__file__).resolve().parents[1])])}
    text = (p.root / "rag.toml").read_text()
    (p.root / "rag.toml").write_text(text.replace('backend = "hnswlib"', 'backend = "faiss"', 1))
    res = subprocess.run([sys.executable, "-m", "rag_cli", "index", "-p", str(p.root)], capture_output=True,
                         text=True, env=env)
    assert res.returncode == 2, res.stderr
    assert "pip install 'rag-cli[faiss]'" in res.stderr and "faiss-cpu" in " ".join(res.stderr.split())
    assert not (p.root / "index").exists()
    p.index(backend="faiss", index_type="ivf-pq")  # with faiss here; then searched without it
    res = subprocess.run([sys.executable, "-m", "rag_cli", "search", "bm25", "--mode", "dense", "-p", str(p.root)],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 2, res.stderr
    msg = " ".join(res.stderr.split())
    assert "is a faiss index (ivf-pq)" in msg and "pip install 'rag-cli[faiss]'" in msg


def test_a_local_backend_is_one_module_and_one_registry_line(tmp_path, tiny_bi_encoder):
    """docs/architecture.md's worked example, as written there: its module (`half`, exact search over
    float16 vectors) and its REGISTRY line, added before the CLI starts and nothing else, give a backend
    that `rag index --backend half`, `rag search`, `rag update`, `rag status` and `rag rollback` use: the
    same best hit as `exact` and the same cosines at each rank within 1e-3, its own file (float16)."""
    import json
    import re
    import shutil
    import subprocess
    import sys

    from rag_cli import Project

    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    example = doc[doc.index("### Worked example: adding a local backend"):]
    module, line = re.findall(r"```python\n(.*?)```", example, flags=re.S)[:2]
    (tmp_path / "half.py").write_text(module, encoding="utf-8")
    entry = line.strip().rstrip(",").replace("rag_cli.index.half:", "half:")
    runner = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from rag_cli.index.registry import REGISTRY; "
              f"REGISTRY.update({{{entry}}}); sys.argv[0] = 'rag'; from rag_cli.cli import main; main()")

    def rag(*args) -> dict:
        res = subprocess.run([sys.executable, "-c", runner, str(tmp_path), *map(str, args), "--json"],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    src = tmp_path / "src"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_corpus" / "docs", src)
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)},
                       chunk={"unit": "chars", "size": 300, "overlap": 0})
    p.build([src], backend="exact")
    queries = ["hybrid search with reciprocal rank fusion", "how are documents chunked"]
    want = [[(h.chunk_id, h.score) for h in p.search(q, mode="dense", k=5)] for q in queries]
    rag("index", "--backend", "half", "-p", p.root)
    gen = sorted((p.root / "index").glob("gen-*"))[-1]
    assert json.loads((gen / "dense" / "rag_dense.json").read_text())["backend"] == "half"
    assert np.load(gen / "dense" / "vectors16.npy").dtype == np.float16
    for q, w in zip(queries, want):
        hits = rag("search", q, "--mode", "dense", "-k", 5, "-p", p.root)["results"]
        got = [(h["chunk_id"], h["score"]) for h in hits]
        assert got[0][0] == w[0][0] and len(got) == 5  # ranks below may swap near-ties (float16 rounding)
        assert np.allclose([s for _, s in got], [s for _, s in w], atol=1e-3)
    (src / "zymurgy.txt").write_text("Zymurgy is the study of fermentation in brewing lager yeast.\n")
    out = rag("update", "-p", p.root)
    assert out["chunk"]["docs_added"] == 1 and out["index"]["full"] is None  # changed in place, not rebuilt
    new = sorted((p.root / "index").glob("gen-*"))[-1]
    n = json.loads((new / "dense" / "rag_dense.json").read_text())["n"]
    assert np.load(new / "dense" / "vectors16.npy").shape == (n, 16)  # every chunk, the added one's too
    hits = rag("search", "zymurgy fermentation lager yeast", "--mode", "dense", "-k", n, "-p", p.root)["results"]
    assert len(hits) == n and "zymurgy.txt" in {h["doc_id"] for h in hits}
    assert "half" in json.dumps(rag("status", "-p", p.root))
    rag("rollback", "-p", p.root)
    assert json.loads((gen / "dense" / "rag_dense.json").read_text())["backend"] == "half"
