"""`rag embed` as a stage: vectors cached in parts, a killed run resumed,
embeddings.parquet written window by window (rag_cli/stages/embed.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.models.encoder import BiEncoder
from rag_cli.models.folder import ModelFolder
from rag_cli.hashing import sha256_text
from rag_cli.project import Project
from rag_cli.stages.embed import embed_chunks
from rag_cli.store.embeddings import VectorCache, read_embeddings, vector_cache_dir

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "sample_corpus" / "docs"
# small batches and windows, so that a sample corpus spans many of each
SMALL = {"batch_tokens": 256, "window": 40, "part_batches": 2}


class CountingSession:
    """An onnxruntime session that counts `run` calls and rows, and raises
    KeyboardInterrupt (a kill) on call number `fail_at`."""

    def __init__(self, session, fail_at: int | None = None):
        self.session, self.fail_at = session, fail_at
        self.calls = self.rows = 0

    def run(self, outputs, feed):
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise KeyboardInterrupt("killed")
        self.rows += len(feed["input_ids"])
        return self.session.run(outputs, feed)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.fixture(scope="module")
def chunked(tmp_path_factory, tiny_bi_encoder) -> Path:
    """A project with chunks.parquet of the sample corpus, chunked with the tiny model's tokenizer."""
    p = tmp_path_factory.mktemp("embed") / "proj"
    res = CliRunner().invoke(app, ["chunk", str(SAMPLE_DOCS), "--model", str(tiny_bi_encoder),
                                   "--unit", "chars", "--size", "300", "--overlap", "0", "-p", str(p)])
    assert res.exit_code == 0, res.output
    return p


@pytest.fixture
def project(chunked, tmp_path) -> Project:
    shutil.copytree(chunked, tmp_path / "proj")
    return Project(tmp_path / "proj")


def _encoder(folder: Path) -> BiEncoder:
    # one batch at a time: CountingSession numbers and counts calls, which only means "batch k" in order
    # (batches in parallel are tested in test_models_runtime.py)
    return BiEncoder(ModelFolder.load(folder), threads=1)


def _texts(project: Project) -> list[str]:
    return pq.read_table(project.chunks_path).column("embed_text").to_pylist()


def test_killed_run_resumes_with_the_same_vectors(project, tmp_path, tiny_bi_encoder, monkeypatch):
    texts = _texts(project)
    n_unique = len(set(texts))
    assert len(texts) > 2 * SMALL["window"]  # several windows

    # one uninterrupted run, on a copy
    whole = Project(tmp_path / "whole")
    shutil.copytree(project.root, whole.root)
    enc = _encoder(tiny_bi_encoder)
    counter = CountingSession(enc.session)
    monkeypatch.setattr(enc, "_session", counter)
    totals = set()
    summary = embed_chunks(whole, enc, progress=lambda task, done, total: totals.add(total), **SMALL)
    assert summary["n_embedded"] == len(texts) and counter.rows == n_unique
    assert totals == {summary["n_texts_embedded"]} == {n_unique}  # the progress bar counts distinct texts
    n_batches = counter.calls
    reference = pq.read_table(whole.embeddings_path)

    # killed at batch k: the parts of the batches before it are kept, no embeddings.parquet
    k = n_batches // 2 + 1
    enc = _encoder(tiny_bi_encoder)
    killer = CountingSession(enc.session, fail_at=k)
    monkeypatch.setattr(enc, "_session", killer)
    with pytest.raises(KeyboardInterrupt):
        embed_chunks(project, enc, **SMALL)
    assert not project.embeddings_path.exists()
    cache = VectorCache(vector_cache_dir(project.root, enc.folder.fingerprint), 16)
    assert 0 < len(cache) < n_unique
    parts = list(cache.folder.glob("part-*.parquet"))
    assert sum(pq.read_metadata(p).num_rows for p in parts) == len(cache)  # each text stored once
    assert not list(cache.folder.glob(".*.tmp"))

    # the rerun embeds only what was not stored, in the same batches, to the same bits
    enc = _encoder(tiny_bi_encoder)
    counter = CountingSession(enc.session)
    monkeypatch.setattr(enc, "_session", counter)
    summary = embed_chunks(project, enc, **SMALL)
    assert counter.rows == n_unique - len(cache)
    assert summary["n_embedded"] == sum(sha256_text(t) not in cache for t in texts)
    assert summary["n_reused"] == len(texts) - summary["n_embedded"] > 0
    # parts are flushed every 2 batches, so at most one batch of work was lost
    assert counter.calls <= n_batches - (k - 1) + 1
    got = pq.read_table(project.embeddings_path)
    assert got.equals(reference) and got.schema.metadata == reference.schema.metadata


