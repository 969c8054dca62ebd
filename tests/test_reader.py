"""The reader stage (model.reader, --reader DIR): an extractive QA graph that
the test builds with `onnx` (tests/tiny_models.make_qa_reader), whose spans
and no-answer decisions are known: start/end logits come from per-word tables,
the [CLS] token scores the no-answer."""

from __future__ import annotations

import json

import pytest

from rag_cli.generate.base import Evidence
from rag_cli.generate.gate import GateSignals, gate_reason
from rag_cli.config import AskConfig
from rag_cli.models.reader import Reader
from rag_cli.stages.ask import read_evidence, reader_answer
from tiny_models import make_qa_reader

START = {"paris": 5.0, "capital": 3.0, "巴": 6.0, "berlin": 1.0}
END = {"paris": 5.0, "city": 4.0, "黎": 6.0, "berlin": 1.0}


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory):
    return make_qa_reader(tmp_path_factory.mktemp("qa"), START, END, null=(2.0, 2.0), max_length=16)


@pytest.fixture(scope="module")
def reader(reader_dir):
    return Reader(reader_dir, stride=4)


def test_the_best_span_per_passage_with_its_score_and_the_no_answer_score(reader):
    spans = reader.read("what is the capital of france ?",
                        ["the capital of france is paris .", "the dog sat on the mat ."])
    assert (spans[0].text, spans[0].score, spans[0].null_score, spans[0].no_answer) == ("paris", 10.0, 4.0, False)
    assert spans[1].score == 0.0 and spans[1].null_score == 4.0 and spans[1].no_answer  # no-answer wins
    passage = "the capital of france is paris ."
    assert passage[spans[0].start:spans[0].end] == "paris"


def test_a_span_of_several_tokens_and_the_longest_span_allowed(reader_dir):
    spans = Reader(reader_dir, max_answer_tokens=3).read("which city ?", ["the capital city is big ."])
    assert spans[0].text == "capital city" and spans[0].score == 7.0
    spans = Reader(reader_dir, max_answer_tokens=1).read("which city ?", ["the capital city is big ."])
    assert spans[0].score == 4.0  # "capital" .. "city" is two tokens: one token at most leaves "city" (0 + 4)


def test_long_passages_are_read_in_overlapping_windows(reader):
    passage = "the cat sat on the mat . " * 6 + "its capital is paris ."
    assert len(passage.split()) > 16  # longer than one window
    span = reader.read("what is the capital ?", [passage])[0]
    assert span.text == "paris" and passage[span.start:span.end] == "paris"
    early = "paris is here . " + "the cat sat on the mat . " * 6
    assert reader.read("what is the capital ?", [early])[0].text == "paris"


def test_chinese_spans_map_back_through_the_offsets(reader):
    span = reader.read("法国的首都是什么？", ["法国的首都是巴黎。"])[0]
    assert span.text == "巴黎" and span.score == 12.0


def test_a_graph_without_token_type_ids_reads_too(tmp_path):
    folder = make_qa_reader(tmp_path / "qa", START, END, with_token_type_ids=False)
    assert Reader(folder).read("what is the capital ?", ["paris is the capital ."])[0].text == "paris"


def test_not_a_qa_graph_is_bad_input(tmp_path, tiny_cross_encoder):
    from rag_cli.errors import BadInput
    from rag_cli.models.reader import load_reader

    with pytest.raises(BadInput, match="start_logits"):
        Reader(tiny_cross_encoder)
    with pytest.raises(BadInput, match="--reader"):
        load_reader(str(tmp_path / "none"))


def _ev(n, text):
    return Evidence(n, f"d{n}#0", f"d{n}", text, 0.9)


def test_the_reader_answers_with_its_best_span_cited_or_the_gate_refuses(reader):
    question = "what is the capital of france ?"
    evidence = [_ev(1, "the dog sat on the mat ."), _ev(2, "the capital of france is paris . the cat ran .")]
    spans, null = read_evidence(reader, question, evidence)
    assert null == 4.0 - 10.0
    answer = reader_answer(spans, evidence, evidence)
    assert answer.text == "paris [2]" and answer.citations == ["d2#0"] and answer.generator == "reader"
    assert answer.support == "the capital of france is paris . [2]"
    signals = GateSignals(2, 0.9, 1.0, 1.0, False, reader_null=null)
    assert gate_reason(signals, AskConfig()) == ""
    _, null = read_evidence(reader, question, evidence[:1])
    assert null == 4.0
    assert "no-answer" in gate_reason(GateSignals(1, 0.9, 1.0, 1.0, False, reader_null=null), AskConfig())


@pytest.mark.e2e
def test_rag_ask_reader_flag(tmp_path, tiny_bi_encoder, reader_dir):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "france.md").write_text("# France\n\nThe capital of France is Paris . The river is long .\n")
    (docs / "pets.md").write_text("# Pets\n\nThe dog sat on the mat . The cat ran fast .\n")
    root = tmp_path / "p.rag"
    run = lambda *a: CliRunner().invoke(app, [str(x) for x in a])  # noqa: E731
    for step in (["chunk", docs, "--unit", "chars", "--size", 200, "--overlap", 0, "--model", tiny_bi_encoder],
                 ["embed"], ["index"]):
        assert run(*step, "-q", "-p", root).exit_code == 0
    args = ["--mode", "sparse", "--min-score", "-1", "--min-coverage", "0", "--json", "-p", root]
    res = run("ask", "what is the capital of france ?", "--reader", reader_dir, "-k", "2", *args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["answer"] == "Paris [1]" and out["generator"] == "reader" and out["support"].startswith("The capital")
    res = run("ask", "the dog sat on the mat", "--reader", reader_dir, "-k", "1", *args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["refused"] and "no-answer" in out["reason"]
