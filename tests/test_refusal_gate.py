"""The refusal gate's signals in answers files, the gate decision as a pure
function (`rag_cli.generate.gate.gate_reason`) shared by `rag ask` and
`rag eval --tune refusal`, the cross-encoder rule, the made-unanswerable
variant of a corpus and the refusal rates of `rag eval --unanswerable`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.config import AskConfig
from rag_cli.generate.gate import GateSignals, gate_reason
from rag_cli.project import Project

QUESTIONS = [("q1", "How does BM25 rank documents?"), ("q2", "What does the ef parameter of HNSW set?"),
             ("q3", "什么是混合检索中的RRF？"), ("q4", "Which volcano erupted on Mars in 1850?"),
             ("q5", "How are chunks split with overlap?")]


def rag(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})


@pytest.fixture(scope="module")
def project(tmp_path_factory, make_sample_project):
    return make_sample_project(tmp_path_factory.mktemp("gate") / "p.rag")


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("q") / "qs.jsonl"
    path.write_text("".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in QUESTIONS),
                    encoding="utf-8")
    return path


def test_gate_reason_rules_in_order():
    cfg = AskConfig()
    base = GateSignals(n_evidence=5, best_score=0.85, coverage=0.8, entity_coverage=1.0, cjk=True)
    assert gate_reason(base, cfg) == ""
    assert gate_reason(replace(base, n_evidence=0, best_score=-1.0), cfg) == "no evidence was retrieved"
    assert "min_score 0.82" in gate_reason(replace(base, best_score=0.81), cfg)
    assert "min_coverage 0.3" in gate_reason(replace(base, coverage=0.2), cfg)
    assert gate_reason(replace(base, coverage=0.2, best_score=0.95), cfg) == ""  # strong match
    assert "min_entity_coverage 0.5" in gate_reason(replace(base, entity_coverage=0.4), cfg)
    assert gate_reason(replace(base, entity_coverage=0.4, cjk=False), cfg) == ""  # scope zh
    assert "min_entity_coverage" in gate_reason(replace(base, entity_coverage=0.4, cjk=False),
                                                replace(cfg, entity_scope="all"))
    # the cross-encoder rule: only with a score and a threshold != 0
    assert gate_reason(replace(base, rerank_score=-3.0), cfg) == ""
    assert "min_rerank_score -2.0" in gate_reason(replace(base, rerank_score=-3.0), replace(cfg, min_rerank_score=-2.0))
    assert gate_reason(base, replace(cfg, min_rerank_score=5.0)) == ""  # no reranker: no score
    assert gate_reason(replace(base, best_score=0.1, n_evidence=0), replace(cfg, gate="off")) == ""


def test_answers_file_records_the_gate_signals(project, queries):
    res = rag("ask", "--queries", queries, "--name", "on", "-q", "-p", project.root)
    assert res.exit_code == 0, res.output
    rows = pq.read_table(project.root / "answers" / "on.parquet").to_pylist()
    assert [r["query_id"] for r in rows] == [q for q, _ in QUESTIONS]
    for r in rows:
        assert 0.0 <= r["entity_coverage"] <= 1.0 and r["rerank_score"] is None
        assert r["refused"] == bool(r["reason"])
        # the generator ran exactly when the gate let the question through
        gate_refused = r["refused"] and r["generator_refused"] is None
        assert (r["generator_refused"] is None) == gate_refused
    off = rag("ask", "--queries", queries, "--name", "off", "--gate", "off", "-q", "-p", project.root)
    assert off.exit_code == 0, off.output
    rows_off = pq.read_table(project.root / "answers" / "off.parquet").to_pylist()
    assert all(r["generator_refused"] is not None for r in rows_off)
    assert [r["best_score"] for r in rows_off] == pytest.approx([r["best_score"] for r in rows])
    assert sum(r["refused"] for r in rows_off) <= sum(r["refused"] for r in rows)
    assert Project.open(project.root).config.ask.gate == "on"  # a flag, not saved


def test_old_answers_files_are_still_scored(project, tmp_path):
    old = pa.table({"query_id": ["q1"], "question": ["How does BM25 rank documents?"], "answer": ["by tf-idf"],
                    "citations": [[]], "contexts": [[]], "refused": [False], "generator": ["extractive"],
                    "latency_ms": [1.0], "best_score": [0.9], "coverage": [1.0]})
    pq.write_table(old, tmp_path / "old.parquet")
    (tmp_path / "gold.jsonl").write_text(json.dumps({"_id": "q1", "answers": ["by tf-idf"]}) + "\n")
    res = rag("eval", "--answers", tmp_path / "old.parquet", "--gold", tmp_path / "gold.jsonl", "--json",
              "-o", tmp_path / "r.json", "-p", project.root)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["metrics"]["em"] == 1.0


def test_sample_unanswerable_removes_whole_documents_until_n_questions():
    from rag_cli.evaluate.unanswerable import sample_unanswerable

    qrels = {"a": {"d1": 1}, "b": {"d1": 1}, "c": {"d2": 1, "d3": 1}, "d": {"d3": 1}, "e": {"d4": 0}}
    for seed in range(5):
        picked, removed = sample_unanswerable(qrels, 2, seed)
        assert len(picked) >= 2 and "e" not in picked and "d4" not in removed
        for q in picked:  # every relevant document of a picked question is removed
            assert set(qrels[q]) <= set(removed)
        if "d1" in removed:
            assert {"a", "b"} <= set(picked)  # both questions of a removed passage
    assert sample_unanswerable(qrels, 10, 0)[0] and len(sample_unanswerable(qrels, 10, 0)[1]) == 3


@pytest.mark.e2e
def test_make_unanswerable_on_cmrc(cmrc_dir, tmp_path):
    out = tmp_path / "variant"
    res = rag("eval", "--make-unanswerable", 10, "--corpus", cmrc_dir / "corpus.jsonl", "--queries",
              cmrc_dir / "queries.jsonl", "--qrels", cmrc_dir / "qrels" / "test.tsv", "-o", out, "--seed", 3,
              "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary == json.loads((out / "removed.json").read_text())
    kept = [json.loads(line)["_id"] for line in (out / "corpus.jsonl").read_text().splitlines()]
    n_all = sum(1 for line in (cmrc_dir / "corpus.jsonl").read_text().splitlines() if line.strip())
    assert len(kept) == n_all - len(summary["removed_docs"]) and not set(kept) & set(summary["removed_docs"])
    qs = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    assert [q["_id"] for q in qs] == summary["questions"] and len(qs) >= 10
    from rag_cli.evaluate.datasets import read_qrels

    qrels = read_qrels(cmrc_dir / "qrels" / "test.tsv")
    assert all(set(qrels[q["_id"]]) <= set(summary["removed_docs"]) for q in qs)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    bad = rag("eval", "--make-unanswerable", 10, "--corpus", cmrc_dir / "corpus.jsonl", "--queries",
              cmrc_dir / "queries.jsonl", "--qrels", cmrc_dir / "qrels" / "test.tsv", "-o", tmp_path / "other")
    assert bad.exit_code == 2 and (tmp_path / "other" / "keep.txt").exists()
