"""The refusal gate's cosine threshold per question language (issue 22):
`ask.min_score` judges questions with Chinese characters, `ask.min_score_en`
the others (`rag_cli.generate.gate.min_score_for`); the English key follows
`min_score` where only that one is given (rag.toml, `--min-score`, the
option); `rag eval tune refusal` searches each on its own questions; `rag
serve` takes both; `rag ask --json` names the one used."""

from __future__ import annotations

import io
import itertools
import json
import random
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.config import AskConfig, Config, apply_follows, setting_info
from rag_cli.errors import BadInput
from rag_cli.generate.gate import GateSignals, gate_reason, min_score_for, min_score_key
from rag_cli.project import Project

EN, ZH = "What does the b parameter control in BM25?", "什么是混合检索中的RRF？"


def rag(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})


# --------------------------------------------------------------------------- the gate
def test_a_cosine_between_the_thresholds_refuses_the_chinese_question_and_answers_the_english_one():
    cfg = AskConfig()
    assert (cfg.min_score, cfg.min_score_en) == (0.82, 0.81)
    between = GateSignals(n_evidence=5, best_score=0.815, coverage=0.8, entity_coverage=1.0, cjk=True)
    assert gate_reason(between, cfg) == "best evidence cosine 0.815 is below min_score 0.82"
    assert gate_reason(replace(between, cjk=False), cfg) == ""
    below = replace(between, best_score=0.805, cjk=False)
    assert gate_reason(below, cfg) == "best evidence cosine 0.805 is below min_score_en 0.81"
    assert gate_reason(replace(below, cjk=True), cfg).endswith("below min_score 0.82")
    # at the threshold: answered (refused strictly below)
    assert gate_reason(replace(between, best_score=0.81, cjk=False), cfg) == ""
    assert gate_reason(replace(between, best_score=0.82, cjk=True), cfg) == ""
    assert (min_score_key(True), min_score_key(False)) == ("min_score", "min_score_en")
    assert (min_score_for(True, cfg), min_score_for(False, cfg)) == (0.82, 0.81)
    # the other way round: each question is judged by its own key, not by the larger or smaller one
    swapped = replace(cfg, min_score=0.7, min_score_en=0.9)
    assert gate_reason(replace(between, cjk=True), swapped) == ""
    assert gate_reason(replace(between, cjk=False), swapped) == "best evidence cosine 0.815 is below min_score_en 0.9"


# --------------------------------------------------------------------------- rag.toml and options
def test_an_absent_english_key_follows_min_score_where_rag_toml_sets_it(tmp_path):
    path = tmp_path / "rag.toml"
    path.write_text("[ask]\nmin_score = 0.85\n", encoding="utf-8")
    assert (Config.load(path).ask.min_score, Config.load(path).ask.min_score_en) == (0.85, 0.85)
    path.write_text("[ask]\nmin_score = 0.85\nmin_score_en = 0.8\n", encoding="utf-8")
    assert (Config.load(path).ask.min_score, Config.load(path).ask.min_score_en) == (0.85, 0.8)
    path.write_text("[ask]\nmin_score_en = 0.79\n", encoding="utf-8")
    assert (Config.load(path).ask.min_score, Config.load(path).ask.min_score_en) == (0.82, 0.79)
    path.write_text("[ask]\nk = 3\n", encoding="utf-8")  # neither: the defaults
    assert (Config.load(path).ask.min_score, Config.load(path).ask.min_score_en) == (0.82, 0.81)
    # a rag.toml written before the key existed holds every other key, min_score = 0.82 among them:
    # its English questions keep the threshold they had
    old = Config().to_dict()
    del old["ask"]["min_score_en"]
    import tomli_w

    path.write_text(tomli_w.dumps(old), encoding="utf-8")
    assert Config.load(path).ask.min_score_en == 0.82
    # and the next save writes the value it followed, so the file says what judges English questions
    Config.load(path).save(path)
    assert "min_score_en = 0.82" in path.read_text(encoding="utf-8")


