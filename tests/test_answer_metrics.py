"""`rag eval --answers --gold`: SQuAD EM/F1 (character tokens for Chinese),
has-answer, citation precision/recall, refusals, latency, on a hand-made
answers file; the CLI end to end, and one real CMRC row."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.evaluate.answers import answer_metrics, answer_tokens, exact_match, f1_score, holds_answer, \
    normalize_answer
from rag_cli.evaluate.datasets import read_gold_answers
from rag_cli.store.answers import write_answers


def test_normalize_and_tokens_as_squad():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("「踢爆」。") == "踢爆"
    assert answer_tokens("gpt模型 v2") == ["gpt", "模", "型", "v2"]


def test_em_and_f1_by_hand():
    assert exact_match("Eiffel tower!", ["the Eiffel Tower"]) == 1.0
    assert exact_match("Eiffel", ["the Eiffel Tower"]) == 0.0
    # [cat, sat] vs [cat, sat, down]: P 1, R 2/3 -> F1 0.8
    assert f1_score("the cat sat", ["a cat sat down"]) == pytest.approx(0.8)
    # character level: 踢了 vs 踢爆 share one of two characters
    assert f1_score("踢了", ["踢爆"]) == pytest.approx(0.5)
    # the best gold answer counts; nothing shared -> 0
    assert f1_score("4分钟", ["四分钟", "4分钟"]) == 1.0
    assert f1_score("xyz", ["abc"]) == 0.0
    assert f1_score("", ["abc"]) == 0.0


def test_holds_answer_is_a_normalised_substring():
    assert holds_answer("The Eiffel Tower is in Paris.", ["eiffel tower"])
    assert holds_answer("他们踢爆了它", ["踢爆"])
    assert not holds_answer("他们踢了它", ["踢爆"])
    assert not holds_answer("anything", ["!!!"])  # an answer that normalises to nothing holds nowhere


def test_gold_answers_are_nfkc_normalised_as_document_text_is():
    # the loaders store "km²" as "km2" and full-width "ＡＢＣ１" as "ABC1": a gold answer must still hold there
    assert holds_answer("其陆地管辖面积为1750.33km2，海域管辖面积", ["陆地管辖面积为1750.33km²"])
    assert exact_match("ABC1", ["ＡＢＣ１"]) == 1.0
    assert normalize_answer("１７５０ｋｍ²") == "1750km2"


ROWS = [
    {"query_id": "q1", "question": "?", "answer": "Eiffel tower!", "citations": ["c1"], "contexts": ["c1", "c2"],
     "refused": False, "generator": "extractive", "latency_ms": 100.0, "best_score": 0.9, "coverage": 1.0},
    {"query_id": "q2", "question": "?", "answer": "踢了", "citations": ["c3", "c4"], "contexts": ["c3", "c4"],
     "refused": False, "generator": "extractive", "latency_ms": 200.0, "best_score": 0.9, "coverage": 1.0},
    {"query_id": "q3", "question": "?", "answer": "", "citations": [], "contexts": ["c4"],
     "refused": True, "generator": "extractive", "latency_ms": 300.0, "best_score": 0.5, "coverage": 0.0},
    {"query_id": "q4", "question": "?", "answer": "x", "citations": [], "contexts": [],
     "refused": False, "generator": "extractive", "latency_ms": 999.0, "best_score": 0.9, "coverage": 1.0},
]
GOLD = {"q1": ["the Eiffel Tower"], "q2": ["踢爆"], "q3": ["4分钟"], "q5": ["never asked"]}
TEXTS = {"c1": "The Eiffel Tower is in Paris.", "c2": "Eiffel Tower, again.", "c3": "他们踢爆了它", "c4": "无关"}
EXPECTED = {"em": 1 / 3, "f1": 0.5, "em_answered": 0.5, "f1_answered": 0.75, "has_answer": 1.0,
            "citation_precision": 0.75, "citation_recall": 0.75, "refusal_rate": 1 / 3,
            "latency_p50_ms": 200.0, "latency_p95_ms": 290.0}


def test_answer_metrics_exact_values():
    r = answer_metrics(ROWS, GOLD, TEXTS)
    assert r["metrics"] == pytest.approx(EXPECTED)
    assert r["counts"] == {"n_questions": 3, "n_refused": 1, "n_answered": 2, "n_with_citations": 2,
                           "n_evidence_holds_answer": 2}
    assert r["missing_answers"] == ["q5"] and r["no_gold"] == ["q4"]
    assert r["per_query"]["q1"]["citation_recall"] == 0.5  # c2 holds the answer too and was not cited
    assert r["per_query"]["q2"]["citation_precision"] == 0.5
    assert "has_answer" not in r["per_query"]["q3"]  # refused: no citations to judge


def test_answer_metrics_nothing_defined():
    r = answer_metrics([ROWS[2]], {"q3": ["4分钟"]}, {})
    assert r["metrics"]["has_answer"] is None and r["metrics"]["citation_precision"] is None
    assert r["metrics"]["refusal_rate"] == 1.0 and r["metrics"]["f1"] == 0.0


def _project(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "rag.toml").write_text("")
    pq.write_table(pa.table({"chunk_id": list(TEXTS), "doc_id": ["d1", "d1", "d2", "d3"],
                             "text": list(TEXTS.values())}), proj / "chunks.parquet")
    (proj / "answers").mkdir()
    write_answers(proj / "answers" / "hand.parquet", ROWS)
    gold = tmp_path / "answers.jsonl"
    gold.write_text("".join(json.dumps({"_id": q, "answers": a}, ensure_ascii=False) + "\n"
                            for q, a in GOLD.items()), encoding="utf-8")
    return proj, gold


def test_cli_eval_answers(tmp_path):
    proj, gold = _project(tmp_path)
    res = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "hand.parquet"), "--gold",
                                   str(gold), "-p", str(proj), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["metrics"] == pytest.approx(EXPECTED)
    written = json.loads((proj / "eval" / "answers-hand.json").read_text(encoding="utf-8"))
    assert written["metrics"] == report["metrics"]
    table = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "hand.parquet"), "--gold",
                                     str(gold), "-p", str(proj), "--name", "t"])
    assert table.exit_code == 0 and "citation_precision" in table.output and "0.7500" in table.output
    assert (proj / "eval" / "t.json").exists()


def test_refusal_rates_count_only_answerable_and_unanswerable_rows(tmp_path):
    """#23 item 23: rows of A with no gold answer and not in U counted as false refusals (0.136 against a
    refusal rate of 0.086 on the answerable ones). Only rows with gold (A) and the rows of U are counted now,
    and the report says how many rows were neither."""
    proj, gold = _project(tmp_path)
    extra = {"query_id": "q6", "question": "?", "answer": "", "citations": [], "contexts": [], "refused": True,
             "generator": "extractive", "latency_ms": 10.0, "best_score": 0.1, "coverage": 0.0}
    write_answers(proj / "answers" / "a.parquet", ROWS + [extra])  # q4 (answered) and q6 (refused): no gold
    cut = [dict(ROWS[0], query_id="u1", refused=True, answer=""), dict(ROWS[1], query_id="u2")]
    write_answers(proj / "answers" / "u.parquet", cut)
    res = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "a.parquet"), "--gold",
                                   str(gold), "--unanswerable", str(proj / "answers" / "u.parquet"), "-p", str(proj),
                                   "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    r = report["refusal"]
    # q1-q3 answerable (q3 refused): the false-refusal rate is the answerable rows' refusal rate
    assert r["false_refusal_rate"] == pytest.approx(1 / 3) == report["metrics"]["refusal_rate"]
    assert (r["n_answerable"], r["n_refused_answerable"], r["n_unanswerable"], r["n_refused_unanswerable"]) == (3, 1,
                                                                                                              2, 1)
    assert r["n_neither"] == 2 and r["refusal_unanswerable"] == 0.5
    err = " ".join(res.stderr.split())
    assert ("2 answer row(s) have no gold answer and were not scored, nor counted in the refusal rates "
            "(neither answerable, with a gold answer, nor unanswerable, in") in err, err
    assert "q4, q6" in err


def test_cli_eval_answers_bad_input(tmp_path):
    proj, gold = _project(tmp_path)
    answers = str(proj / "answers" / "hand.parquet")
    no_gold = CliRunner().invoke(app, ["eval", "answers", "--answers", answers, "-p", str(proj)])
    assert no_gold.exit_code == 2 and "--gold" in no_gold.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "q1", "answers": []}\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["eval", "answers", "--answers", answers, "--gold", str(bad), "-p", str(proj)])
    assert res.exit_code == 2 and "bad.jsonl:1" in res.output and "non-empty list" in res.output
    assert not (proj / "eval").exists()
    no_qrels = CliRunner().invoke(app, ["eval", "--run", answers])
    assert no_qrels.exit_code == 2 and "--qrels" in no_qrels.output


def test_reads_the_cmrc_gold_file(cmrc_dir):
    gold = read_gold_answers(cmrc_dir / "answers.jsonl")
    assert len(gold) == 1000
    assert gold["TRIAL_800_QUERY_0"] == ["踢爆"]


def test_cli_eval_answers_warns_with_and_without_json(tmp_path):
    proj, gold = _project(tmp_path)
    extra = tmp_path / "more.jsonl"  # one more gold question that has no answer row
    extra.write_text(gold.read_text(encoding="utf-8") + json.dumps({"_id": "q99", "answers": ["x"]}) + "\n",
                     encoding="utf-8")
    for fmt in ([], ["--json"]):
        res = CliRunner().invoke(app, ["eval", "answers", "--answers", str(proj / "answers" / "hand.parquet"), "--gold",
                                       str(extra), "-p", str(proj), "--name", "w", *fmt])
        assert res.exit_code == 0, res.output
        assert "2 question(s) of the gold file have no answer row: q5, q99" in " ".join(res.stderr.split()), fmt
    assert json.loads(res.stdout)["missing_answers"] == ["q5", "q99"]


def test_markers_and_support_line_are_not_scored():
    """An answer is scored as read: "10th century [1]" is EM 1 against "10th
    century" (it was EM 0 and F1 0.8 with the marker's "1" as a token)."""
    from rag_cli.evaluate.answers import answer_text

    assert answer_text("10th century [1]") == "10th century"
    assert answer_text("k = 60 [2, 3]") == "k = 60"
    assert answer_text("北京【1】") == "北京"
    assert answer_text("ten seconds [1]\nsupport: hold the red button for ten seconds. [1]") == "ten seconds"
    assert answer_text("ten seconds [1]\n依据：按住红色按钮十秒。 [1]") == "ten seconds"
    gold = {"q1": ["10th century"], "q2": ["北京"], "q3": ["ten seconds"]}
    rows = [{"query_id": "q1", "answer": "10th century [1]", "citations": ["c1"], "contexts": ["c1"], "refused": False},
            {"query_id": "q2", "answer": "北京 [1]", "citations": ["c2"], "contexts": ["c2"], "refused": False},
            {"query_id": "q3", "answer": "ten seconds [1]\nSupport: Hold it for ten seconds. [1]",
             "citations": ["c3"], "contexts": ["c3"], "refused": False}]
    m = answer_metrics(rows, gold, {"c1": "In the 10th century.", "c2": "北京。", "c3": "Ten seconds."})
    assert m["metrics"]["em"] == 1.0 and m["metrics"]["f1"] == 1.0
    assert [q["em"] for q in m["per_query"].values()] == [1.0, 1.0, 1.0]