def test_embeddings_written_window_by_window(project, tiny_bi_encoder, check_contract):
    enc = _encoder(tiny_bi_encoder)
    embed_chunks(project, enc, **SMALL)
    meta = pq.read_metadata(project.embeddings_path)
    n = len(_texts(project))
    assert meta.num_row_groups == -(-n // SMALL["window"])  # one row group per window
    emb = read_embeddings(project.embeddings_path)
    assert emb.fingerprint == enc.folder.fingerprint and emb.dim == 16
    assert emb.chunk_ids == pq.read_table(project.chunks_path).column("chunk_id").to_pylist()
    # the vectors are the encoder's, in chunk order (windows and batches do not change them beyond rounding)
    np.testing.assert_allclose(emb.vectors, enc.encode_passages(_texts(project)), atol=1e-6)
    check_contract(project.root)


def test_rerun_embeds_nothing_and_damaged_parts_are_dropped(project, tiny_bi_encoder, monkeypatch):
    enc = _encoder(tiny_bi_encoder)
    embed_chunks(project, enc, **SMALL)
    first = pq.read_table(project.embeddings_path)
    counter = CountingSession(enc.session)
    monkeypatch.setattr(enc, "_session", counter)
    assert embed_chunks(project, enc, **SMALL)["n_embedded"] == 0 and counter.calls == 0
    assert pq.read_table(project.embeddings_path).equals(first)

    # a damaged part is deleted and its texts are embedded again; the rest is reused
    folder = vector_cache_dir(project.root, enc.folder.fingerprint)
    part = sorted(folder.glob("part-*.parquet"))[0]
    lost = pq.read_metadata(part).num_rows
    part.write_bytes(b"not parquet")
    project.embeddings_path.unlink()
    summary = embed_chunks(project, enc, **SMALL)
    assert not part.exists() and counter.rows == lost
    [repaired] = summary["cache_repaired"]  # named (the reason in the middle is pyarrow's)
    assert repaired.startswith(f"{part}: cannot be read as Parquet (") and repaired.endswith("); it was set aside "
                                                                                             "(deleted)")
    assert summary["n_embedded"] >= lost and summary["n_reused"] > 0
    got = pq.read_table(project.embeddings_path)
    np.testing.assert_allclose(np.array(got.column("vector").to_pylist()),
                               np.array(first.column("vector").to_pylist()), atol=1e-6)


# ------------------------------------------------------------------ query graphs
def test_query_graph_is_checked_before_embedding_and_does_not_key_the_cache(project, tmp_path, tiny_bi_encoder):
    from rag_cli.errors import BadInput
    from rag_cli.config import IndexConfig
    from rag_cli.index.searcher import Searcher
    from rag_cli.stages.index import build_index
    from tiny_models import make_bi_encoder

    folder = tmp_path / "m"
    shutil.copytree(tiny_bi_encoder, folder)
    foreign = make_bi_encoder(tmp_path / "other", dim=4)  # another model: 4-dimension vectors
    shutil.copy(foreign / "model.onnx", folder / "model_query.onnx")
    with pytest.raises(BadInput, match=r"model_query\.onnx: the query graph gives 4-dimension vectors but "
                                       r"model\.onnx gives 16"):
        embed_chunks(project, BiEncoder(ModelFolder.load(folder), threads=1), **SMALL)
    (folder / "model_query.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(BadInput, match=r"model_query\.onnx: onnxruntime cannot load it"):
        embed_chunks(project, BiEncoder(ModelFolder.load(folder), threads=1), **SMALL)
    assert not project.embeddings_path.exists()  # both stopped before embedding anything

    # a good query graph (here a copy of the graph): the vectors are cached under the passage fingerprint
    shutil.copy(folder / "model.onnx", folder / "model_query.onnx")
    with_query = ModelFolder.load(folder)
    assert with_query.query_onnx_path == folder / "model_query.onnx"
    summary = embed_chunks(project, BiEncoder(with_query, threads=1), **SMALL)
    assert summary["fingerprint"] == with_query.fingerprint != with_query.passage_fingerprint
    assert vector_cache_dir(project.root, with_query.passage_fingerprint).is_dir()
    # without it the model is another one (search refuses the index, saying why), but no passage is embedded again
    build_index(project, IndexConfig(), threads=1)
    (folder / "model_query.onnx").unlink()
    with pytest.raises(BadInput, match=r"only the query graph differs: the folder no longer has the query graph .*"
                                       r"Rerun `rag embed` \(it reuses every cached vector\) and `rag index`"):
        Searcher.open(project.index_dir, BiEncoder(ModelFolder.load(folder), threads=1))
    alone = ModelFolder.load(folder)
    assert alone.fingerprint == alone.passage_fingerprint == with_query.passage_fingerprint
    summary = embed_chunks(project, BiEncoder(alone, threads=1), **SMALL)
    assert summary["n_embedded"] == 0 and summary["n_reused"] == summary["n_chunks"] > 0
    build_index(project, IndexConfig(), threads=1)
    shutil.copy(folder / "model.onnx", folder / "model_query.onnx")  # and back: a query graph the index lacks
    with pytest.raises(BadInput, match=r"only the query graph differs: the folder now has .*model_query\.onnx"):
        Searcher.open(project.index_dir, BiEncoder(ModelFolder.load(folder), threads=1))
    (folder / "model_query.onnx").unlink()

    # a foreign query graph that got past the checks: dense search says so instead of reading past the vectors
    build_index(project, IndexConfig(), threads=1)
    shutil.copy(foreign / "model.onnx", folder / "model_query.onnx")
    searcher = Searcher.open(project.index_dir)  # no embedder: no fingerprint check
    searcher.embedder = BiEncoder(ModelFolder.load(folder), threads=1)
    with pytest.raises(BadInput, match=r"model_query\.onnx gives 4-dimension query vectors but the index in .* "
                                       r"holds 16-dimension vectors"):
        searcher.search("paris", mode="dense")
    with pytest.raises(ValueError, match=r"shape \(1, 4\); the index holds 16-dimension vectors"):
        searcher.dense.search(np.zeros((1, 4), np.float32), 3)
