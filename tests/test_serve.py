"""`rag serve` as a user runs it: a real server process on 127.0.0.1 (port
0: the server picks a free one and prints it), asked over HTTP with httpx
and over MCP with the `mcp` SDK's client, always stopped (SIGTERM, then
SIGKILL) by the fixture or the `finally` that started it, even when a test
fails. Every wait is bounded.

Searches and answers equal the CLI's `--json`; bad input is 400 (never
500); a key is required with --api-key-env (401), and a non-loopback
--host without one exits 2 before binding; SIGTERM stops it with exit 0;
new index generations are served while 4 clients search and `rag update`
switches generations (every response checked against the generation it
names); the query log and feedback feed `rag_cli.lab.online`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import require_module
from test_living import scifact_docs  # noqa: F401 (a fixture: the first 120 SciFact documents)

httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}
QUERIES = ["reciprocal rank fusion", "What does the b parameter control in BM25?", "HNSW ef search beam",
           "为什么中文需要分词", "chunk overlap"]
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module", autouse=True)
def serve_extra():
    """fastapi, uvicorn and mcp: the serve extra (in the dev extra, so `make test` has them)."""
    for module, dist in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("mcp", "mcp (2.x)")):
        require_module(module, dist)


# --------------------------------------------------------------------------- the server process
class Server:
    """A `rag serve` process: `url`, `proc`, `log` (its stderr), `stop()`."""

    def __init__(self, project: Path, *args: str, env: dict | None = None, timeout: float = 90.0):
        self.log = project.parent / f"serve-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "rag_cli", "serve", "-p", str(project), "--port", "0",
                                          *args], env=env or ENV, stdout=subprocess.DEVNULL, stderr=err)
        try:
            self.url = self._wait_for_address(timeout)
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_for_address(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"on (http://127\.0\.0\.1:\d+)", self.log.read_text(errors="replace"))
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                pytest.fail(f"rag serve exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        pytest.fail(f"rag serve printed no address within {timeout} s: {self.log.read_text()[-3000:]}")

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=5).status_code == 200:
                    return
            time.sleep(0.1)
        pytest.fail(f"rag serve did not answer /healthz within {timeout} s: {self.log.read_text()[-3000:]}")

    def post(self, path: str, body, **kw) -> "httpx.Response":
        return httpx.post(self.url + path, json=body, timeout=60, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send `sig`; kill after `timeout` s. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode


@contextlib.contextmanager
def serving(project: Path, *args: str, env: dict | None = None):
    server = Server(project, *args, env=env)
    try:
        yield server
    finally:
        server.stop()


def rag_json(*args) -> dict:
    """`rag ARGS --json` in a fresh process of this checkout: its JSON."""
    res = subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args), "--json"], env=ENV, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def without_timings(answer: dict) -> dict:
    """An answer's JSON less what differs between two runs of the same question (the clocks)."""
    return {k: v for k, v in answer.items() if k not in ("latency_ms", "timings")}


@pytest.fixture(scope="module")
def sample(make_sample_project, tmp_path_factory) -> Path:
    """sample_corpus/docs, chunked, embedded (tiny bi-encoder) and indexed."""
    return make_sample_project(tmp_path_factory.mktemp("serve") / "p").root


@pytest.fixture(scope="module")
def server(sample):
    with serving(sample) as s:
        yield s


# --------------------------------------------------------------------------- JSON equal to the CLI's
@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid"])
def test_search_equals_the_cli_json(server, sample, mode):
    for query in QUERIES[:3]:
        r = server.post("/search", {"query": query, "mode": mode, "k": 4})
        assert r.status_code == 200, r.text
        assert r.json() == rag_json("search", query, "--mode", mode, "-k", 4, "-p", sample)
        assert re.fullmatch(r"gen-\d{6}", r.headers["x-rag-generation"])
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-rag-answer-id"])
    body = {"query": QUERIES[0], "filter": ["doc_id=hybrid*"], "k": 3}
    got = server.post("/search", {**body, "mode": mode}).json()
    assert got == rag_json("search", QUERIES[0], "--filter", "doc_id=hybrid*", "-k", 3, "--mode", mode, "-p", sample)
    assert got["results"] and all(h["doc_id"].startswith("hybrid") for h in got["results"])