def test_one_number_given_as_an_option_judges_every_question(tmp_path):
    cfg = Config()
    one = cfg.with_options("ask", {"min_score": 0.9, "min_score_en": None})[0].ask
    assert (one.min_score, one.min_score_en) == (0.9, 0.9)
    both = cfg.with_options("ask", {"min_score": 0.9, "min_score_en": 0.7})[0].ask
    assert (both.min_score, both.min_score_en) == (0.9, 0.7)
    english = cfg.with_options("ask", {"min_score_en": 0.7})[0].ask
    assert (english.min_score, english.min_score_en) == (0.82, 0.7)
    assert apply_follows("ask", {"min_score": 0.5}) == {"min_score": 0.5, "min_score_en": 0.5}
    assert apply_follows("ask", {"k": 3}) == {"k": 3}
    with pytest.raises(BadInput, match=r"--min-score-en 1\.5 \(config ask\.min_score_en\): must be from -1 to 1"):
        cfg.with_options("ask", {"min_score_en": 1.5})
    path = tmp_path / "rag.toml"
    path.write_text("[ask]\nmin_score_en = -2\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"\[ask\] min_score_en = -2: must be from -1 to 1 \(flag --min-score-en\)"):
        Config.load(path)


def test_the_rule_is_declared_once_and_documented_in_the_help():
    info = setting_info("ask", "min_score_en")
    assert info.flag == "--min-score-en" and info.limits == (-1, 1) and info.follows == "min_score"
    assert "without Chinese characters" in info.help
    assert "ask.min_score's value when only that is given" in info.help
    assert setting_info("ask", "min_score").follows is None


# --------------------------------------------------------------------------- rag ask, end to end (tiny encoder)
@pytest.fixture(scope="module")
def sample(make_sample_project, tmp_path_factory) -> Project:
    return make_sample_project(tmp_path_factory.mktemp("lang") / "p")


def _between(best: float) -> tuple[float, float]:
    """(a threshold just below `best`, one just above), 4 decimals."""
    return round(best - 0.0005, 4), round(best + 0.0005, 4)


def test_ask_judges_each_question_by_its_languages_threshold(sample):
    loose = dict(min_coverage=0.0, min_entity_coverage=0.0)
    b_en, b_zh = sample.ask(EN, gate="off").best_score, sample.ask(ZH, gate="off").best_score
    for question, best, cjk in ((EN, b_en, False), (ZH, b_zh, True)):
        lo, hi = _between(best)
        assert lo < best < hi
        # min_score above the cosine, min_score_en below it: the English question is answered, the Chinese refused
        res = sample.ask(question, min_score=hi, min_score_en=lo, **loose)
        assert res.refused == cjk, res.reason
        assert (res.min_score_key, res.min_score_used) == (("min_score", hi) if cjk else ("min_score_en", lo))
        if cjk:
            assert res.reason == f"best evidence cosine {best:.3f} is below min_score {hi}"
        else:
            assert res.given and all(e.score >= lo for e in res.given)
        # the other way round
        res = sample.ask(question, min_score=lo, min_score_en=hi, **loose)
        assert res.refused != cjk, res.reason
        assert res.min_score_used == (lo if cjk else hi)
        d = res.to_dict()
        assert (d["min_score_key"], d["min_score_used"]) == (("min_score", lo) if cjk else ("min_score_en", hi))
        assert {"best_score", "coverage", "reason", "refused", "answer"} <= set(d)  # the existing keys stay


def test_the_evidence_given_is_cut_at_the_questions_threshold(sample):
    res = sample.ask(EN, gate="off", k=5)
    scores = sorted(e.score for e in res.evidence)
    floor = round((scores[1] + scores[2]) / 2, 6)  # between the second and third lowest: two pieces fall below
    cut = sample.ask(EN, k=5, min_score=-1.0, min_score_en=floor, min_coverage=0.0)
    assert not cut.refused, cut.reason
    assert sorted(e.chunk_id for e in cut.given) == sorted(e.chunk_id for e in res.evidence if e.score >= floor)
    assert len(cut.given) == len(res.evidence) - 2
    # min_score (Chinese questions') does not cut an English question's evidence
    kept = sample.ask(EN, k=5, min_score=0.9999, min_score_en=-1.0, min_coverage=0.0)
    assert not kept.refused and len(kept.given) == len(res.evidence)


def test_min_score_flag_alone_sets_both_and_min_score_en_sets_the_english_one(sample):
    b_en = sample.ask(EN, gate="off").best_score
    lo, hi = _between(b_en)
    root = sample.root
    one = rag("ask", EN, "--min-score", hi, "--json", "-p", root)
    assert one.exit_code == 0, one.output
    out = json.loads(one.stdout)
    assert out["refused"] and out["reason"] == f"best evidence cosine {b_en:.3f} is below min_score_en {hi}"
    assert (out["min_score_key"], out["min_score_used"]) == ("min_score_en", hi)
    two = rag("ask", EN, "--min-score", hi, "--min-score-en", lo, "--min-coverage", 0, "--json", "-p", root)
    assert two.exit_code == 0, two.output
    out = json.loads(two.stdout)
    assert not out["refused"] and out["min_score_used"] == lo
    bad = rag("ask", EN, "--min-score-en", 1.5, "-p", root)
    assert bad.exit_code == 2
    assert "--min-score-en 1.5 (config ask.min_score_en): must be from -1 to 1" in " ".join(bad.stderr.split())


# --------------------------------------------------------------------------- rag serve's request
def test_serve_ask_request_takes_the_english_threshold():
    from pydantic import ValidationError

    from rag_cli.serve.requests import AskRequest

    req = AskRequest(question=EN, min_score_en=0.8)
    assert req.options() == {"min_score_en": 0.8}
    assert AskRequest(question=EN, min_score=0.9, min_score_en=0.8).options() == {"min_score": 0.9, "min_score_en": 0.8}
    with pytest.raises(ValidationError, match="min_score_en"):
        AskRequest(question=EN, min_score_en="0.8")  # strict: a number, not text


def test_serve_passes_the_english_threshold_to_ask(sample):
    from rag_cli.config import ServeConfig
    from rag_cli.serve.requests import AskRequest
    from rag_cli.serve.service import Service

    b_en = sample.ask(EN, gate="off").best_score
    lo, hi = _between(b_en)
    service = Service(Project.open(sample.root), ServeConfig())
    refused = service.ask(AskRequest(question=EN, min_score_en=hi)).data
    assert refused["refused"] and (refused["min_score_key"], refused["min_score_used"]) == ("min_score_en", hi)
    answered = service.ask(AskRequest(question=EN, min_score=hi, min_score_en=lo, min_coverage=0.0)).data
    assert not answered["refused"] and answered["min_score_used"] == lo
    follows = service.ask(AskRequest(question=EN, min_score=hi)).data  # one number: every question
    assert follows["refused"] and follows["min_score_used"] == hi


# --------------------------------------------------------------------------- rag eval tune refusal
def _row(qid: str, question: str, cos: float, coverage: float = 0.6, entity: float = 0.7) -> dict:
    return {"query_id": qid, "question": question, "answer": "x", "citations": [], "contexts": ["d#0"],
            "refused": False, "generator": "extractive", "latency_ms": 1.0, "best_score": cos, "coverage": coverage,
            "entity_coverage": entity, "rerank_score": None, "reason": "", "generator_refused": False,
            "answer_terms": 0.5, "answer_type": 1.0, "sentence_score": cos, "reader_null": None}


EN_Q, ZH_Q = "Which year was it founded?", "它是哪一年成立的？"
EN_ANSWERABLE, ZH_ANSWERABLE = [0.80, 0.84, 0.86, 0.90, 0.95], [0.83, 0.87, 0.90, 0.93, 0.96]
EN_UNANSWERABLE, ZH_UNANSWERABLE = [0.79, 0.795], [0.82, 0.825]


def _mixed() -> tuple[list[dict], list[dict]]:
    answerable = ([_row(f"ea{i}", EN_Q, c) for i, c in enumerate(EN_ANSWERABLE)]
                  + [_row(f"za{i}", ZH_Q, c) for i, c in enumerate(ZH_ANSWERABLE)])
    unanswerable = ([_row(f"eu{i}", EN_Q, c) for i, c in enumerate(EN_UNANSWERABLE)]
                    + [_row(f"zu{i}", ZH_Q, c) for i, c in enumerate(ZH_UNANSWERABLE)])
    return answerable, unanswerable


def test_tune_refusal_searches_each_threshold_on_its_own_questions_and_writes_both(tmp_path):
    from rich.console import Console

    from rag_cli import lab
    from rag_cli.store.answers import write_answers

    p = Project.create(tmp_path / "p")
    answerable, unanswerable = _mixed()
    a, u = tmp_path / "a.parquet", tmp_path / "u.parquet"
    write_answers(a, answerable)
    write_answers(u, unanswerable)
    report = lab.tune_refusal.run(p, a, u, max_false_refusal=0.0, learn=False)
    # no false refusal allowed: each threshold goes up to its language's lowest answerable cosine, refusing
    # every unanswerable question of that language (the other rules cannot tell them apart)
    assert report["best"]["min_score"] == 0.83 and report["best"]["min_score_en"] == 0.80
    assert report["target_met"] and report["train"]["tuned"]["refusal_unanswerable"] == 1.0
    assert report["train"]["tuned"]["false_refusal_rate"] == 0.0
    # the defaults, 0.82 / 0.81: the two English unanswerable ones refused, and the English answerable one at 0.80
    assert (report["train"]["current"]["n_refused_unanswerable"], report["train"]["current"]["n_refused_answerable"]) \
        == (2, 1)
    assert report["judged_by"] == {"min_score": {"answerable": 5, "unanswerable": 2},
                                   "min_score_en": {"answerable": 5, "unanswerable": 2}}
    cfg = Project.open(p.root).config.ask
    assert (cfg.min_score, cfg.min_score_en) == (0.83, 0.80)
    text = io.StringIO()
    report.print_tables(Console(file=text, width=300))
    out = " ".join(text.getvalue().split())
    assert "min_score 0.83 (questions with Chinese characters): 5 answerable + 2 unanswerable train questions" in out
    assert "min_score_en 0.8 (questions without Chinese characters): 5 answerable + 2 unanswerable" in out
    md = report.markdown()
    assert "min_score = 0.83" in md and "min_score_en = 0.8" in md and "Cosine thresholds, one per question" in md


def test_tune_refusal_keeps_a_threshold_that_judges_no_question(tmp_path):
    from rag_cli.evaluate.gate_tuning import gate_grid, threshold_notes, tune_refusal

    answerable, unanswerable = _mixed()
    english = ([r for r in answerable if r["question"] == EN_Q], [r for r in unanswerable if r["question"] == EN_Q])
    cfg = AskConfig(min_score=0.85)
    assert gate_grid(*english, cfg)["min_score"] == [0.85]
    report = tune_refusal(english, None, cfg, max_false_refusal=0.0, learn=False)
    assert report["best"]["min_score"] == 0.85 and report["best"]["min_score_en"] == 0.80
    assert report["judged_by"]["min_score"] == {"answerable": 0, "unanswerable": 0}
    assert threshold_notes(report)[0] == ("min_score 0.85 (questions with Chinese characters): no train question, "
                                          "kept as it was")


def test_the_per_language_search_equals_the_full_grid(monkeypatch):
    """The search sums per-language refusal counts (`_language_counts`) instead of simulating every
    (min_score, min_score_en) pair on all rows: the best setting's rates and closeness equal a brute force."""
    import rag_cli.evaluate.gate_tuning as gt

    rnd = random.Random(7)
    answerable = [_row(f"a{i}", rnd.choice((EN_Q, ZH_Q)), rnd.uniform(0.78, 0.95), rnd.uniform(0, 1),
                       rnd.uniform(0, 1)) for i in range(40)]
    unanswerable = [_row(f"u{i}", rnd.choice((EN_Q, ZH_Q)), rnd.uniform(0.75, 0.9), rnd.uniform(0, 1),
                         rnd.uniform(0, 1)) for i in range(40)]
    full_grid = gt.gate_grid

    def small_grid(a, u, cfg):  # the rules' grids cut to 3 values each, to keep the brute force fast
        return {k: (v if k in gt.THRESHOLDS else v[:3]) for k, v in full_grid(a, u, cfg).items()}

    monkeypatch.setattr(gt, "gate_grid", small_grid)
    cfg = AskConfig()
    for target in (0.0, 0.05, 0.2):
        report = gt.tune_refusal((answerable, unanswerable), None, cfg, max_false_refusal=target, learn=False)
        grid = small_grid(answerable, unanswerable, cfg)
        current = {k: getattr(cfg, k) for k in gt.TUNED}
        span = {k: (max(v) - min(v)) or 1.0 for k, v in grid.items() if k != "entity_scope"}

        def key(setting):
            r = gt.rates(answerable, unanswerable, replace(cfg, **setting))
            fr, refused = r["false_refusal_rate"], r["refusal_unanswerable"]
            met = fr <= target + 1e-12
            distance = sum(abs(setting[k] - current[k]) / span[k] for k in span) + (
                setting["entity_scope"] != current["entity_scope"])
            return met, refused if met else -fr, refused, -distance

        settings = [dict(zip(gt.TUNED, v)) for v in itertools.product(*(grid[k] for k in gt.TUNED))]
        assert report["n_settings"] == len(settings)
        chosen = {k: report["best"][k] for k in gt.TUNED}
        assert key(chosen) == max(map(key, settings)), target
        assert report["train"]["tuned"] == gt.rates(answerable, unanswerable, replace(cfg, **chosen))
