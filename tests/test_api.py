"""The Python API (`from rag_cli import Project`): the three lines of the
README, that the API and the CLI give the same results, progress, the lock,
and the query normalisation that `ask` shares with `search`."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_cli import Project, lab
from rag_cli.cli import app
from rag_cli.config import Config, ModelConfig
from rag_cli.errors import BadInput, WorkFailed

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
SAMPLE_QUESTIONS = REPO / "sample_corpus" / "questions.jsonl"
SAMPLE_QRELS = REPO / "sample_corpus" / "qrels.tsv"


def rag_json(*args):
    res = CliRunner().invoke(app, [str(a) for a in args] + ["--json"])
    assert res.exit_code == 0, (res.stdout, res.stderr)
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory, make_sample_project) -> Project:
    """sample_corpus chunked (characters), embedded with the tiny bi-encoder and indexed, through the API."""
    return make_sample_project(tmp_path_factory.mktemp("api") / "p.rag", unit="chars", size=400, overlap=40)


def test_create_writes_the_config_and_refuses_an_existing_project(tmp_path, tiny_bi_encoder):
    p = Project.create(tmp_path / "x", model=ModelConfig(embedder=str(tiny_bi_encoder)), index={"hnsw_m": 8})
    assert p.config.model.embedder == str(tiny_bi_encoder) and p.config.index.hnsw_m == 8
    assert Config.load(p.config_path) == p.config
    with pytest.raises(BadInput, match="already exists"):
        Project.create(tmp_path / "x")
    with pytest.raises(BadInput, match=r"--hnsw-m 1 \(config index.hnsw.hnsw_m\): must be ≥ 2"):
        Project.create(tmp_path / "y", index={"hnsw_m": 1})
    with pytest.raises(BadInput, match="unknown config section 'indx'"):
        Project.create(tmp_path / "y", indx={})
    assert not (tmp_path / "y").exists()


def test_api_builds_and_records_like_the_cli(tiny_project):
    p = tiny_project
    manifest = p.manifest()
    assert {"chunk", "embed", "index"} <= set(manifest)
    assert manifest["chunk"]["rows"]["docs"] == len(list(SAMPLE_DOCS.iterdir()))
    assert p.config.chunk.size == 400  # the options of create are the config used


@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid"])
def test_api_search_equals_cli_search(tiny_project, mode):
    res = tiny_project.search("How does reciprocal rank fusion combine rankings?", mode=mode, k=4)
    assert res.mode == mode and len(res) == 4
    cli = rag_json("search", "How does reciprocal rank fusion combine rankings?", "--mode", mode, "-k", 4,
                   "-p", tiny_project.root)
    assert [(h.chunk_id, round(h.score, 6), h.text) for h in res] == \
        [(r["chunk_id"], r["score"], r["text"]) for r in cli["results"]]
    assert [h.rank for h in res] == [1, 2, 3, 4]


def test_api_search_queries_and_evaluate(tiny_project):
    seen = []
    run = tiny_project.search_queries(SAMPLE_QUESTIONS, mode="sparse", k=20,
                                      progress=lambda task, done, total: seen.append((task, done, total)))
    assert run.path == tiny_project.root / "runs" / "questions-sparse.parquet" and (run.mode, run.k) == ("sparse", 20)
    n = sum(1 for _ in SAMPLE_QUESTIONS.open())
    assert seen[-1] == ("searching", n, n)
    report = lab.score.run(tiny_project, SAMPLE_QRELS, run=run, ks=[1, 10])
    assert report.path == tiny_project.root / "eval" / "questions-sparse-qrels.json"
    cli = rag_json("eval", "--qrels", SAMPLE_QRELS, "--run", run.path, "--ks", "1,10", "-p", tiny_project.root)
    n_judged = len({line.split("\t")[0] for line in SAMPLE_QRELS.read_text().splitlines()[1:] if line.strip()})
    assert report["metrics"] == cli["metrics"] and report["n_queries"] == n_judged
    assert 0 < report["metrics"]["recall@10"] <= 1


def test_progress_reaches_every_stage(tmp_path, tiny_bi_encoder):
    seen: dict[str, list] = {}

    def progress(task, done, total):
        seen.setdefault(task, []).append((done, total))

    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.chunk([SAMPLE_DOCS], unit="chars", size=300, overlap=0, progress=progress)
    p.embed(progress=progress)
    p.index(progress=progress)
    p.ask_queries(SAMPLE_QUESTIONS, mode="sparse", progress=progress)
    n_docs = len(list(SAMPLE_DOCS.iterdir()))
    n_questions = sum(1 for _ in SAMPLE_QUESTIONS.open())
    assert seen["chunking"][-1] == (n_docs, n_docs)
    done, total = seen["embedding"][-1]
    assert done == total == p.manifest()["embed"]["n_embedded"] > 0
    assert seen["indexing"] == [(1, 3), (2, 3), (3, 3)]
    assert seen["answering"][-1] == (n_questions, n_questions)


def test_a_second_writer_waits_then_fails_naming_the_folder(tiny_project):
    from filelock import FileLock

    other = Project(tiny_project.root, lock_timeout=0.2)
    with FileLock(str(tiny_project.root / ".lock")):
        holder_done = threading.Event()
        with pytest.raises(WorkFailed, match=f"another rag process is writing to {tiny_project.root}"):
            other.index()
        holder_done.set()
    # readers take no lock
    with FileLock(str(tiny_project.root / ".lock")):
        assert len(other.search("bm25", mode="sparse", k=1)) == 1


def test_the_searcher_is_reused_until_the_index_changes(tiny_project):
    tiny_project.search("hnsw", mode="sparse", k=1)
    first = next(iter(tiny_project.engines._searchers.values()))[1]
    tiny_project.search("bm25", mode="sparse", k=1)
    assert next(iter(tiny_project.engines._searchers.values()))[1] is first
    tiny_project.index()
    tiny_project.search("bm25", mode="sparse", k=1)
    assert next(iter(tiny_project.engines._searchers.values()))[1] is not first


@pytest.mark.e2e
def test_the_readme_three_lines_with_the_default_model(tmp_path, default_model):
    """The README's example, verbatim but for the folder: default config, default model."""
    p = Project.open(tmp_path / "my.rag")
    p.chunk([SAMPLE_DOCS]); p.embed(); p.index()  # noqa: E702 (as the README writes it)
    hits = p.search("how does RRF work?", mode="hybrid", k=5)
    answer = p.ask("What does ef control?")
    assert len(hits) == 5 and hits[0].doc_id == "hybrid_rrf.md"
    assert not answer.refused and answer.answer.citations
    assert all(c in {e.chunk_id for e in answer.evidence} for c in answer.answer.citations)
    assert any("dense_retrieval_hnsw" in c for c in answer.answer.citations)
    assert (tmp_path / "my.rag" / "rag.toml").exists()


