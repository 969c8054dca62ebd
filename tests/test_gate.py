"""The refusal gate's entity rule (rag_cli.generate.gate): unit tests on
hand-made idf tables, and end to end on a CMRC 2018 subset with the default
model: a question whose passage was removed is refused, one whose passage is
there is answered."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.generate.gate import QUESTION_WORDS, entity_coverage, key_terms, max_idf
from rag_cli.index.sparse import analyze
from rag_cli.project import Project


def test_max_idf_is_the_lucene_idf_of_an_unseen_term():
    assert max_idf(100) == pytest.approx(math.log(1 + 100.5 / 0.5))


def test_key_terms_drop_question_words_and_common_terms():
    n = 100
    top = max_idf(n)
    idf = {"什么": top, "王家瑞": 0.7 * top, "职务": 0.35 * top, "年": 0.1 * top}
    assert "什么" in QUESTION_WORDS
    assert key_terms(idf, n, 0.3) == {"王家瑞": 0.7 * top, "职务": 0.35 * top}
    assert key_terms(idf, n, 0.5) == {"王家瑞": 0.7 * top}
    assert key_terms({"什么": top}, n, 0.3) == {}


def test_entity_coverage_is_the_best_single_text_share():
    key = {"王家瑞": 3.0, "职务": 1.0}
    texts = ["王家瑞曾任外交部副部长。", "他的职务是大使。"]
    assert entity_coverage(key, texts, analyze) == pytest.approx(0.75)  # not 1.0: no text holds both
    assert entity_coverage(key, ["王家瑞的职务"], analyze) == pytest.approx(1.0)
    assert entity_coverage(key, ["李明的职务"], analyze) == pytest.approx(0.25)
    assert entity_coverage({}, ["x"], analyze) == 1.0
    assert entity_coverage(key, [], analyze) == 0.0


def test_entity_coverage_matches_english_terms_by_analyzed_word():
    key = {"hnsw": 5.0, "graph": 1.0}
    assert entity_coverage(key, ["HNSW builds a layered graph."], analyze) == pytest.approx(1.0)
    assert entity_coverage(key, ["IVF builds graphs of lists."], analyze) == pytest.approx(1 / 6)  # "graphs" stems to graph


def test_entity_rule_is_configurable(tmp_path):
    p = Project.create(tmp_path / "p", ask={"min_entity_coverage": 0.0, "key_idf": 0.5})
    assert p.config.ask.min_entity_coverage == 0.0 and p.config.ask.key_idf == 0.5
    (tmp_path / "p" / "rag.toml").write_text("[ask]\nmin_entity_coverage = 1.5\n", encoding="utf-8")
    with pytest.raises(Exception, match="min_entity_coverage"):
        Project.open(tmp_path / "p").config


@pytest.mark.e2e
def test_made_unanswerable_cmrc_question_is_refused(tmp_path, default_model, cmrc_dir):
    docs = [json.loads(line) for line in (cmrc_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (cmrc_dir / "queries.jsonl").read_text(
        encoding="utf-8").splitlines())}
    kept = docs[:16]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in kept), encoding="utf-8")
    p = Project.create(tmp_path / "p")
    p.chunk([corpus], format="beir")
    p.embed()
    p.index()
    runner = CliRunner()

    def ask(question):
        res = runner.invoke(app, ["ask", question, "--json", "-p", str(tmp_path / "p")])
        assert res.exit_code == 0, res.stdout + res.stderr
        return json.loads(res.stdout)

    answerable = ask(queries["TRIAL_800_QUERY_1"])  # 若游戏中离，则多少分钟内不得进行配对？ (passage kept)
    assert not answerable["refused"] and "4分钟" in answerable["answer"]
    missing = "TRIAL_641_QUERY_1"  # 芙蓉洞什么时候开始对游人开放？ its passage is not in the corpus;
    # the old rules let it through (a third of its terms in the evidence, cosine above min_score)
    assert "TRIAL_641" not in {d["_id"] for d in kept}
    out = ask(queries[missing])
    assert out["refused"] and out["answer"] == "资料中未提及。"
    assert "key terms" in out["reason"]
    # with the entity rule off, the same question is answered from another passage: the rule did the refusing
    p.config.with_options("ask", {"min_entity_coverage": 0.0})[0].save(p.config_path)
    assert not ask(queries[missing])["refused"]


def test_entity_rule_judges_chinese_questions_unless_the_scope_is_all():
    from rag_cli.config import AskConfig
    from rag_cli.generate.gate import entity_rule_applies

    zh, en = "西直门站有几个出口？", "How many exits does Xizhimen station have?"
    assert entity_rule_applies(zh, AskConfig()) and not entity_rule_applies(en, AskConfig())
    assert entity_rule_applies(en, AskConfig(entity_scope="all"))
    assert not entity_rule_applies(zh, AskConfig(min_entity_coverage=0.0))
