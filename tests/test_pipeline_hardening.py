"""Hardening of the pipeline, third round (issue #31): `ask --gate off` with an
LLM generator, nothing half-written after a failed build or update, awkward
file names, searchers kept per mode, filters that can never match, errors
under --json, Markdown tables, long texts, old CURRENT pointers, the
embedding cache's repairs. Each test builds the files it needs and runs the
real CLI (CliRunner or a subprocess) or the stage on them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parents[1]


def rag(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})


def ok(*args):
    res = rag(*args)
    assert res.exit_code == 0, (args, res.stdout, res.stderr, res.exception)
    return res


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


DOCS = {
    "bm25.md": "# BM25\n\nBM25 ranks documents by term frequency and inverse document frequency. "
               "Warranty returns are handled in thirty days.\n",
    "hnsw.md": "# HNSW\n\nHNSW is a graph index for approximate nearest neighbour search.\n",
    "fusion.md": "# Fusion\n\nReciprocal rank fusion sums reciprocal ranks of both lists.\n",
}


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_bi_encoder) -> Path:
    src = write_docs(tmp_path_factory.mktemp("src"), DOCS)
    root = tmp_path_factory.mktemp("proj") / "p.rag"
    ok("build", src, "--unit", "chars", "--size", 200, "--overlap", 0, "--model", tiny_bi_encoder, "-q", "-p", root)
    return root


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.stop()


# --------------------------------------------------------------------------- 1. ask --gate off with an LLM
def test_ask_gate_off_with_an_llm_generator_answers(project, fake):
    fake.reply = "Returns are handled in thirty days [1]."
    res = rag("ask", "warranty returns", "--mode", "sparse", "-k", "2", "--gate", "off", "--generator", "openai",
              "--base-url", fake.base_url, "--json", "-p", project)
    assert res.exit_code == 0, (res.stdout, res.stderr, res.exception)
    out = json.loads(res.stdout)
    assert out["generator"] == "openai" and out["answer"] == "Returns are handled in thirty days [1]."
    assert len(fake.requests) == 1


# --------------------------------------------------------------------------- 2. all or nothing
def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (this checkout's code)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.mark.e2e
def test_build_with_a_missing_model_writes_nothing(tmp_path, tiny_bi_encoder):
    src = write_docs(tmp_path / "src", DOCS)
    fresh = tmp_path / "fresh.rag"
    for unit in ("chars", "tokens"):
        res = cli("build", src, "--unit", unit, "--model", "/no/such/dir", "-p", fresh)
        assert res.returncode == 2 and "/no/such/dir" in res.stderr, res.stderr
        assert not fresh.exists()
    root = tmp_path / "p.rag"
    assert cli("build", src, "--unit", "chars", "--model", tiny_bi_encoder, "-q", "-p", root).returncode == 0
    (src / "new.md").write_text("# New\n\nA new document about rivers.\n", encoding="utf-8")
    before = snapshot(root)
    res = cli("build", src, "--unit", "chars", "--model", "/no/such/dir", "-p", root)
    assert res.returncode == 2 and "/no/such/dir" in res.stderr
    assert snapshot(root) == before
    res = cli("build", src, "--unit", "chars", "--hnsw-m", "0", "-p", root)  # a bad index flag: before chunking
    assert res.returncode == 2 and snapshot(root) == before
    # a model folder removed after the build: update fails before rechunking
    model = tmp_path / "model"
    import shutil

    shutil.copytree(tiny_bi_encoder, model)
    assert cli("build", src, "--unit", "chars", "--model", model, "-q", "-p", root).returncode == 0
    (src / "newer.md").write_text("# Newer\n\nYet another document.\n", encoding="utf-8")
    shutil.rmtree(model)
    before = snapshot(root)
    res = cli("update", "-p", root)
    assert res.returncode == 2 and str(model) in res.stderr, res.stderr
    assert snapshot(root) == before


def test_build_that_fails_in_a_later_stage_puts_every_file_back(tmp_path, tiny_bi_encoder, monkeypatch):
    import rag_cli.stages.index
    from rag_cli.errors import WorkFailed

    src = write_docs(tmp_path / "src", DOCS)
    root = tmp_path / "p.rag"
    ok("build", src, "--unit", "chars", "--size", 200, "--overlap", 0, "--model", tiny_bi_encoder, "-q", "-p", root)
    (src / "new.md").write_text("# New\n\nA new document about rivers.\n", encoding="utf-8")
    before = snapshot(root)

    def broken(*args, **kwargs):
        raise WorkFailed("the disk is full")

    monkeypatch.setattr(rag_cli.stages.index, "build_index", broken)
    res = rag("build", src, "--unit", "chars", "--size", 100, "--overlap", 0, "-q", "-p", root)
    assert res.exit_code == 1 and "the disk is full" in res.stderr
    assert snapshot(root) == before  # chunks, docs, embeddings, manifest and rag.toml as they were
    fresh = tmp_path / "fresh.rag"
    res = rag("build", src, "--unit", "chars", "--model", tiny_bi_encoder, "-q", "-p", fresh)
    assert res.exit_code == 1 and not fresh.exists()

    import rag_cli.stages.update

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rag_cli.stages.update, "update_index", interrupted)
    res = rag("update", "-p", root)
    assert res.exit_code == 130 and snapshot(root) == before


# --------------------------------------------------------------------------- 3. non-UTF-8 file names
@pytest.mark.e2e
def test_a_file_name_that_is_not_utf8_is_skipped_by_name_and_the_rest_chunked(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text("ok fine words\n", encoding="utf-8")
    with open(os.fsencode(src) + b"/bad\xff.txt", "wb") as f:
        f.write(b"x y")
    root = tmp_path / "p.rag"
    res = cli("chunk", src, "--unit", "chars", "--json", "-p", root)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["n_docs"] == 1
    assert [s["path"] for s in out["skipped"]] == [f"{src}/bad\\xff.txt"]
    assert "not valid UTF-8" in out["skipped"][0]["reason"]
    import pyarrow.parquet as pq

    assert pq.read_table(root / "docs.parquet").column("doc_id").to_pylist() == ["ok.txt"]
    st = cli("status", "--json", "-p", root)  # the skipped file is not a source that is missing from the index
    assert st.returncode == 0, st.stderr
    assert not [s for s in json.loads(st.stdout).get("stale", []) if s["stage"] == "chunk"]


# --------------------------------------------------------------------------- 4. halves opened once each
def test_a_project_alternating_modes_opens_the_dense_and_sparse_halves_once_each(project, monkeypatch):
    import rag_cli.index.searcher
    from rag_cli import Project

    opened = []
    real = rag_cli.index.searcher.IndexFolder.open

    def counting(index_dir, project_root=None, parts=("dense", "sparse")):
        opened.append(tuple(parts))
        return real(index_dir, project_root, parts)

    monkeypatch.setattr(rag_cli.index.searcher.IndexFolder, "open", staticmethod(counting))
    p = Project(project)
    results = {}
    for _ in range(3):
        for mode in ("sparse", "dense", "hybrid"):
            results.setdefault(mode, []).append([h.chunk_id for h in p.search("bm25 ranking", mode=mode, k=2)])
    assert sorted(opened) == [("dense",), ("sparse",)]
    assert all(len({tuple(r) for r in rs}) == 1 for rs in results.values())  # the same answers every time
    assert results["sparse"][0] == [h.chunk_id for h in Project(project).search("bm25 ranking", mode="sparse", k=2)]
    assert results["dense"][0] == [h.chunk_id for h in Project(project).search("bm25 ranking", mode="dense", k=2)]