@pytest.mark.e2e
def test_full_width_question_gets_the_same_ask_evidence(tmp_path, default_model):
    """NFKC happens once, inside the library: `ＨＮＳＷ` and `HNSW` get the same
    evidence, coverage and answer from `ask`, through the API and the CLI."""
    p = Project.open(tmp_path / "p")
    p.chunk([SAMPLE_DOCS]); p.embed(); p.index()  # noqa: E702
    ascii_, wide = p.ask("What does ef control in HNSW?"), p.ask("What does ef control in ＨＮＳＷ?")
    assert [e.chunk_id for e in wide.evidence] == [e.chunk_id for e in ascii_.evidence]
    assert wide.coverage == ascii_.coverage and wide.best_score == pytest.approx(ascii_.best_score, abs=1e-6)
    assert wide.answer.text == ascii_.answer.text
    cli_ascii = rag_json("ask", "What does ef control in HNSW?", "-p", p.root)
    cli_wide = rag_json("ask", "What does ef control in ＨＮＳＷ?", "-p", p.root)
    assert [e["chunk_id"] for e in cli_wide["evidence"]] == [e["chunk_id"] for e in cli_ascii["evidence"]]
    assert cli_wide["coverage"] == cli_ascii["coverage"] == round(ascii_.coverage, 6)
