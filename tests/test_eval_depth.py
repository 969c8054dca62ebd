"""Runs at the depth asked for (k distinct documents), document-level runs
(`--level doc`), and `rag eval` on a run file without a project folder."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_cli import Project
from rag_cli.cli import app
from rag_cli.evaluate.report import doc_level_run
from rag_cli.store.runs import read_run, trec_order

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
SAMPLE_QUESTIONS = REPO / "sample_corpus" / "questions.jsonl"
SAMPLE_QRELS = REPO / "sample_corpus" / "qrels.tsv"
N_DOCS = 8


def rag(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def small_chunks(tmp_path_factory, make_sample_project) -> Project:
    """sample_corpus in small chunks (many per document), tiny bi-encoder."""
    return make_sample_project(tmp_path_factory.mktemp("depth") / "p.rag", unit="chars", size=200, overlap=0)


def _docs_per_query(rows):
    docs = defaultdict(list)
    for r in rows:
        if r.doc_id not in docs[r.query_id]:
            docs[r.query_id].append(r.doc_id)
    return docs


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_run_holds_k_distinct_documents(small_chunks, mode):
    run = small_chunks.search_queries(SAMPLE_QUESTIONS, mode=mode, k=5, name=f"deep-{mode}")
    rows = read_run(run.path)
    by_query = defaultdict(list)
    for r in rows:
        by_query[r.query_id].append(r)
    n_queries = sum(1 for line in SAMPLE_QUESTIONS.open() if line.strip())
    assert len(by_query) == n_queries
    assert len(rows) > 5 * n_queries  # 200-character chunks: the top 5 chunks repeat documents
    for qid, rs in by_query.items():
        docs = _docs_per_query(rs)[qid]
        assert len(docs) == 5, qid
        # cut right after the first chunk of the 5th document, in rank order
        assert [r.rank for r in rs] == list(range(1, len(rs) + 1))
        assert rs[-1].doc_id == docs[-1] and sum(r.doc_id == docs[-1] for r in rs) == 1


def test_sparse_run_stops_when_bm25_runs_out(small_chunks):
    rows = read_run(small_chunks.search_queries(SAMPLE_QUESTIONS, mode="sparse", k=50, name="deep-sparse").path)
    for qid, docs in _docs_per_query(rows).items():
        assert len(docs) <= N_DOCS  # fewer than 50 documents exist: every matching chunk, no error


def test_level_doc_is_maxp_of_the_chunk_run(small_chunks, tmp_path):
    chunk_run = small_chunks.search_queries(SAMPLE_QUESTIONS, mode="hybrid", k=4, name="lvl-chunk")
    res = rag("search", "--queries", SAMPLE_QUESTIONS, "--mode", "hybrid", "-k", 4, "--level", "doc",
              "--format", "trec", "-o", tmp_path / "docs.trec", "-p", small_chunks.root)
    assert res.exit_code == 0, res.stderr
    lines = (tmp_path / "docs.trec").read_text(encoding="utf-8").splitlines()
    doc_rows = read_run(tmp_path / "docs.trec")
    assert len(lines) == 4 * len({r.query_id for r in doc_rows})
    maxp = doc_level_run(read_run(chunk_run.path))
    for qid, group in trec_order(doc_rows).items():
        assert [r.rank for r in group] == [1, 2, 3, 4]
        assert {r.chunk_id: r.score for r in group} == pytest.approx(maxp[qid])
        assert all(r.chunk_id == r.doc_id and "#" not in r.chunk_id for r in group)
    bad = rag("search", "--queries", SAMPLE_QUESTIONS, "--level", "page", "-p", small_chunks.root)
    assert bad.exit_code == 2 and "--level 'page'" in bad.stderr


def test_eval_without_a_project_folder(small_chunks, tmp_path):
    run = small_chunks.search_queries(SAMPLE_QUESTIONS, mode="sparse", k=10, name="noproj")
    nowhere = tmp_path / "no-project"
    res = rag("eval", "--qrels", SAMPLE_QRELS, "--run", run.path, "--ks", "1,10", "-p", nowhere, "--json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert not nowhere.exists()
    assert 0 < report["metrics"]["recall@10"] <= 1 and "map" in report["metrics"]
    out = tmp_path / "report.json"
    res = rag("eval", "--qrels", SAMPLE_QRELS, "--run", run.path, "--ks", "1,10", "-p", nowhere, "-o", out)
    assert res.exit_code == 0 and json.loads(out.read_text())["metrics"] == report["metrics"]
    assert "MAP" in res.stdout and "R-precision" in res.stdout


def test_eval_names_queries_on_stderr(tmp_path):
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 bm25.md 0 2.0 t\nq1 Q0 bm25.md 0 1.0 t\nq1 Q0 rrf.md 1 1.0 t\nq1 Q0 x.md 1 1.0 t\n"
                   "zz9 Q0 bm25.md 1 1.0 t\n", encoding="utf-8")
    qrels = tmp_path / "q.tsv"
    qrels.write_text("q1\tbm25.md\t1\nq7\tbm25.md\t0\n", encoding="utf-8")
    res = rag("eval", "--qrels", qrels, "--run", run, "-p", tmp_path / "none")
    assert res.exit_code == 0, res.stderr
    err = " ".join(res.stderr.split())
    assert "1 qrels query has no relevant document (relevance >= 1) and score 0: q7" in err
    assert "1 run query is not in the qrels and ignored: zz9" in err
    assert "1 repeated (query, id) row(s) counted once, at their best score; e.g. q1/bm25.md" in err
    assert "ties: 2 ids in 1 groups" in err
