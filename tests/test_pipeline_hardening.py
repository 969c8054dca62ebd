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