@pytest.mark.e2e
def test_ask_equals_the_cli_json_and_streams_the_same_answer(server, sample):
    for question in (QUERIES[1], "What is the boiling point of mercury?"):
        r = server.post("/ask", {"question": question})
        assert r.status_code == 200, r.text
        cli = rag_json("ask", question, "-p", sample)
        assert without_timings(r.json()) == without_timings(cli)
        with httpx.stream("POST", server.url + "/ask", json={"question": question, "stream": True},
                          timeout=60) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            events = [(m.group(1), json.loads(m.group(2)))
                      for m in re.finditer(r"event: (\w+)\ndata: (.*)\n\n", s.read().decode())]
        assert [k for k, _ in events][-1] == "answer" and {k for k, _ in events[:-1]} <= {"text"}
        assert "".join(d["text"] for k, d in events if k == "text") == cli["answer"]
        assert without_timings(events[-1][1]) == without_timings(cli)


@pytest.mark.e2e
def test_ask_takes_the_english_threshold_as_the_cli_does(server, sample):
    question = QUERIES[1]  # English: judged by ask.min_score_en
    r = server.post("/ask", {"question": question, "min_score_en": 0.9999})
    assert r.status_code == 200, r.text
    assert r.json()["refused"] and (r.json()["min_score_key"], r.json()["min_score_used"]) == ("min_score_en", 0.9999)
    assert without_timings(r.json()) == without_timings(rag_json("ask", question, "--min-score-en", "0.9999",
                                                                 "-p", sample))
    r = server.post("/ask", {"question": question, "min_score": 0.9999, "min_score_en": -1.0, "min_coverage": 0.0})
    assert r.status_code == 200 and not r.json()["refused"] and r.json()["min_score_used"] == -1.0, r.text
    r = server.post("/ask", {"question": question, "min_score_en": 1.5})
    assert r.status_code == 400 and "--min-score-en 1.5" in r.json()["error"], r.text


@pytest.mark.e2e
def test_status_and_openapi(server, sample):
    assert httpx.get(server.url + "/status", timeout=30).json() == rag_json("status", "-p", sample)
    spec = httpx.get(server.url + "/openapi.json", timeout=30).json()
    assert {"/search", "/ask", "/status", "/healthz", "/feedback"} <= set(spec["paths"])
    health = httpx.get(server.url + "/healthz", timeout=30).json()
    assert health["ok"] and health["generation"] == "gen-000001" and health["reload_error"] is None
    assert health["query_graph"] == "passage"  # the tiny model has no query graph: its one graph encodes queries


# --------------------------------------------------------------------------- bad input: 400, never 500
BAD = [
    ({"query": ""}, "the query is empty", None),
    ({"query": "   "}, "the query is empty", None),
    ({"query": "\u0000\u0000"}, "the query is empty", None),
    ({"query": "\u200b\u200b", "mode": "dense"}, "the query is empty", None),
    ({"query": "x", "mode": "fuzzy"}, "--mode 'fuzzy' (config search.mode): must be one of", None),
    ({"query": "x", "filter": "nosuchfield=1"}, "no field 'nosuchfield'", None),
    ({"query": "x", "filter": ["doc_id~x"]}, "expected FIELD=VALUE", None),
    ({"query": "x", "k": 0}, "must be ≥ 1", None),
    ({"query": "x", "k": 101}, "at most 100 per request", "k"),
    ({"query": "x", "candidates": 5000}, "at most 1000", "candidates"),
    ({"query": "x", "k": "5"}, "valid integer", "k"),
    ({"query": "x", "k": 2.5}, "valid integer", "k"),
    ({"query": 3}, "valid string", "query"),
    ({"query": "x", "limit": 3}, "unknown field", "limit"),
    ({}, "Field required", "query"),
    ([1, 2], "must be a JSON object", None),
]


