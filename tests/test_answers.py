"""Answers people can trust: plain terminal output, checked citations, the
prompt of LLM generators, and the `openai` generator against a fake
OpenAI-compatible server on 127.0.0.1 (started and stopped by each test)."""

from __future__ import annotations

import json
import re
import socket

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.errors import WorkFailed
from rag_cli.generate.base import Answer, Evidence, is_refusal
from rag_cli.generate.citations import check, check_answer, neutralise, statements
from rag_cli.generate.openai_server import OpenAIGenerator
from rag_cli.generate.prompt import (chat_messages, completion_prompt, estimate_tokens, fit_budget,
                                     order_for_prompt, source_block)
from rag_cli.project import Project
from rag_cli.safe_text import plain
from fake_openai import FakeOpenAI

NASTY = "Ranking [/bold] uses [link=http://x]fusion[/link] \x1b[31mred\x1b[0m a\rb bell\x07 [3] and [9]."


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- plain text
def test_plain_removes_escapes_and_controls_and_keeps_markup_literal():
    assert plain(NASTY) == "Ranking [/bold] uses [link=http://x]fusion[/link] red ab bell [3] and [9]."
    assert plain("\x1b]8;;http://evil\x07click\x1b]8;;\x1b\\ done") == "click done"  # OSC 8 hyperlink
    assert plain("a\x9b2Jb\x1bPq#0\x1b\\c") == "abc"  # 8-bit CSI, DCS string
    assert plain("x\u202eevil\u2066y") == "xevily"  # bidi override / isolate
    assert plain("line one\r\nline\ttwo") == "line one\nline\ttwo"
    assert plain(plain(NASTY)) == plain(NASTY)


# --------------------------------------------------------------------------- citations
def test_neutralise_rewrites_every_citation_shaped_bracket():
    assert neutralise("see [3], [1, 2] and 【4】 but not [a] or [x1]") == "see (3), (1, 2) and (4) but not [a] or [x1]"


def test_check_removes_and_counts_numbers_outside_the_evidence():
    text, cited, removed = check("A is B [1]. C is D [9]. E holds [2, 9, 1].", {1, 2})
    assert text == "A is B [1]. C is D. E holds [2][1]."
    assert cited == [1, 2] and removed == 2
    assert check("no markers", {1}) == ("no markers", [], 0)


def test_statements_carry_their_citations_and_flag_uncited_ones():
    got = [(s.text, s.citations, s.uncited) for s in statements("A is B [1]. C is D. [2] No source here. 中文句子[1]。第二句。[3]")]
    assert got == [("A is B [1].", [1], False), ("C is D. [2]", [2], False), ("No source here.", [], True),
                   ("中文句子[1]。", [1], False), ("第二句。[3]", [3], False)]


def test_check_answer_rebuilds_chunk_citations_from_valid_markers():
    ev = [Evidence(1, "a#0", "a", "x", 0.9), Evidence(2, "b#0", "b", "y", 0.8)]
    got = check_answer(Answer("One [2]. Two [7][1].", ["zzz"], False, "openai"), ev)
    assert got.text == "One [2]. Two [1]." and got.citations == ["b#0", "a#0"] and got.n_citations_removed == 1


def test_is_refusal_in_both_languages():
    assert is_refusal("Not found in the sources.") and is_refusal('"not found in the sources"')
    assert is_refusal("资料中未提及。") and not is_refusal("BM25 is a ranking function [1].")


# --------------------------------------------------------------------------- prompt
def _evidence(n=5, text="Some evidence text about ranking."):
    return [Evidence(i, f"d{i}.md#0", f"d{i}.md", f"{text} [{i + 10}]", 1 - i / 100, title_path=[f"Doc {i}"])
            for i in range(1, n + 1)]


def test_order_against_lost_in_the_middle():
    assert [e.number for e in order_for_prompt(_evidence(5))] == [1, 3, 4, 5, 2]
    assert [e.number for e in order_for_prompt(_evidence(2))] == [1, 2]


