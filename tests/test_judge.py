"""`rag eval --answers --judge`: RAGAS faithfulness and answer relevancy with
a scripted judge (exact values, cosines against numpy, parsing of JSON and
numbered lines, unparseable outputs counted), and the CLI end to end through
the local fake OpenAI server."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from fake_openai import FakeOpenAI
from rag_cli.cli import app
from rag_cli.evaluate.judge import answer_relevancy, cosines, faithfulness, fit_context, judge_answers, \
    parse_question, parse_statements, parse_verdicts, strip_citations
from rag_cli.evaluate.markdown import to_markdown
from rag_cli.store.answers import write_answers


def scripted(replies: list[str]):
    """A `complete` returning `replies` in order; records the prompts."""
    prompts: list[str] = []

    def complete(prompt: str, max_tokens: int) -> str:
        prompts.append(prompt)
        return replies.pop(0)

    complete.prompts = prompts
    return complete


VECS = {"Where is the tower?": [1.0, 0.0, 0.0], "Where is it?": [0.6, 0.8, 0.0], "What is in Paris?": [0.0, 3.0, 4.0],
        "Why?": [-1.0, 0.0, 0.0]}


def encode(texts):
    return np.asarray([VECS[t] for t in texts], dtype=np.float32)


# --------------------------------------------------------------------------- parsing
def test_parse_statements_json_numbered_bullets_and_garbage():
    assert parse_statements('["A is B.", "C is D."]') == ["A is B.", "C is D."]
    assert parse_statements('```json\n{"statements": ["A is B."]}\n```') == ["A is B."]
    assert parse_statements("1. A is B.\n2) C is D.\n\nQuestion: next example") == ["A is B.", "C is D."]
    assert parse_statements("- A is B.\n* C is D.\nAnswer: x") == ["A is B.", "C is D."]
    assert parse_statements("I cannot do that.") is None and parse_statements("") is None
    assert parse_statements("[1] is a citation") is None  # not JSON at the start of a list of strings


def test_parse_verdicts_needs_one_per_statement():
    assert parse_verdicts("1. 1\n2. 0\n3. 1", 3) == [1, 0, 1]
    assert parse_verdicts('[{"statement": "a", "reason": "r", "verdict": 1}, {"verdict": 0}]', 2) == [1, 0]
    assert parse_verdicts('{"verdicts": [0, 1]}', 2) == [0, 1]
    assert parse_verdicts("1. yes\n2. No", 2) == [1, 0]
    assert parse_verdicts("1. The context says so. Verdict: 1\n2. Not there. Verdict: 0", 2) == [1, 0]
    assert parse_verdicts("1. 1\n2. 0", 3) is None  # one missing
    assert parse_verdicts("1. maybe\n2. 1", 2) is None
    assert parse_verdicts("nonsense", 1) is None


def test_parse_question_and_noncommittal():
    assert parse_question(" Where is it?\nNoncommittal: 1\n\nAnswer: next") == ("Where is it?", 1)
    assert parse_question("Question: Where is it?") == ("Where is it?", 0)  # no flag: substantive
    assert parse_question('{"question": "Where is it?", "noncommittal": 1}') == ("Where is it?", 1)
    assert parse_question("\n\n") is None and parse_question("") is None


def test_strip_citations_and_fit_context():
    assert strip_citations("Paris is big [1]. It has a tower [2, 3].") == "Paris is big. It has a tower."
    assert fit_context(["aaaa", "bbbb", "cccc"], 4) == "aaaa\nbbbb"  # 2 tokens each (1 + 1 separator)
    assert fit_context(["a" * 40], 5) == "a" * 18  # the best alone cut in proportion: 40 * 5 / (10 + 1)


# --------------------------------------------------------------------------- the metrics
def test_faithfulness_two_of_three_supported():
    complete = scripted(["1. The tower is in Paris.\n2. The tower is tall.\n3. The tower is red.", "1. 1\n2. 1\n3. 0"])
    r = faithfulness(complete, "Where is the tower?", "It is in Paris, tall and red.", "The tall tower is in Paris.")
    assert round(r["score"], 4) == 0.6667 and r["verdicts"] == [1, 1, 0] and r["error"] is None
    assert "Answer: It is in Paris, tall and red." in complete.prompts[0]
    assert "Context: The tall tower is in Paris." in complete.prompts[1]
    assert "3. The tower is red." in complete.prompts[1]


def test_faithfulness_unparseable_is_none_not_an_error():
    assert faithfulness(scripted(["no idea"]), "q", "a", "c")["error"] == "statements"
    r = faithfulness(scripted(["1. A.\n2. B.", "1. 1"]), "q", "a", "c")
    assert r["score"] is None and r["error"] == "verdicts" and r["statements"] == ["A.", "B."]


def test_cosines_match_numpy():
    rng = np.random.default_rng(0)
    q, g = rng.normal(size=8), rng.normal(size=(5, 8))
    want = np.array([np.dot(q, x) / (np.linalg.norm(q) * np.linalg.norm(x)) for x in g])
    np.testing.assert_allclose(cosines(q, g), want, rtol=1e-12)
    assert cosines(np.zeros(3), np.ones((2, 3))).tolist() == [0.0, 0.0]


def test_answer_relevancy_mean_cosine_and_noncommittal():
    # cos([1,0,0],[.6,.8,0]) = 0.6; cos([1,0,0],[0,3,4]) = 0; the third generation has no question
    complete = scripted(["Where is it?\nNoncommittal: 0", "What is in Paris?\nNoncommittal: 0", "\n"])
    r = answer_relevancy(complete, encode, "Where is the tower?", "It is in Paris.", 3)
    assert r["score"] == pytest.approx(0.3) and r["n_unparsed"] == 1
    assert r["questions"] == ["Where is it?", "What is in Paris?"] and "Answer: It is in Paris." in complete.prompts[0]
    all_nc = answer_relevancy(scripted(["Where is it?\nNoncommittal: 1"] * 2), encode, "Where is the tower?", "?", 2)
    assert all_nc["score"] == 0.0  # every generation noncommittal: 0 (ragas)
    one_nc = answer_relevancy(scripted(["Where is it?\nNoncommittal: 1", "Where is it?\nNoncommittal: 0"]), encode,
                              "Where is the tower?", "?", 2)
    assert one_nc["score"] == pytest.approx(0.6)
    assert answer_relevancy(scripted(["", ""]), encode, "Where is the tower?", "?", 2)["error"] == "questions"


ROWS = [
    {"query_id": "q1", "question": "Where is the tower?", "answer": "It is in Paris [1].", "citations": ["c1"],
     "contexts": ["c1", "c2"], "refused": False},
    {"query_id": "q2", "question": "Where is the tower?", "answer": "", "citations": [], "contexts": ["c2"],
     "refused": True},
    {"query_id": "q3", "question": "Where is the tower?", "answer": "Red and tall [2].", "citations": ["c2"],
     "contexts": ["c2", "gone"], "refused": False},
]
TEXTS = {"c1": "The tower is in Paris.", "c2": "The tower is tall."}
# per repeat: q1 (statements, verdicts, 1 question), then q3
REPEAT_1 = ["1. The tower is in Paris.", "1. 1", "Where is it?",
            "1. The tower is red.\n2. The tower is tall.", "1. 0\n2. 1", "What is in Paris?"]
REPEAT_2 = ["1. The tower is in Paris.", "1. 1", "Where is the tower?",
            "unparseable", "Where is it?"]


def test_judge_answers_repeats_mean_sd_and_counts():
    seen = []
    report = judge_answers(ROWS, TEXTS, [scripted(list(REPEAT_1)), scripted(list(REPEAT_2))], encode, n_questions=1,
                           progress=lambda task, done, total: seen.append((task, done, total)))
    f, r = report["metrics"]["faithfulness"], report["metrics"]["answer_relevancy"]
    assert f["repeats"] == [0.75, 1.0]  # (1 + 0.5) / 2; then q1 alone (q3's statements unparsed)
    assert f["mean"] == pytest.approx(0.875) and f["sd"] == pytest.approx(np.std([0.75, 1.0], ddof=1))
    assert r["repeats"] == pytest.approx([0.3, 0.8])  # (0.6 + 0) / 2; (1 + 0.6) / 2
    assert report["counts"] == {"n_questions": 3, "n_refused": 1, "n_judged": 2, "n_repeats": 2,
                                "unparsed": {"statements": [0, 1], "verdicts": [0, 0], "questions": [0, 0]},
                                "question_generations_unparsed": [0, 0], "noncommittal": [0, 0],
                                "missing_contexts": ["gone"]}
    assert report["per_query"]["q3"]["faithfulness"] == [0.5, None]
    assert report["per_query"]["q1"]["statements"] == ["The tower is in Paris."]
    assert "q2" not in report["per_query"]
    assert seen == [("judge 1/2", 1, 2), ("judge 1/2", 2, 2), ("judge 2/2", 1, 2), ("judge 2/2", 2, 2)]


# --------------------------------------------------------------------------- the CLI, through a fake server
@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.stop()


def _project(tmp_path, tiny_bi_encoder, with_context: bool = False):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "rag.toml").write_text(f'[model]\nembedder = "{tiny_bi_encoder}"\n')
    table = {"chunk_id": list(TEXTS), "doc_id": ["d1", "d2"], "text": list(TEXTS.values())}
    if with_context:
        table["context"] = ["Big context: the tower is in Paris.", None]
    pq.write_table(pa.table(table), proj / "chunks.parquet")
    (proj / "answers").mkdir()
    rows = [{**r, "generator": "extractive", "latency_ms": 1.0} for r in ROWS]
    write_answers(proj / "answers" / "a.parquet", rows)
    return proj


def test_cli_eval_judge_without_gold(tmp_path, tiny_bi_encoder, fake):
    proj = _project(tmp_path, tiny_bi_encoder, with_context=True)
    fake.replies = [*REPEAT_1[:3], "What is it?", "What is it?", *REPEAT_1[3:], "What is it?", "What is it?"]
    md = tmp_path / "judge.md"
    res = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "a.parquet"), "--judge",
                                   "--judge-generator", "openai", "--judge-base-url", fake.base_url,
                                   "--judge-model", "judge-1", "--judge-repeats", "1", "--judge-temperature", "0.5",
                                   "--md", str(md), "-p", str(proj), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    judge = report["judge"]
    assert set(report) == {"answers", "judge"}  # no gold: only the judge's metrics
    assert judge["model"]["generator"] == "openai" and judge["model"]["base_url"] == fake.base_url
    assert judge["model"]["model"] == "judge-1" and judge["model"]["seeds"] == [0]
    assert judge["metrics"]["faithfulness"]["repeats"] == [0.75] and judge["metrics"]["faithfulness"]["sd"] == 0.0
    assert 0 <= judge["metrics"]["answer_relevancy"]["mean"] <= 1
    assert judge["counts"]["n_judged"] == 2 and judge["counts"]["n_refused"] == 1
    bodies = [b for _, b in fake.requests]
    assert len(bodies) == 10 and all(b["temperature"] == 0.5 and b["seed"] == 0 and b["model"] == "judge-1"
                                     for b in bodies)
    verdict_prompt = bodies[1]["messages"][0]["content"]
    assert "Big context: the tower is in Paris.\nThe tower is tall." in verdict_prompt  # small-to-big: context
    assert "[1]" not in bodies[0]["messages"][0]["content"].split("Answer: ")[-1]  # markers stripped
    written = json.loads((proj / "eval" / "answers-a.json").read_text(encoding="utf-8"))
    assert written["judge"]["metrics"] == judge["metrics"]
    text = md.read_text(encoding="utf-8")
    assert "LLM judge" in text and "judge-1" in text and "| faithfulness | 0.7500 | 0.0000 | 0.7500 |" in text
    assert to_markdown(written) == text


def test_cli_eval_judge_with_gold_prints_both_tables_and_counts_unparsed(tmp_path, tiny_bi_encoder, fake):
    proj = _project(tmp_path, tiny_bi_encoder)
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"_id": "q1", "answers": ["Paris"]}\n', encoding="utf-8")
    fake.reply = "I will not"  # nothing parses as statements; every line is a "question"
    res = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "a.parquet"), "--gold",
                                   str(gold), "--judge", "--judge-generator", "openai", "--judge-base-url", fake.base_url,
                                   "--judge-api", "completions", "--judge-repeats", "2", "-p", str(proj)],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "has_answer" in res.stdout and "faithfulness" in res.stdout and "answer_relevancy" in res.stdout
    assert "could not be parsed" in res.output and "statements 4" in res.output
    report = json.loads((proj / "eval" / "answers-a.json").read_text(encoding="utf-8"))
    assert report["metrics"]["em"] is not None
    assert report["judge"]["metrics"]["faithfulness"] == {"mean": None, "sd": None, "repeats": [None, None]}
    assert [b.get("seed") for _, b in fake.requests][::4] == [0, 0, 1, 1]
    assert all(path.endswith("/completions") and "chat" not in path for path, _ in fake.requests)


def test_cli_eval_judge_bad_usage(tmp_path, tiny_bi_encoder):
    proj = _project(tmp_path, tiny_bi_encoder)
    answers = str(proj / "answers" / "a.parquet")
    extractive = CliRunner().invoke(app, ["eval", "answers", "--answers", answers, "--judge", "-p", str(proj)])
    assert extractive.exit_code == 2 and "--judge-generator openai or llama-cpp" in extractive.output
    reps = CliRunner().invoke(app, ["eval", "answers", "--answers", answers, "--judge", "--judge-generator", "openai",
                                    "--judge-repeats", "0", "-p", str(proj)])
    assert reps.exit_code == 2 and "--judge-repeats 0" in reps.output
    no_answers = CliRunner().invoke(app, ["eval", "answers", "--judge", "-p", str(proj)])
    assert no_answers.exit_code == 2 and "--answers FILE" in no_answers.output
    assert not (proj / "eval").exists()


def test_cli_eval_judge_errors_name_the_judge_flags(tmp_path, tiny_bi_encoder):
    proj = _project(tmp_path, tiny_bi_encoder)
    base = ["eval", "answers", "--answers", str(proj / "answers" / "a.parquet"), "--judge", "-p", str(proj)]
    gen = CliRunner().invoke(app, [*base, "--judge-generator", "foo"])
    assert gen.exit_code == 2
    assert "--judge-generator 'foo' (config ask.generator): must be one of" in gen.output
    api = CliRunner().invoke(app, [*base, "--judge-generator", "openai", "--judge-api", "soap"])
    assert api.exit_code == 2 and "--judge-api 'soap' (config generator.api)" in api.output
    model = CliRunner().invoke(app, [*base, "--judge-generator", "llama-cpp", "--judge-model", "/nope.gguf"])
    assert model.exit_code == 2 and "--judge-model /nope.gguf: no such GGUF file" in model.output
    assert "--llm-model" not in model.output and not (proj / "eval").exists()


def test_cli_eval_judge_names_the_model_the_server_reported(tmp_path, tiny_bi_encoder, fake):
    proj = _project(tmp_path, tiny_bi_encoder)
    fake.model = "served-model-7b"
    fake.replies = [*REPEAT_1[:3], "What is it?", "What is it?", *REPEAT_1[3:], "What is it?", "What is it?"]
    res = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "a.parquet"), "--judge",
                                   "--judge-generator", "openai", "--judge-base-url", fake.base_url,
                                   "--judge-repeats", "1", "-p", str(proj), "--json"])
    assert res.exit_code == 0, res.output
    model = json.loads(res.stdout)["judge"]["model"]
    assert model["model"] == "served-model-7b" and model["server_model"] == "served-model-7b"
    assert all("model" not in body for _, body in fake.requests)  # no name was sent