@pytest.mark.e2e
@pytest.mark.parametrize("body, message, field", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_search_input_is_400_naming_it(server, body, message, field):
    r = server.post("/search", body)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]
    assert r.json().get("field") == field


@pytest.mark.e2e
def test_bad_ask_input_body_size_and_content_type(server):
    for body, message in (({"question": ""}, "the query is empty"), ({"question": "x", "k": 500}, "at most 100"),
                          ({"question": "x", "gate": "maybe"}, "gate"), ({"question": "", "stream": True}, "empty"),
                          ({"question": "x", "generator": "openai"}, "unknown field")):
        r = server.post("/ask", body)
        assert r.status_code == 400 and message in r.json()["error"], (body, r.text)
    r = httpx.post(server.url + "/search", content=b'{"query": "x",', headers=JSON, timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    big = json.dumps({"query": "a" * 70_000}).encode()
    assert httpx.post(server.url + "/search", content=big, headers=JSON, timeout=30).status_code == 413

    def chunks():
        yield big[:40_000]
        yield big[40_000:]

    r = httpx.post(server.url + "/search", content=chunks(), headers=JSON, timeout=30)  # no Content-Length
    assert r.status_code == 413 and "over 65536 bytes" in r.json()["error"]
    r = httpx.post(server.url + "/search", content=b'{"query": "x"}', timeout=30)  # no JSON content type
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    assert server.post("/feedback", {"answer_id": "0" * 32, "rating": "up"}).status_code == 400  # no --log
    assert server.post("/feedback", {"answer_id": "xyz", "rating": "up"}).json()["field"] == "answer_id"
    assert httpx.get(server.url + "/nowhere", timeout=30).status_code == 404
    assert server.proc.poll() is None


# --------------------------------------------------------------------------- the API key
@pytest.mark.e2e
def test_api_key_is_required_when_named(sample):
    env = {**ENV, "RAG_TEST_SERVE_KEY": "s3cret-key"}
    with serving(sample, "--api-key-env", "RAG_TEST_SERVE_KEY", "--mcp", "none", env=env) as s:
        body = {"query": "rrf", "k": 1}
        assert s.post("/search", body).status_code == 401
        r = s.post("/search", body, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and "API key" in r.json()["error"] and r.headers["www-authenticate"] == "Bearer"
        assert s.post("/search", body, headers={"X-API-Key": "s3cret-ke"}).status_code == 401
        assert s.post("/search", body, headers={"Authorization": "Bearer s3cret-key"}).status_code == 200
        assert s.post("/search", body, headers={"X-API-Key": "s3cret-key"}).status_code == 200
        assert httpx.get(s.url + "/status", timeout=30).status_code == 401
        assert httpx.get(s.url + "/openapi.json", timeout=30).status_code == 401
        assert httpx.get(s.url + "/healthz", timeout=30).status_code == 200  # the probe stays open


def test_a_non_loopback_host_needs_a_key_and_exits_2_before_binding(sample):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["serve", "-p", str(sample), "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "needs an API key" in res.output and "--api-key-env" in res.output
    res = runner.invoke(app, ["serve", "-p", str(sample), "--host", "0.0.0.0", "--api-key-env", "RAG_NO_SUCH_VAR_X"])
    assert res.exit_code == 2 and "RAG_NO_SUCH_VAR_X is not set" in res.output
    res = runner.invoke(app, ["serve", "-p", str(sample), "--api-key-env", "my key"])
    assert res.exit_code == 2 and "NAME of an environment variable" in res.output
    res = runner.invoke(app, ["serve", "-p", str(sample), "--port", "70000"])
    assert res.exit_code == 2 and "--port 70000" in res.output
    res = runner.invoke(app, ["serve", "-p", str(sample), "--mcp", "smoke"])
    assert res.exit_code == 2 and "--mcp" in res.output


def test_no_index_exits_2(tmp_path):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(app, ["serve", "-p", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "rag index" in res.output


# --------------------------------------------------------------------------- SIGTERM, the log, feedback
@pytest.mark.e2e
def test_sigterm_stops_cleanly_and_the_log_feeds_online_metrics(sample, tmp_path):
    from rag_cli import Project, lab
    from rag_cli.store.query_log import read_log

    project = tmp_path / "p"
    shutil.copytree(sample, project)
    s = Server(project, "--log")
    try:
        ids = []
        for q in ["rrf fusion", "rrf fusion", "bm25 length normalisation", "RRF  Fusion"]:
            r = s.post("/search", {"query": q, "k": 3, "mode": "sparse"})
            assert r.status_code == 200
            ids.append(r.headers["x-rag-answer-id"])
        assert s.post("/search", {"query": ""}).status_code == 400
        asked = s.post("/ask", {"question": QUERIES[1]})
        ids.append(asked.headers["x-rag-answer-id"])
        for answer_id, rating in ((ids[4], "up"), (ids[0], "down"), (ids[0], "down")):
            r = s.post("/feedback", {"answer_id": answer_id, "rating": rating, "comment": "test"})
            assert r.status_code == 200 and r.json()["recorded"]
        # a request in flight when SIGTERM comes: its body is sent half before and half after
        sent_half, signalled, in_flight = threading.Event(), threading.Event(), []

        def body():
            yield b'{"question": "What does ef control'
            sent_half.set()
            signalled.wait(30)
            time.sleep(0.3)
            yield b' in HNSW?"}'

        def slow() -> None:
            try:
                in_flight.append(httpx.post(s.url + "/ask", content=body(), headers=JSON, timeout=60))
            except Exception as exc:  # noqa: BLE001 - reported by the assert below
                in_flight.append(exc)

        t = threading.Thread(target=slow)
        t.start()
        assert sent_half.wait(30)
        time.sleep(0.3)
        s.proc.send_signal(signal.SIGTERM)
        signalled.set()
        assert s.proc.wait(timeout=60) == 0
        t.join(timeout=60)
    finally:
        s.stop()
    assert "stopped" in s.log.read_text()
    assert isinstance(in_flight[0], httpx.Response) and in_flight[0].status_code == 200, in_flight
    ids.append(in_flight[0].headers["x-rag-answer-id"])
    rows = read_log(project, "queries").to_pylist()
    assert len(rows) == 7 and {r["endpoint"] for r in rows} == {"search", "ask"}
    assert ids[-1] in {r["answer_id"] for r in rows}  # the request in flight at SIGTERM was answered and logged
    first = next(r for r in rows if r["answer_id"] == ids[0])
    assert first["query"] == "rrf fusion" and first["mode"] == "sparse" and first["k"] == 3 and first["status"] == 200
    assert first["generation"] == "gen-000001" and len(first["hit_ids"]) == 3 and first["refused"] is None
    bad = next(r for r in rows if r["status"] == 400)
    assert "empty" in bad["error"] and bad["hit_ids"] is None
    ask = next(r for r in rows if r["answer_id"] == ids[4])
    assert ask["endpoint"] == "ask" and ask["refused"] is False and ask["hit_ids"] and ask["best_cosine"] > 0
    assert len(read_log(project, "feedback")) == 3
    report = lab.online.run(Project.open(project), top=5)
    d = report.to_dict()
    assert d["n_requests"] == len(rows) and d["errors_by_status"] == {"400": 1}
    assert d["feedback"] == {"n_rated": 2, "up": 1, "down": 1, "rated_share": pytest.approx(2 / (len(rows) - 1)),
                             "n_unknown_answer_ids": 0}
    assert d["metrics"]["thumbs_down_rate"] == 0.5 and d["metrics"]["refusal_rate"] == 0.0
    assert d["latency_ms"]["search"]["n"] == 4 and d["latency_ms"]["all"]["p50"] > 0
    top = d["without_good_hit"]["top"][0]
    assert top["query"] == "rrf fusion" and top["thumbs_down"] == 1
    assert report.path == project / "eval" / "online.json" and report.path.exists()


# --------------------------------------------------------------------------- MCP
def _mcp_calls(client_factory) -> tuple[list, dict, dict, str, str, list]:
    async def main():
        async with client_factory() as c:
            tools = sorted(t.name for t in (await c.list_tools()).tools)
            found = await c.call_tool("search", {"query": QUERIES[0], "k": 3, "mode": "sparse"})
            answer = await c.call_tool("ask", {"question": QUERIES[1]})
            bad = await c.call_tool("search", {"query": "", "k": 3})
            status = await c.read_resource("rag://status")
            assert not found.is_error and not answer.is_error and bad.is_error
            refused = [await c.call_tool(name, args) for name, args in (
                ("search", {"query": "hnsw", "project": "/etc"}), ("search", {"query": "hnsw", "mode": "bogus"}),
                ("ask", {"question": "\u200b"}), ("search", {"query": "hnsw", "k": "five"}))]
            assert all(r.is_error for r in refused), refused
            return tools, found.structured_content, answer.structured_content, bad.content[0].text, \
                status.contents[0].text, [r.content[0].text for r in refused]

    return asyncio.run(asyncio.wait_for(main(), timeout=120))


def _check_mcp(sample, got) -> None:
    tools, found, answer, bad, status, refused = got
    unknown, mode, empty, k = refused
    assert "project: not an argument of the search tool; its arguments are query, mode, k, filter" in unknown
    assert "argument mode 'bogus': must be one of" in mode and "--" not in mode and "config" not in mode
    assert "the query is empty" in empty
    assert "k" in k and "--" not in k
    assert tools == ["ask", "search"]
    assert found == rag_json("search", QUERIES[0], "-k", 3, "--mode", "sparse", "-p", sample)
    assert without_timings(answer) == without_timings(rag_json("ask", QUERIES[1], "-p", sample))
    assert "the query is empty" in bad
    assert json.loads(status)["project"] == str(sample)


@pytest.mark.e2e
def test_mcp_tools_over_streamable_http(server, sample):
    from mcp import Client

    _check_mcp(sample, _mcp_calls(lambda: Client(server.url + "/mcp")))


@pytest.mark.e2e
def test_mcp_tools_over_stdio(sample):
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "rag_cli", "serve", "--mcp", "stdio", "-p",
                                                                 str(sample)], env=ENV)
    _check_mcp(sample, _mcp_calls(lambda: Client(params)))


@pytest.mark.e2e
def test_mcp_over_http_needs_the_key_too(sample):
    from mcp import Client

    env = {**ENV, "RAG_TEST_SERVE_KEY": "k3y"}
    with serving(sample, "--api-key-env", "RAG_TEST_SERVE_KEY", env=env) as s:
        r = httpx.post(s.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30,
                       headers={"Accept": "application/json, text/event-stream"})
        assert r.status_code == 401

        async def main():
            import httpx2

            async with httpx2.AsyncClient(headers={"Authorization": "Bearer k3y"}, timeout=60) as http:
                from mcp.client.streamable_http import streamable_http_client

                async with Client(streamable_http_client(s.url + "/mcp", http_client=http)) as c:
                    return (await c.call_tool("search", {"query": "rrf", "k": 1})).structured_content

        got = asyncio.run(asyncio.wait_for(main(), timeout=120))
        assert len(got["results"]) == 1


# --------------------------------------------------------------------------- hot reload
SEARCHED = ["cancer therapy tumor", "protein folding", "vitamin D deficiency", "insulin resistance obesity",
            "DNA methylation", "stem cells"]


def _generation_project(project: Path, gen: str, into: Path) -> Path:
    """A project folder whose only index generation is `gen` of `project` (a link), to search it alone."""
    root = into / gen
    if not root.exists():
        (root / "index").mkdir(parents=True)
        shutil.copy(project / "rag.toml", root / "rag.toml")
        os.symlink(project / "index" / gen, root / "index" / gen)
        (root / "index" / "CURRENT").write_text(gen + "\n", encoding="utf-8")
    return root


def _hot_reload(tmp_path, scifact_docs, tiny_bi_encoder, n_updates: int) -> None:
    """4 clients search (sparse, dense, hybrid) without pause while `n_updates` `rag update` runs alternate
    the corpus between two states. Every response must be 200 and equal what its generation (named in
    X-Rag-Generation) gives when searched alone afterwards; the server must have served every generation."""
    from rag_cli import Project
    from test_living import build, state_b, write_corpus

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:100])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    seen: list[tuple[str, str, str, dict]] = []
    errors: list[str] = []
    stop = threading.Event()
    with serving(p.root, "--reload-poll", "0.1", "--mcp", "none") as s:
        def client(i: int) -> None:
            modes = ("sparse", "hybrid", "dense")
            with httpx.Client(timeout=60) as http:
                n = 0
                while not stop.is_set():
                    q, mode = SEARCHED[(i + n) % len(SEARCHED)], modes[(i + n) % 3]
                    n += 1
                    try:
                        r = http.post(s.url + "/search", json={"query": q, "mode": mode, "k": 5})
                        if r.status_code != 200:
                            errors.append(f"{r.status_code} {r.text[:300]}")
                        else:
                            seen.append((r.headers["x-rag-generation"], q, mode, r.json()))
                    except Exception as exc:  # noqa: BLE001 - any failure counts
                        errors.append(repr(exc))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        try:
            for i in range(n_updates):
                write_corpus(src, state_b(scifact_docs) if i % 2 == 0 else scifact_docs[:100])
                proc = subprocess.run([sys.executable, "-m", "rag_cli", "update", "-p", str(p.root), "-q",
                                       "--keep", str(n_updates + 1)], env=ENV, capture_output=True, text=True,
                                      timeout=300)
                assert proc.returncode == 0, proc.stderr
                time.sleep(0.3)
            deadline = time.monotonic() + 60
            while httpx.get(s.url + "/healthz", timeout=10).json()["reloads"] < n_updates:
                assert time.monotonic() < deadline, "the server did not load the last generation within 60 s"
                time.sleep(0.1)
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        health = httpx.get(s.url + "/healthz", timeout=10).json()
    assert errors == [], errors[:5]
    gens = sorted({g for g, *_ in seen})
    assert health["generation"] == f"gen-{n_updates + 1:06d}" and health["reload_error"] is None
    assert len(gens) >= 2 and gens[-1] == health["generation"], gens
    expected: dict[tuple[str, str, str], dict] = {}
    wrong = 0
    for gen, q, mode, got in seen:
        key = (gen, q, mode)
        if key not in expected:
            alone = Project.open(_generation_project(p.root, gen, tmp_path / "alone"))
            from rag_cli.json_shapes import search_json

            expected[key] = search_json(q, alone.search(q, mode=mode, k=5))
        wrong += got != expected[key]
    assert wrong == 0, f"{wrong} of {len(seen)} responses differ from their generation's results"
    assert len(seen) >= 4 * n_updates


@pytest.mark.e2e
def test_hot_reload_under_concurrent_requests(tmp_path, scifact_docs, tiny_bi_encoder):
    _hot_reload(tmp_path, scifact_docs, tiny_bi_encoder, n_updates=4)


@pytest.mark.e2e
@pytest.mark.slow
def test_hot_reload_under_20_updates(tmp_path, scifact_docs, tiny_bi_encoder):
    """The issue's run: 20 `rag update` runs switch generations under 4 clients; 0 failed, 0 wrong."""
    _hot_reload(tmp_path, scifact_docs, tiny_bi_encoder, n_updates=20)


# --------------------------------------------------------------------------- the warm engines, in-process
def test_a_request_keeps_its_generation_while_a_new_one_is_swapped_in(make_sample_project, tmp_path):
    """`WarmEngines.pinned()`: every library call of a request gets the searcher it started with; the
    reload thread swaps the next generation in for the requests after it; models are kept."""
    from rag_cli.serve.warm import WarmEngines

    p = make_sample_project(tmp_path / "p")
    warm = WarmEngines(p.folder, poll=0.05)
    p.engines = warm
    first = warm.load()
    embedder = first.embedder
    with warm.pinned() as s:
        assert s is first and p.search("rrf", k=1).hits  # the library call took the pinned one
        p.index(hnsw_m=8)  # a new generation becomes current during the request
        warm.start()
        deadline = time.monotonic() + 30
        while warm.served is first:
            assert time.monotonic() < deadline, warm.reload_error
            time.sleep(0.02)
        assert warm.searcher(p.config, with_embedder=True) is first  # still this request's
        assert p.engines.search_setup({"mode": "dense"})[1] is first
    assert warm.searcher(p.config, with_embedder=False) is warm.served
    assert warm.served.index_dir.name == "gen-000002" and warm.n_reloads == 1
    assert warm.served.embedder is embedder  # the bi-encoder is kept across generations
    warm.stop()


def test_a_generation_that_cannot_be_loaded_is_not_served(make_sample_project, tmp_path):
    from rag_cli.serve.warm import WarmEngines

    p = make_sample_project(tmp_path / "p")
    warm = WarmEngines(p.folder, poll=0.05)
    first = warm.load()
    p.index(hnsw_m=8)
    (p.index_dir / "gen-000002" / "chunks.arrow").write_bytes(b"damaged")
    warm.start()
    deadline = time.monotonic() + 30
    while warm.reload_error is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert warm.served is first and "chunks.arrow" in warm.reload_error
    warm.stop()


def test_one_at_a_time_serialises_a_generators_calls():
    from rag_cli.serve.warm import OneAtATime

    class Gen:
        name, streams, inside, most = "llama-cpp", True, 0, 0

        def generate(self, x):
            Gen.inside += 1
            Gen.most = max(Gen.most, Gen.inside)
            time.sleep(0.01)
            Gen.inside -= 1
            return x

    g = OneAtATime(Gen())
    threads = [threading.Thread(target=g.generate, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Gen.most == 1 and g.name == "llama-cpp" and g.streams is True and g.generate(3) == 3


def test_the_listening_socket_is_tcp_with_nagle_off():
    """asyncio sets TCP_NODELAY only on sockets created as IPPROTO_TCP: without it a response written in
    two parts waited 40 ms for the client's delayed ACK (bench/serve_load.py found it)."""
    import socket

    from rag_cli.serve.run import _listen

    sock = _listen("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        sock.close()


# --------------------------------------------------------------------------- connection limits (torture)
def _closed_by_server(sock, timeout: float) -> bool:
    """True when the server closes `sock` (EOF or reset) within `timeout` s."""
    import socket

    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


@pytest.mark.slow
def test_idle_and_slow_header_connections_at_the_limit_do_not_stop_the_server(sample):
    """80 idle connections (the limit with --max-concurrent 1: 1 * 16 + 64) and 8 that send their request head
    one byte every 0.5 s: /healthz still answers at once (a slot is kept for it), other requests get 503, and
    within the head deadline (rag_cli.serve.protocol.HEADER_TIMEOUT) the server closes them all and answers
    searches again. 127.0.0.1 only; every wait is bounded."""
    import socket

    from rag_cli.serve.protocol import HEADER_TIMEOUT

    with serving(sample, "--max-concurrent", "1") as s:
        host, port = s.url.removeprefix("http://").split(":")
        idle, slow = [], []
        stop = threading.Event()

        def trickle() -> None:
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
            for byte in head:
                if stop.wait(0.5):
                    return
                for sock in list(slow):
                    with contextlib.suppress(OSError):
                        sock.send(bytes([byte]))

        trickler = threading.Thread(target=trickle, daemon=True)
        try:
            idle += [socket.create_connection((host, int(port)), timeout=5) for _ in range(80)]
            slow += [socket.create_connection((host, int(port)), timeout=5) for _ in range(8)]
            opened = time.monotonic()
            trickler.start()
            time.sleep(0.5)  # the server accepts them
            assert httpx.get(s.url + "/healthz", timeout=5).status_code == 200
            busy = s.post("/search", {"query": "bm25", "mode": "sparse"})
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
            wait = HEADER_TIMEOUT + 5 - (time.monotonic() - opened)
            assert all(_closed_by_server(sock, max(wait, 0.1)) for sock in idle + slow)
            assert time.monotonic() - opened < HEADER_TIMEOUT + 5
            res = s.post("/search", {"query": "bm25", "mode": "sparse"})
            assert res.status_code == 200 and res.json()["results"], res.text
        finally:
            stop.set()
            for sock in idle + slow:
                sock.close()
            if trickler.is_alive():
                trickler.join(timeout=5)


def test_a_keep_alive_connection_must_send_its_next_head_in_time(sample):
    """After a response the next request head has the same deadline: a connection that sends one byte of it and
    then nothing is closed within HEADER_TIMEOUT (+ 3 s), while one that asks in time is answered."""
    import socket

    from rag_cli.serve.protocol import HEADER_TIMEOUT

    with serving(sample) as s:
        host, port = s.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
                got += sock.recv(65536)
            assert got.startswith(b"HTTP/1.1 200")
            sock.sendall(b"G")
            began = time.monotonic()
            assert _closed_by_server(sock, HEADER_TIMEOUT + 3)
            assert time.monotonic() - began < HEADER_TIMEOUT + 3


def test_a_query_with_a_lone_surrogate_is_400_and_logging_goes_on(sample, tmp_path):
    """The row of a query UTF-8 cannot encode is dropped (told on stderr, counted in /healthz), not retried for
    ever: the queries after it are logged."""
    from rag_cli.store.query_log import read_log

    project = tmp_path / "p"
    shutil.copytree(sample, project)
    with serving(project, "--log") as s:
        bad = httpx.post(s.url + "/search", content=b'{"query": "bm25 \\ud800", "mode": "sparse"}', headers=JSON,
                         timeout=60)
        assert bad.status_code == 400, bad.text
        assert s.post("/search", {"query": "bm25", "mode": "sparse"}).status_code == 200
        assert s.stop() == 0
    queries = read_log(project, "queries").column("query").to_pylist()
    assert queries == ["bm25"]
    assert "1 row(s) dropped" in s.log.read_text()


def test_healthz_shows_no_path_and_counts_dropped_log_rows(make_sample_project, tmp_path):
    """/healthz needs no key: its reload_error names the part at fault, relative to the project, never the
    project's absolute path."""
    from rag_cli.serve.service import Service

    p = make_sample_project(tmp_path / "p")
    config = p.folder.with_options("serve", {"reload_poll": 0.05, "log": True}).serve
    service = Service(p, config).open()
    try:
        p.index(hnsw_m=8)
        # replaced, not rewritten in place: the reload thread may already have mapped the file, and a mapped
        # file cut short under a reader kills the process (SIGBUS/SIGSEGV), which is not what this tests
        damaged = p.index_dir / "gen-000002" / "chunks.arrow.damaged"
        damaged.write_bytes(b"damaged")
        os.replace(damaged, p.index_dir / "gen-000002" / "chunks.arrow")
        deadline = time.monotonic() + 30
        while service.engines.reload_error is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        service.queries.append({"query": "bm25 \ud800"})
        service.queries.flush()
        health = service.health()
    finally:
        service.close()
    shown = json.dumps(health, ensure_ascii=False)
    assert "chunks.arrow" in health["reload_error"] and str(tmp_path) not in shown and str(p.root) not in shown
    assert health["log_dropped"] == 1 and "UnicodeEncodeError" in health["log_error"]
