"""`rag eval funnel`: where the gold first goes missing, and ANN recall."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rag_cli import Project, lab
from rag_cli.cli import app
from rag_cli.evaluate.funnel import exact_top_k, first_missing

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
SAMPLE_QUESTIONS = REPO / "sample_corpus" / "questions.jsonl"
SAMPLE_QRELS = REPO / "sample_corpus" / "qrels.tsv"


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_bi_encoder) -> Project:
    p = Project.create(tmp_path_factory.mktemp("funnel") / "p.rag", model={"embedder": str(tiny_bi_encoder)},
                       chunk={"unit": "chars", "size": 300, "overlap": 0}, search={"k": 2, "candidates": 3})
    p.chunk([SAMPLE_DOCS])
    p.embed()
    p.index()
    return p


def test_first_missing_order():
    row = {"sparse": False, "dense": False, "fusion": False, "rerank": None, "evidence": None, "cited": None}
    assert first_missing(row) == "retrieval"
    assert first_missing({**row, "dense": True}) == "fusion"
    assert first_missing({**row, "sparse": True, "fusion": True}) is None
    assert first_missing({**row, "sparse": True, "fusion": True, "rerank": False}) == "rerank"
    assert first_missing({**row, "sparse": True, "fusion": True, "evidence": True, "cited": False}) == "citation"
    assert first_missing({**row, "sparse": True, "fusion": True, "evidence": False, "cited": False}) == "evidence"


def test_exact_top_k_equals_a_full_sort():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(500, 16)).astype(np.float32)
    qs = rng.normal(size=(7, 16)).astype(np.float32)
    got = exact_top_k(vecs, qs, 10, block=64)  # several blocks
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    want = np.argsort(-(qs @ unit.T), axis=1)[:, :10]
    assert np.array_equal(got, want)
    assert exact_top_k(vecs[:3], qs, 10).shape == (7, 3)


def test_cli_funnel(project, tmp_path):
    res = CliRunner().invoke(app, ["eval", "funnel", "--queries", str(SAMPLE_QUESTIONS), "--qrels",
                                   str(SAMPLE_QRELS), "-p", str(project.root), "--json"])
    assert res.exit_code == 0, (res.stdout, res.stderr)
    report = json.loads(res.stdout)
    n_judged = len({line.split("\t")[0] for line in SAMPLE_QRELS.read_text().splitlines()[1:] if line.strip()})
    assert report["n_queries"] == n_judged == len(report["per_query"])
    assert sum(report["counts"]["first_missing"].values()) == n_judged
    assert report["layers_measured"] == ["sparse", "dense", "fusion", "evidence", "cited"]  # no reranker set
    for row in report["per_query"]:
        assert row["first_missing"] == first_missing(row)
        assert row["rerank"] is None
        if row["cited"]:
            assert row["evidence"]  # only evidence can be cited
    assert report["counts"]["not_in_sparse"] == sum(not r["sparse"] for r in report["per_query"])
    # a few dozen chunks: HNSW (ef >= k) finds the exact neighbours
    assert set(report["ann"]) == {"ann_recall@2", "ann_recall@3", "ann_recall@10"}
    assert report["ann"]["ann_recall@10"] == pytest.approx(1.0)
    assert (project.root / "eval" / "funnel-questions.json").exists()
    table = CliRunner().invoke(app, ["eval", "funnel", "--queries", str(SAMPLE_QUESTIONS), "--qrels",
                                     str(SAMPLE_QRELS), "-p", str(project.root)])
    assert table.exit_code == 0 and "not in dense candidates" in table.stdout and "ANN recall" in table.stdout
    bad = CliRunner().invoke(app, ["eval", "funnel", "--qrels", str(SAMPLE_QRELS), "-p", str(project.root)])
    assert bad.exit_code == 2 and "Missing option '--queries'" in bad.stderr


def test_funnel_with_a_reranker(tmp_path, tiny_bi_encoder, tiny_cross_encoder):
    p = Project.create(tmp_path / "p.rag", model={"embedder": str(tiny_bi_encoder), "reranker": str(tiny_cross_encoder)},
                       chunk={"unit": "chars", "size": 300, "overlap": 0}, search={"k": 1, "candidates": 5})
    p.chunk([SAMPLE_DOCS])
    p.embed()
    p.index()
    report = lab.funnel.run(p, SAMPLE_QRELS, SAMPLE_QUESTIONS, answers=False)
    assert report.path == p.root / "eval" / "funnel-questions.json"
    assert report["layers_measured"] == ["sparse", "dense", "fusion", "rerank"]
    for row in report["per_query"]:
        assert row["rerank"] in (True, False) and row["evidence"] is None
        assert row["first_missing"] == first_missing(row)


@pytest.mark.parametrize("backend", ["hnswlib", "faiss", "exact"])
def test_ann_recall_is_measured_against_the_exact_backend(project, tmp_path, monkeypatch, backend, request):
    """Structure: the funnel's ground truth is the `exact` backend (ExactIndex.search over the
    vectors stored in the index), whatever the project's backend; the report names the backend."""
    import rag_cli.evaluate.funnel as funnel_mod
    from rag_cli import lab
    from rag_cli.index.exact import ExactIndex

    if backend == "faiss":
        request.getfixturevalue("faiss")
    p = project
    if backend != "hnswlib":
        p = Project.create(tmp_path / "p", model={"embedder": str(project.config.model.embedder)},
                           chunk={"unit": "chars", "size": 300, "overlap": 0}, search={"k": 2, "candidates": 3},
                           index={"backend": backend, **({"index_type": "ivf-pq"} if backend == "faiss" else {})})
        p.chunk([SAMPLE_DOCS])
        p.embed()
        p.index()
    s = p.engines.searcher(p.config, with_embedder=True)
    truth = funnel_mod.ground_truth(s)
    assert isinstance(truth, ExactIndex)
    assert (truth is s.dense) == (backend == "exact")
    np.testing.assert_allclose(truth.vectors(range(s.chunks.num_rows)), s.vectors(range(s.chunks.num_rows)),
                               atol=1e-6)
    searched = []
    real_search = ExactIndex.search
    monkeypatch.setattr(ExactIndex, "search", lambda self, *a, **kw: searched.append(self) or
                        real_search(self, *a, **kw))
    report = lab.funnel.run(p, SAMPLE_QRELS, SAMPLE_QUESTIONS, k=2, candidates=3, answers=False, name=backend)
    assert searched, "ANN recall was not measured against ExactIndex"
    assert report["ann_ground_truth"] == "exact"
    assert report["ann_backend"] == {"hnswlib": "hnswlib", "faiss": "faiss ivf-pq", "exact": "exact"}[backend]
    assert report["ann"]["ann_recall@10"] == pytest.approx(1.0)  # a few dozen chunks