def test_source_blocks_are_numbered_with_title_and_path_and_neutralised():
    block = source_block(_evidence(1)[0])
    assert block == "[1] Title: Doc 1  Path: d1.md\nSome evidence text about ranking. (11)"


def test_fit_budget_cuts_the_lowest_ranked_first():
    ev = _evidence(5, text="word " * 40)
    per = estimate_tokens(source_block(ev[0])) + 1
    kept, cut = fit_budget(ev, 3 * per)
    assert [e.number for e in kept] == [1, 2, 3] and cut == 2
    kept, cut = fit_budget(ev, per // 2)  # the best alone is too long: kept, its text cut
    assert [e.number for e in kept] == [1] and cut == 4 and len(kept[0].text) < len(ev[0].text)
    assert estimate_tokens("abcdefgh") == 2 and estimate_tokens("中文") == 2


def test_prompts_hold_instructions_refusal_sources_and_question():
    msgs = chat_messages("What is RRF?", _evidence(3))
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "Not found in the sources." in msgs[0]["content"] and "[n]" in msgs[0]["content"]
    user = msgs[1]["content"]
    assert user.index("[1] Title") < user.index("[3] Title") < user.index("[2] Title")
    assert user.endswith("Question: What is RRF?")
    zh = completion_prompt("什么是 RRF？", _evidence(2))
    assert "资料中未提及。" in zh and zh.endswith("问题：什么是 RRF？\n回答：")


# --------------------------------------------------------------------------- openai generator (fake server)
def test_openai_generator_chat_request_and_answer(fake):
    fake.reply = "RRF sums reciprocal ranks [1]."
    gen = OpenAIGenerator(fake.base_url, "m", max_tokens=50)
    answer = gen.generate("What is RRF?", _evidence(3))
    assert answer.text == "RRF sums reciprocal ranks [1]." and not answer.refused and answer.generator == "openai"
    path, body = fake.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "m" and body["max_tokens"] == 50
    assert body["temperature"] == 0.0 and body["messages"][1]["content"].endswith("Question: What is RRF?")


def test_openai_generator_completions_api_sends_a_prompt_and_stop_strings(fake):
    fake.reply = " Not found in the sources."
    answer = OpenAIGenerator(fake.base_url, api="completions").generate("Who?", _evidence(1))
    assert answer.refused
    path, body = fake.requests[0]
    assert path == "/v1/completions" and body["prompt"].endswith("Answer: ") and "\nQuestion:" in body["stop"]
    assert "model" not in body


def test_openai_generator_sends_the_key_from_the_named_variable(fake, monkeypatch):
    seen = {}
    monkeypatch.setenv("RAG_TEST_KEY", "sekret")
    import httpx

    real = httpx.Client.post

    def spy(self, url, **kw):
        seen.update(kw["headers"])
        return real(self, url, **kw)

    monkeypatch.setattr(httpx.Client, "post", spy)
    OpenAIGenerator(fake.base_url, api_key_env="RAG_TEST_KEY").generate("q?", _evidence(1))
    assert seen["Authorization"] == "Bearer sekret"


def test_openai_generator_retries_a_500_then_fails_naming_the_url(fake):
    fake.status = 500
    with pytest.raises(WorkFailed, match=re.escape(fake.base_url + "/chat/completions") + ".*3 times.*HTTP 500"):
        OpenAIGenerator(fake.base_url, max_retries=2, backoff=0.01).generate("q?", _evidence(1))
    assert len(fake.requests) == 3


def test_openai_generator_does_not_retry_a_400(fake):
    fake.status = 400
    with pytest.raises(WorkFailed, match="refused the request: HTTP 400"):
        OpenAIGenerator(fake.base_url, max_retries=2, backoff=0.01).generate("q?", _evidence(1))
    assert len(fake.requests) == 1


def test_openai_generator_times_out(fake):
    fake.delay = 1.0
    with pytest.raises(WorkFailed, match=r"failed 2 times: no answer within 0.2 s"):
        OpenAIGenerator(fake.base_url, timeout=0.2, max_retries=1, backoff=0.01).generate("q?", _evidence(1))
    assert len(fake.requests) == 2


def test_openai_generator_server_down():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(WorkFailed, match=re.escape(url + "/chat/completions") + ".*cannot connect"):
        OpenAIGenerator(url, max_retries=1, backoff=0.01).generate("q?", _evidence(1))


# --------------------------------------------------------------------------- the CLI, end to end on a tiny project
@pytest.fixture(scope="module")
def nasty_project(tmp_path_factory, tiny_bi_encoder) -> Project:
    """Three documents, one full of markup, escape sequences, controls and bracketed numbers."""
    docs = tmp_path_factory.mktemp("docs")
    (docs / "fusion.md").write_text("# Fusion\n\n" + NASTY + "\n", encoding="utf-8")
    (docs / "bm25.md").write_text("# BM25\n\nBM25 ranks documents by term frequency and inverse document "
                                  "frequency [2]. The b parameter controls length normalisation.\n", encoding="utf-8")
    (docs / "hnsw.md").write_text("# HNSW\n\nHNSW is a graph index for approximate nearest neighbour search. "
                                  "The ef parameter sets the size of the candidate list.\n", encoding="utf-8")
    root = tmp_path_factory.mktemp("nasty") / "p.rag"
    for step in (["chunk", docs, "--unit", "chars", "--size", 400, "--overlap", 40, "--model", tiny_bi_encoder],
                 ["embed"], ["index"]):
        res = rag(*step, "-q", "-p", root)
        assert res.exit_code == 0, res.output
    p = Project.open(root)
    return p


def rag(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})  # table cells unwrapped


