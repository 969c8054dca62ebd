"""`rag ask --stream` (markers held until checked, plain text, the same
answer as without streaming) and `--grade llm` (the CRAG-style evidence
check), against the fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_cli.errors import WorkFailed
from rag_cli.generate.citations import CitationStream, check
from rag_cli.generate.grade import REASON, grade_prompt, parse_grade
from rag_cli.generate.openai_server import OpenAIGenerator
from rag_cli.safe_text import PlainStream, plain
from test_answers import ANSWERABLE, _evidence, fake, nasty_project, rag  # noqa: F401 (fixtures)


def streamed(pieces, numbers) -> tuple[str, CitationStream, list[str]]:
    """What `rag ask` emits for raw model `pieces`: plain, then checked; (text, checker, emitted pieces)."""
    out: list[str] = []
    checker = CitationStream(numbers, out.append)
    sanitiser = PlainStream(checker.feed)
    for piece in pieces:
        sanitiser.feed(piece)
    sanitiser.close()
    checker.close()
    return "".join(out), checker, out


def unstreamed(raw, numbers):
    """What the answer is without streaming: the generator strips, `rag ask` makes it plain, then checks."""
    return check(plain(raw.strip()), numbers)


OUTPUTS = [
    " BM25 ranks [1] by term frequency [12]. Graphs [9] [2, 9]. See [1,2]. ",
    "中文答案【1】。另一句【7】。再一句［2］。",
    "Odd [x] and [ 1 ] and [[2]] and [1, and [3 ] end [9]",
    "Escapes \x1b[31mred\x1b[0m [1]\x07 link \x1b]8;;http://x\x07t\x1b]8;;\x1b\\ done [9].",
    "[9] starts removed, a [9] [8] b, c [9]\n[1]",
    "Sources:\n[9] Title one\n[8]  [7]\tTitle two\n  [9] indented\n[1] kept",
]


@pytest.mark.parametrize("raw", OUTPUTS)
def test_stream_equals_check_at_every_chunk_boundary(raw):
    numbers = {1, 2}
    want, cited, removed = unstreamed(raw, numbers)
    for i in range(len(raw) + 1):  # two chunks, split everywhere: "[1" "2]", "[" "12]", ...
        got, checker, _ = streamed([raw[:i], raw[i:]], numbers)
        assert got == want, (i, raw[:i], raw[i:])
        assert (checker.cited, checker.removed) == (cited, removed)
    assert streamed(list(raw), numbers)[0] == want  # one character at a time


def test_check_leaves_no_gap_where_a_marker_went():
    assert check(OUTPUTS[0].strip(), {1, 2}) == (
        "BM25 ranks [1] by term frequency. Graphs [2]. See [1][2].", [1, 2], 3)
    assert check("[9] a [9] [8] b [9]\n[1]", {1}) == ("a b\n[1]", [1], 4)
    # no stray space where a removed marker started the text or a line
    assert check("[3] Title", {1}) == ("Title", [], 1)
    assert check("Intro.\n[9] Title\n\n[9] [8] T\n  [9] indented", {1}) == (
        "Intro.\nTitle\n\nT\n  indented", [], 4)
    assert streamed(["Intro.\n[", "9] Title"], {1})[0] == "Intro.\nTitle"


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(["[1]", "[9]", "[1, 9]", "[", "]", "1", "9", ",", " ", "  ", "\t", "\n", ".",
                                 "。", "a", "【2】", "［9］", "\x1b", "[31m", "\x07", "\x9b", "\\", "\r"]), max_size=30),
       st.lists(st.integers(0, 80), max_size=8))
def test_stream_equals_check_for_any_text_and_split(tokens, cuts):
    raw = "".join(tokens)
    cuts = sorted({c for c in cuts if c <= len(raw)})
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    got, checker, _ = streamed(pieces, {1, 2})
    assert got == unstreamed(raw, {1, 2})[0]
    parts: list[str] = []
    s = PlainStream(parts.append)
    for piece in pieces:
        s.feed(piece)
    s.close()
    assert "".join(parts) == plain(raw)


def test_a_marker_is_held_until_it_closes():
    _, _, out = streamed(["Ranks [", "1", "] well [1", "2", "]. Done"], {1, 2})
    assert out == ["Ranks", " [1] well", ". Done"]  # one piece a feed; "[1" "2]" never shown (12 is no source)


# --------------------------------------------------------------------------- the openai generator, streaming
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_openai_generator_streams_server_sent_events(fake, api):
    fake.chunks = [" BM25 ranks [", "1", "] by tf [1", "2]."]
    pieces: list[str] = []
    answer = OpenAIGenerator(fake.base_url, api=api).generate("How?", _evidence(2), on_token=pieces.append)
    assert pieces == fake.chunks and answer.text == "BM25 ranks [1] by tf [12]." and not answer.refused
    path, body = fake.requests[0]
    assert body["stream"] is True and path.endswith("/chat/completions" if api == "chat" else "/completions")


def test_openai_stream_retries_only_before_the_first_token(fake):
    fake.status = 503
    with pytest.raises(WorkFailed, match=r"failed 3 times: HTTP 503"):
        OpenAIGenerator(fake.base_url, max_retries=2, backoff=0.01).generate("q?", _evidence(1), on_token=print)
    assert len(fake.requests) == 3
    fake.status, fake.requests = 400, []
    with pytest.raises(WorkFailed, match="refused the request: HTTP 400"):
        OpenAIGenerator(fake.base_url, max_retries=2, backoff=0.01).generate("q?", _evidence(1), on_token=print)
    assert len(fake.requests) == 1
    # silent after the first token: a read timeout, and no retry (the text was already passed on)
    fake.status, fake.requests, fake.stall_after, fake.stall = 200, [], 1, 1.0
    fake.chunks = ["first ", "second"]
    got: list[str] = []
    with pytest.raises(WorkFailed, match=r"stopped after 6 characters of its answer: no answer within 0.3 s"):
        OpenAIGenerator(fake.base_url, timeout=0.3, max_retries=2, backoff=0.01).generate(
            "q?", _evidence(1), on_token=got.append)
    assert got == ["first "] and len(fake.requests) == 1


def test_openai_stream_before_the_first_token_times_out_and_retries(fake):
    fake.stall_after, fake.stall = 0, 1.0
    with pytest.raises(WorkFailed, match=r"failed 2 times: no answer within 0.3 s"):
        OpenAIGenerator(fake.base_url, timeout=0.3, max_retries=1, backoff=0.01).generate(
            "q?", _evidence(1), on_token=print)
    assert len(fake.requests) == 2


# --------------------------------------------------------------------------- rag ask --stream
OPENAI = ["--generator", "openai", "--llm-model", "fake"]
QUESTION = "How does BM25 rank documents?"


@pytest.mark.e2e
def test_ask_stream_prints_what_the_unstreamed_ask_prints(nasty_project, fake):
    fake.chunks = ["BM25 ranks by term [", "1", "] frequency [1", "2]. Markup \x1b[3", "1m[/bold] [", "9, 2]."]
    fake.reply = "".join(fake.chunks)
    args = ["ask", QUESTION, *ANSWERABLE, "-k", "2", *OPENAI, "--base-url", fake.base_url, "-p", nasty_project.root]
    res = rag(*args, "--stream")
    assert res.exit_code == 0, res.output
    assert fake.requests[-1][1]["stream"] is True
    plain_res = rag(*args)
    assert plain_res.exit_code == 0, plain_res.output
    assert "stream" not in fake.requests[-1][1]
    assert res.stdout == plain_res.stdout
    assert res.stdout.startswith(f"Q: {QUESTION}\nA: BM25 ranks by term [1] frequency. Markup [/bold] [2].\n"
                                 "Sources:\n  [1] ")
    assert "\x1b" not in res.stdout
    assert "2 citation(s) of numbers that were not among the sources were removed" in " ".join(res.stderr.split())


@pytest.mark.e2e
def test_project_ask_on_text_gets_the_answer_as_it_is_written(nasty_project, fake):
    fake.chunks = ["BM25 ", "ranks [", "1", "] by tf [", "9", "]."]
    pieces: list[str] = []
    res = nasty_project.ask(QUESTION, mode="sparse", min_score=-1, min_coverage=0, k=2, generator="openai",
                            llm={"base_url": fake.base_url}, on_text=pieces.append)
    assert pieces == ["BM25", " ranks", " [1] by tf", "."]
    assert "".join(pieces) == res.answer.text == "BM25 ranks [1] by tf." and res.answer.n_citations_removed == 1


@pytest.mark.e2e
def test_ask_stream_refusal_by_the_gate_prints_at_once_without_a_generator_call(nasty_project, fake):
    res = rag("ask", QUESTION, "--mode", "sparse", "--min-score", "0.999", *OPENAI, "--base-url", fake.base_url,
              "--stream", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"Q: {QUESTION}\nA: Not found in the sources.\n(best evidence cosine")
    assert fake.requests == []


@pytest.mark.e2e
def test_ask_stream_with_the_extractive_generator_prints_the_answer(nasty_project):
    args = ["ask", "Ranking fusion red bell", *ANSWERABLE, "-k", "1", "-p", nasty_project.root]
    res, plain_res = rag(*args, "--stream"), rag(*args)
    assert res.exit_code == 0 and res.stdout == plain_res.stdout and "(3) and (9)" in res.stdout


def test_ask_stream_refuses_json_and_queries(nasty_project, tmp_path):
    res = rag("ask", "BM25?", "--stream", "--json", "-p", nasty_project.root)
    assert res.exit_code == 2 and "--stream" in res.stderr and "--json" in res.stderr
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "1", "text": "BM25?"}\n', encoding="utf-8")
    res = rag("ask", "--queries", queries, "--stream", "-p", nasty_project.root)
    assert res.exit_code == 2 and "--stream" in res.stderr and "--queries" in res.stderr


# --------------------------------------------------------------------------- --grade llm
def test_parse_grade_and_prompt():
    assert [parse_grade(t) for t in ("Yes", " yes.", "**No**", "Not found", "是的", "否", "没有", "maybe", "",
                                     "Nobody")] == ["yes", "yes", "no", "no", "yes", "no", "no", "unclear",
                                                    "unclear", "unclear"]
    prompt = grade_prompt("What is RRF?", _evidence(3))
    assert prompt.index("[1] Title") < prompt.index("[3] Title") < prompt.index("[2] Title")
    assert prompt.endswith("Question: What is RRF?\nDo the sources contain the answer to the question? Answer:")


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_grade_no_refuses_before_answering(nasty_project, fake, api):
    fake.replies = [" No"]
    res = rag("ask", QUESTION, *ANSWERABLE, "-k", "2", *OPENAI, "--api", api, "--base-url", fake.base_url,
              "--grade", "llm", "--json", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["refused"] and out["reason"] == REASON and out["grade"] == "no"
    assert out["answer"] == "Not found in the sources." and set(out["timings"]) == {
        "retrieve_ms", "grade_ms", "generate_ms", "total_ms"}
    assert len(fake.requests) == 1  # the grade only: no answer was asked for
    path, body = fake.requests[0]
    assert body["max_tokens"] == 3 and body["temperature"] == 0.0
    if api == "chat":
        assert path.endswith("/chat/completions") and body["messages"][0]["role"] == "user"
        assert body["messages"][0]["content"].endswith("the answer to the question? Answer:")
    else:
        assert path.endswith("/completions") and body["stop"] == ["\n"]
        assert body["prompt"].endswith("the answer to the question? Answer:") and "frequency (2)" in body["prompt"]


@pytest.mark.e2e
def test_grade_yes_answers_and_streams(nasty_project, fake):
    fake.replies = ["Yes"]
    fake.reply = "BM25 ranks by term frequency [1]."
    res = rag("ask", QUESTION, *ANSWERABLE, "-k", "2", *OPENAI, "--base-url", fake.base_url, "--grade", "llm",
              "--stream", "-p", nasty_project.root)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"Q: {QUESTION}\nA: BM25 ranks by term frequency [1].\nSources:")
    assert [("stream" in body) for _, body in fake.requests] == [False, True]


def test_grade_needs_an_llm_generator(nasty_project):
    res = rag("ask", "BM25?", "--grade", "llm", "-p", nasty_project.root)
    assert res.exit_code == 2 and "ask.grade" in res.stderr and "--generator openai" in res.stderr
    res = rag("ask", "BM25?", "--grade", "maybe", "-p", nasty_project.root)
    assert res.exit_code == 2 and "--grade" in res.stderr and "off, llm" in res.stderr


@pytest.mark.e2e
def test_ask_stream_failure_mid_answer_ends_the_partial_line_first(nasty_project, fake):
    fake.chunks, fake.stall_after, fake.stall = ["Hybrid search ", "and more"], 1, 1.0
    res = rag("ask", QUESTION, *ANSWERABLE, "-k", "2", *OPENAI, "--base-url", fake.base_url, "--timeout", "0.3",
              "--max-retries", "0", "--stream", "-p", nasty_project.root)
    assert res.exit_code == 1
    assert res.stdout == f"Q: {QUESTION}\nA: Hybrid search\n"
    assert "A: Hybrid search\nerror: " in res.output and "stopped after" in res.stderr


def test_ask_stream_interrupt_mid_answer_ends_the_line_and_says_interrupted(nasty_project, monkeypatch):
    from rag_cli.project import Project

    def ask(self, question, on_text=None, **opts):
        on_text("Hybrid search and")
        raise KeyboardInterrupt

    monkeypatch.setattr(Project, "ask", ask)
    res = rag("ask", QUESTION, "--stream", "-p", nasty_project.root)
    assert res.exit_code == 130
    assert res.stdout == f"Q: {QUESTION}\nA: Hybrid search and\n" and res.stderr == "interrupted\n"


@pytest.mark.parametrize("stream", [False, True])
def test_openai_generator_remembers_the_model_the_server_reported(fake, stream):
    from rag_cli.generate.factory import describe_generator

    fake.model = "served-model"
    gen = OpenAIGenerator(fake.base_url)
    assert describe_generator(gen)["model"] == "(the server's)" and gen.server_model is None
    gen.generate("q?", _evidence(1), on_token=(lambda piece: None) if stream else None)
    assert gen.server_model == "served-model" and describe_generator(gen)["model"] == "served-model"
    fake.model = "another"
    gen.generate("q?", _evidence(1))
    assert gen.server_model == "served-model"  # the first answer's
    named = OpenAIGenerator(fake.base_url, model="asked-for")
    named.complete("hi", 5)
    assert describe_generator(named)["model"] == "asked-for" and named.server_model == "asked-for"