def _assert_plain(out: str):
    for bad in ("\x1b", "\x07", "\r", "\x9b"):
        assert bad not in out, repr(bad)


@pytest.mark.e2e
def test_search_table_prints_document_markup_literally(nasty_project):
    res = rag("search", "Ranking fusion red bell", "-k", "3", "--mode", "sparse", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "[/bold]" in out and "[link=http://x]fusion[/link]" in out and "red a b bell" in out  # the loader made the CR a line break
    _assert_plain(res.stdout)


@pytest.mark.e2e
def test_rerank_table_prints_document_markup_literally(nasty_project, tiny_cross_encoder, tmp_path):
    import shutil

    root = shutil.copytree(nasty_project.root, tmp_path / "p.rag")  # rag rerank remembers model.reranker
    res = rag("rerank", "Ranking fusion red bell", "--model", tiny_cross_encoder, "--mode", "sparse", "-k", "3",
              "-p", root)
    assert res.exit_code == 0, res.output
    assert "[/bold]" in res.stdout
    _assert_plain(res.stdout)


ANSWERABLE = ["--mode", "sparse", "--min-score", "-1", "--min-coverage", "0"]


@pytest.mark.e2e
def test_extractive_ask_neutralises_document_brackets_and_prints_plain(nasty_project):
    res = rag("ask", "Ranking fusion red bell", *ANSWERABLE, "-k", "1", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "(3) and (9)" in out["answer"] and out["answer"].endswith("[1]")  # quoted, with its own citation only
    assert all(st["citations"] == [1] and not st["uncited"] for st in out["statements"])
    assert out["n_citations_removed"] == 0 and out["citations"] == ["fusion.md#0"]
    assert out["sources"] == [{"n": 1, "chunk_id": "fusion.md#0", "doc_id": "fusion.md", "title": "Fusion",
                               "score": out["evidence"][0]["score"]}]
    assert set(out["timings"]) == {"retrieve_ms", "generate_ms", "total_ms"}
    text = rag("ask", "Ranking fusion red bell", *ANSWERABLE, "-k", "1", "-p", nasty_project.root)
    assert text.exit_code == 0, text.output
    assert "[link=http://x]" in text.stdout and "Fusion" in text.stdout
    _assert_plain(text.stdout)


@pytest.mark.e2e
def test_openai_ask_checks_citations_and_reports_json(nasty_project, fake):
    fake.reply = "BM25 ranks by term frequency [1]. HNSW is a graph [9]. Unsupported claim."
    res = rag("ask", "How does BM25 rank documents?", *ANSWERABLE, "-k", "2", "--generator", "openai",
              "--base-url", fake.base_url, "--llm-model", "fake", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["generator"] == "openai" and not out["refused"]
    assert out["answer"] == "BM25 ranks by term frequency [1]. HNSW is a graph. Unsupported claim."
    assert out["n_citations_removed"] == 1
    assert out["statements"] == [
        {"text": "BM25 ranks by term frequency [1].", "citations": [1], "uncited": False},
        {"text": "HNSW is a graph.", "citations": [], "uncited": True},
        {"text": "Unsupported claim.", "citations": [], "uncited": True}]
    assert out["citations"] == [out["evidence"][0]["chunk_id"]] and [s["n"] for s in out["sources"]] == [1]
    prompt = fake.requests[0][1]["messages"][1]["content"]
    assert "[2]" not in prompt.split("Title:")[0] and "frequency (2)" in prompt  # the document's own [2] neutralised
    # the rag.toml keeps its generator settings: nothing was written by ask
    assert "openai" not in nasty_project.config_path.read_text()


@pytest.mark.e2e
def test_openai_ask_refusal_uses_the_question_language(nasty_project, fake):
    fake.reply = "资料中未提及。"
    res = rag("ask", "谁发明了 BM25？", *ANSWERABLE, "--generator", "openai", "--base-url", fake.base_url,
              "--json", "-p", nasty_project.root)
    out = json.loads(res.stdout)
    assert out["refused"] and out["answer"] == "资料中未提及。" and out["statements"] == [] and out["sources"] == []


@pytest.mark.e2e
def test_openai_ask_exits_1_naming_the_url_when_down_failing_or_slow(nasty_project, fake):
    down = f"http://127.0.0.1:{free_port()}/v1"
    res = rag("ask", "BM25?", *ANSWERABLE, "--generator", "openai", "--base-url", down, "--max-retries", "0",
              "-p", nasty_project.root)
    assert res.exit_code == 1 and down + "/chat/completions" in " ".join(res.stderr.split())
    fake.status = 500
    res = rag("ask", "BM25?", *ANSWERABLE, "--generator", "openai", "--base-url", fake.base_url, "--max-retries", "1",
              "-p", nasty_project.root)
    assert res.exit_code == 1 and "HTTP 500" in res.stderr and len(fake.requests) == 2
    fake.status, fake.delay = 200, 1.0
    res = rag("ask", "BM25?", *ANSWERABLE, "--generator", "openai", "--base-url", fake.base_url, "--max-retries", "0",
              "--timeout", "0.2", "-p", nasty_project.root)
    assert res.exit_code == 1 and "no answer within 0.2 s" in res.stderr


def test_generator_flags_are_checked(nasty_project):
    res = rag("ask", "BM25?", "--generator", "gpt", "-p", nasty_project.root)
    assert res.exit_code == 2 and "ask.generator" in res.stderr
    res = rag("ask", "BM25?", "--generator", "openai", "--api", "rest", "-p", nasty_project.root)
    assert res.exit_code == 2 and "--api" in res.stderr and "chat, completions" in res.stderr


def test_rerank_evidence_keeps_the_best_k_by_the_reranker_and_renumbers():
    from rag_cli.stages.ask import rerank_evidence

    ev = [Evidence(i + 1, f"d#{i}", "d", f"text {i}", 0.9 - i / 100, title_path=["T"]) for i in range(4)]
    seen = []

    def reranker(q, texts):
        seen.append((q, texts))
        return [0.1, 2.0, -1.0, 2.0]  # ties keep the retrieval order

    out = rerank_evidence("q?", ev, reranker, 3)
    assert seen[0][0] == "q?" and len(seen[0][1]) == 4 and seen[0][1][1].startswith("T") and \
        seen[0][1][1].endswith("text 1")  # the heading path and the chunk text, as rag rerank scores them
    assert [(e.number, e.chunk_id, e.rerank_score) for e in out] == [(1, "d#1", 2.0), (2, "d#3", 2.0), (3, "d#0", 0.1)]
    assert [e.score for e in out] == [0.89, 0.87, 0.9]  # the cosines travel with their chunks


@pytest.mark.e2e
def test_ask_reranks_its_evidence_with_the_configured_cross_encoder(tmp_path, nasty_project, tiny_cross_encoder):
    import shutil

    root = tmp_path / "p.rag"
    shutil.copytree(nasty_project.root, root)
    question = "What does the ef parameter of HNSW set?"
    # rag rerank remembers model.reranker; its scores are those ask must order by
    rr = rag("rerank", question, "--model", tiny_cross_encoder, "--mode", "sparse", "-k", "3", "--json", "-p", root)
    assert rr.exit_code == 0, rr.output
    expected = [(h["chunk_id"], h["score"]) for h in json.loads(rr.stdout)["results"]]
    assert "reranker" in (root / "rag.toml").read_text()
    res = rag("ask", question, *ANSWERABLE, "-k", "2", "--json", "-p", root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    got = [(e["n"], e["chunk_id"], e["rerank_score"]) for e in out["evidence"]]
    assert [(n, c) for n, c, _ in got] == [(1, expected[0][0]), (2, expected[1][0])]
    assert [s for _, _, s in got] == pytest.approx([expected[0][1], expected[1][1]], abs=1e-5)
    assert set(out["timings"]) == {"retrieve_ms", "rerank_ms", "generate_ms", "total_ms"}
    plain_res = json.loads(rag("ask", question, *ANSWERABLE, "-k", "2", "--json", "-p", nasty_project.root).stdout)
    assert "rerank_ms" not in plain_res["timings"] and "rerank_score" not in plain_res["evidence"][0]


def test_parse_queries_strips_numbering_and_drops_repeats():
    from rag_cli.generate.rewrite import parse_queries, rewrite_prompt

    text = "1. BM25 ranking\n- BM25 ranking\n\n2) How does BM25 rank?\n（3）词频\n* inverse document frequency"
    assert parse_queries(text, "How does BM25 rank?", 3) == ["BM25 ranking", "词频", "inverse document frequency"]
    assert "3" in rewrite_prompt("multi-query", "How?", 3) and "问题：谁？" in rewrite_prompt("hyde", "谁？")


OPENAI = ["--generator", "openai", "--llm-model", "fake"]


@pytest.mark.e2e
def test_multi_query_rewrites_are_fused_with_the_question_by_rrf(nasty_project, fake):
    question = "What does ef set?"
    base = json.loads(rag("ask", question, *ANSWERABLE, "-k", "2", *OPENAI, "--base-url", fake.base_url,
                          "--json", "-p", nasty_project.root).stdout)
    assert [e["chunk_id"] for e in base["evidence"]] == ["hnsw.md#0"] and "rewrites" not in base
    fake.requests.clear()
    fake.replies = ["1. BM25 term frequency\n2. inverse document frequency\n3. " + question]
    fake.reply = "ef sets the candidate list [2]."
    res = rag("ask", question, *ANSWERABLE, "-k", "2", *OPENAI, "--base-url", fake.base_url, "--rewrite",
              "multi-query", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["rewrites"] == ["BM25 term frequency", "inverse document frequency"]
    # RRF (k=60): bm25.md first in both rewrites' lists (2/61), hnsw.md first in the question's (1/61)
    assert [e["chunk_id"] for e in out["evidence"]] == ["bm25.md#0", "hnsw.md#0"]
    assert out["answer"] == "ef sets the candidate list [2]." and out["citations"] == ["hnsw.md#0"]
    assert {"rewrite_ms", "retrieve_ms", "generate_ms", "total_ms"} == set(out["timings"])
    (_, first), (_, second) = fake.requests
    assert question in first["messages"][0]["content"] and "search queries" in first["messages"][0]["content"]
    assert "BM25 ranks documents" in second["messages"][1]["content"]  # the fused evidence is in the prompt


@pytest.mark.e2e
def test_hyde_passage_is_searched_and_the_question_kept(nasty_project, fake):
    question = "What does ef set?"
    fake.replies = ["BM25 scores documents by term frequency and inverse document frequency."]
    res = rag("ask", question, *ANSWERABLE, "-k", "2", *OPENAI, "--base-url", fake.base_url, "--rewrite", "hyde",
              "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["rewrites"] == ["BM25 scores documents by term frequency and inverse document frequency."]
    assert "Passage:" in fake.requests[0][1]["messages"][0]["content"]
    assert {e["chunk_id"] for e in out["evidence"]} == {"bm25.md#0", "hnsw.md#0"}
    # hybrid: the passage is embedded as a passage (the dense path) and still fused with the question
    fake.replies = ["HNSW ef candidate list."]
    res = rag("ask", question, "--mode", "hybrid", "--min-score", "-1", "--min-coverage", "0", *OPENAI,
              "--base-url", fake.base_url, "--rewrite", "hyde", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rewrites"] == ["HNSW ef candidate list."]


def test_rewrite_needs_an_llm_generator(nasty_project):
    res = rag("ask", "BM25?", "--rewrite", "hyde", "-p", nasty_project.root)
    assert res.exit_code == 2 and "--generator openai or llama-cpp" in res.stderr
    res = rag("ask", "BM25?", "--rewrite", "paraphrase", "-p", nasty_project.root)
    assert res.exit_code == 2 and "multi-query" in res.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("url", ["notaurl", "ftp://x/v1", "http:///v1"])
def test_ask_bad_base_url_is_bad_input_naming_the_flag(nasty_project, url):
    res = rag("ask", "BM25?", *ANSWERABLE, "--generator", "openai", "--base-url", url, "-p", nasty_project.root)
    assert res.exit_code == 2 and res.stdout == ""
    assert f"--base-url '{url}' (config generator.base_url): must be an http:// or https:// URL" in res.stderr


@pytest.mark.e2e
def test_ask_api_key_env_not_set_is_bad_input_naming_flag_and_variable(nasty_project, fake, monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    res = rag("ask", "BM25?", *ANSWERABLE, "--generator", "openai", "--base-url", fake.base_url,
              "--api-key-env", "NOPE_KEY", "-p", nasty_project.root)
    assert res.exit_code == 2 and res.stdout == "" and fake.requests == []
    assert "--api-key-env NOPE_KEY: the environment variable NOPE_KEY is not set" in " ".join(res.stderr.split())
    monkeypatch.setenv("NOPE_KEY", "sekret-value")
    res = rag("ask", "BM25?", *ANSWERABLE, "--generator", "openai", "--base-url", fake.base_url,
              "--api-key-env", "NOPE_KEY", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    assert "sekret-value" not in res.output


@pytest.mark.e2e
def test_ask_min_rerank_score_without_a_reranker_warns(nasty_project):
    res = rag("ask", "BM25?", *ANSWERABLE, "--min-rerank-score", "2", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    assert "--min-rerank-score 2 has no effect without a reranker" in " ".join(res.stderr.split())
    quiet = rag("ask", "BM25?", *ANSWERABLE, "-p", nasty_project.root)
    assert "reranker" not in quiet.stderr


@pytest.mark.e2e
def test_ask_min_rerank_score_in_rag_toml_without_a_reranker_warns(nasty_project, tmp_path):
    import shutil

    root = tmp_path / "copy.rag"
    shutil.copytree(nasty_project.root, root)
    toml = root / "rag.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace("min_rerank_score = 0.0", "min_rerank_score = 1.5"),
                    encoding="utf-8")
    res = rag("ask", "BM25?", *ANSWERABLE, "-p", root)
    assert res.exit_code == 0, res.output
    assert f"ask.min_rerank_score in {toml}: 1.5 has no effect without a reranker" in " ".join(res.stderr.split())
    off = rag("ask", "BM25?", *ANSWERABLE, "--min-rerank-score", "0", "-p", root)
    assert "reranker" not in off.stderr


# --------------------------------------------------------------------------- citations against what fit the prompt
def _long_evidence(n: int = 3) -> list[Evidence]:
    return [Evidence(i + 1, f"d{i}#0", f"d{i}", f"Source {i + 1} says something long. " * 12, 0.9 - i / 10)
            for i in range(n)]


def test_fit_budget_is_idempotent_so_the_generator_sees_what_ask_checked_against():
    ev = _long_evidence()
    kept, cut = fit_budget(ev, 64)
    assert [e.number for e in kept] == [1] and cut == 2
    assert estimate_tokens(source_block(kept[0])) + 1 <= 64  # the best one alone was cut to fit, header included
    again, cut_again = fit_budget(kept, 64)
    assert again == kept and cut_again == 0


@pytest.mark.parametrize("stream", [False, True])
def test_citations_of_evidence_left_out_of_the_prompt_are_removed_and_counted(fake, stream):
    from rag_cli.stages.ask import _generate

    fake.reply = "First [1]. Second [2]. Third [3]."
    gen = OpenAIGenerator(fake.base_url, context_tokens=64)
    pieces = []
    answer, shown = _generate(gen, "What do the sources say?", _long_evidence(), pieces.append if stream else None)
    assert [e.number for e in shown] == [1]
    assert answer.text == "First [1]. Second. Third." and answer.citations == ["d0#0"]
    assert answer.n_citations_removed == 2 and answer.n_evidence_cut == 2
    if stream:
        assert "".join(pieces) == answer.text
    prompt = fake.requests[0][1]["messages"][1]["content"]
    assert "[1] Title" in prompt and "[2] Title" not in prompt and "[3] Title" not in prompt


@pytest.mark.e2e
def test_ask_json_names_the_evidence_left_out_of_the_prompt(nasty_project, fake):
    fake.reply = "One [1]. Two [2]. Three [3]."
    res = rag("ask", "How does BM25 rank documents?", *ANSWERABLE, "-k", "3", "--generator", "openai",
              "--base-url", fake.base_url, "--context-tokens", "64", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    n = len(out["evidence"])
    shown = n - len(out["left_out"])
    assert n >= 2 and out["n_evidence_cut"] == len(out["left_out"]) and shown >= 1
    assert [x["n"] for x in out["left_out"]] == list(range(shown + 1, n + 1))
    assert out["n_citations_removed"] == 3 - shown  # the markers naming left-out or absent evidence
    assert [s["n"] for s in out["sources"]] == list(range(1, shown + 1))


# --------------------------------------------------------------------------- the prompt template (ask.prompt, --prompt FILE)
TEMPLATE = """You answer in $language from numbered sources only. $instructions
---
Sources:
$sources

Q: $question
If unsure say: $refusal
A:"""


def test_the_built_in_prompt_names_the_language_of_the_question():
    assert "Answer in English." in chat_messages("What is RRF?", _evidence(1))[0]["content"]
    assert "用中文回答。" in chat_messages("什么是 RRF？", _evidence(1))[0]["content"]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_prompt_template_reaches_the_server_for_chat_and_completions(fake, tmp_path, api):
    from rag_cli.generate.prompt import PromptTemplate

    path = tmp_path / "prompt.txt"
    path.write_text(TEMPLATE, encoding="utf-8")
    fake.reply = "RRF sums reciprocal ranks [1]."
    gen = OpenAIGenerator(fake.base_url, api=api, template=PromptTemplate.load(str(path)))
    answer = gen.generate("什么是 RRF？", _evidence(2))
    assert answer.text == "RRF sums reciprocal ranks [1]."
    body = fake.requests[0][1]
    if api == "chat":
        system, user = body["messages"]
        assert system["role"] == "system" and system["content"].startswith("You answer in Chinese (中文) from")
        assert "资料中未提及。" in system["content"] and "[n]" in system["content"]
        assert user["content"].startswith("Sources:\n[1] Title: Doc 1") and "Q: 什么是 RRF？" in user["content"]
        assert user["content"].endswith("If unsure say: 资料中未提及。\nA:")
    else:
        prompt = body["prompt"]
        assert prompt.startswith("You answer in Chinese (中文)") and "\n\nSources:\n[1] Title: Doc 1" in prompt
        assert prompt.endswith("\nA:") and body["stop"]


def test_a_bad_prompt_template_is_bad_input_naming_the_file(tmp_path):
    from rag_cli.errors import BadInput
    from rag_cli.generate.prompt import PromptTemplate

    bad = tmp_path / "bad.txt"
    bad.write_text("Sources: $sources Q: $question $context", encoding="utf-8")
    with pytest.raises(BadInput, match=r"bad.txt.*\$context"):
        PromptTemplate.load(str(bad))
    with pytest.raises(BadInput, match="cannot read"):
        PromptTemplate.load(str(tmp_path / "missing.txt"))
    assert PromptTemplate("Cost: $$5. $question").completion("Why?", []) == "Cost: $5. Why?"


@pytest.mark.e2e
def test_ask_prompt_flag_sends_the_template(nasty_project, fake, tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("SRC\n$sources\nQUESTION $question\nANSWER:", encoding="utf-8")
    fake.reply = "BM25 ranks by term frequency [1]."
    res = rag("ask", "How does BM25 rank documents?", *ANSWERABLE, "--generator", "openai", "--base-url",
              fake.base_url, "--prompt", path, "--api", "completions", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    assert fake.requests[0][1]["prompt"].startswith("SRC\n[1] Title:")
    assert json.loads(res.stdout)["answer"] == "BM25 ranks by term frequency [1]."
    res = rag("ask", "How?", *ANSWERABLE, "--generator", "openai", "--base-url", fake.base_url, "--prompt",
              tmp_path / "none.txt", "-p", nasty_project.root)
    assert res.exit_code == 2 and "--prompt" in res.stderr


def test_ask_result_to_dict_is_the_json_of_rag_ask():
    from rag_cli.json_shapes import ask_json, json_safe
    from rag_cli.stages.ask import AskResult

    ev = [Evidence(number=1, chunk_id="a#0", doc_id="a.md", text="b controls length normalisation.", score=0.91),
          Evidence(number=2, chunk_id="b#0", doc_id="b.md", text="k1 controls saturation.", score=0.85)]
    answer = Answer(text="length normalisation [1]", citations=["a#0"], refused=False, generator="extractive",
                    support="b controls length normalisation. [1]")
    res = AskResult("What does b control?", answer, ev, 0.91, 0.8, 12.5, left_out=[ev[1]], n_queries_truncated=1)
    d = res.to_dict()
    assert d == ask_json(res) and json_safe(res) == d  # one shape: the CLI's, serve's and Python's
    assert d["answer"] == "length normalisation [1]" and d["support"] == "b controls length normalisation. [1]"
    assert [s["n"] for s in d["sources"]] == [1] and d["left_out"] == [{"n": 2, "chunk_id": "b#0", "doc_id": "b.md"}]
    assert d["n_queries_truncated"] == 1 and json.loads(json.dumps(d)) == d
    refused = AskResult("What is mercury?", Answer(text="Not found in the sources.", citations=[], refused=True,
                                                   generator="extractive"), ev, 0.7, 0.1, 3.0, reason="low cosine")
    r = refused.to_dict()
    assert r["refused"] and r["sources"] == [] and "support" not in r and r["reason"] == "low cosine"
