"""The refusal gate's signals in answers files, the gate decision as a pure
function (`rag_cli.generate.gate.gate_reason`) shared by `rag ask` and
`rag eval --tune refusal`, the cross-encoder rule, the made-unanswerable
variant of a corpus and the refusal rates of `rag eval --unanswerable`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.config import AskConfig, apply_follows
from rag_cli.generate.gate import GateSignals, gate_reason
from rag_cli.project import Project

QUESTIONS = [("q1", "How does BM25 rank documents?"), ("q2", "What does the ef parameter of HNSW set?"),
             ("q3", "什么是混合检索中的RRF？"), ("q4", "Which volcano erupted on Mars in 1850?"),
             ("q5", "How are chunks split with overlap?")]


def rag(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})


@pytest.fixture(scope="module")
def project(tmp_path_factory, make_sample_project):
    return make_sample_project(tmp_path_factory.mktemp("gate") / "p.rag")


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("q") / "qs.jsonl"
    path.write_text("".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in QUESTIONS),
                    encoding="utf-8")
    return path


def test_gate_reason_rules_in_order():
    cfg = AskConfig()
    base = GateSignals(n_evidence=5, best_score=0.85, coverage=0.8, entity_coverage=1.0, cjk=True)
    assert gate_reason(base, cfg) == ""
    assert gate_reason(replace(base, n_evidence=0, best_score=-1.0), cfg) == "no evidence was retrieved"
    assert "min_score 0.82" in gate_reason(replace(base, best_score=0.81), cfg)
    assert "min_coverage 0.3" in gate_reason(replace(base, coverage=0.2), cfg)
    assert gate_reason(replace(base, coverage=0.2, best_score=0.95), cfg) == ""  # strong match
    assert "min_entity_coverage 0.5" in gate_reason(replace(base, entity_coverage=0.4), cfg)
    assert gate_reason(replace(base, entity_coverage=0.4, cjk=False), cfg) == ""  # scope zh
    assert "min_entity_coverage" in gate_reason(replace(base, entity_coverage=0.4, cjk=False),
                                                replace(cfg, entity_scope="all"))
    # the cross-encoder rule: only with a score and a threshold != 0
    assert gate_reason(replace(base, rerank_score=-3.0), cfg) == ""
    assert "min_rerank_score -2.0" in gate_reason(replace(base, rerank_score=-3.0), replace(cfg, min_rerank_score=-2.0))
    assert gate_reason(base, replace(cfg, min_rerank_score=5.0)) == ""  # no reranker: no score
    assert gate_reason(replace(base, best_score=0.1, n_evidence=0), replace(cfg, gate="off")) == ""


def test_answers_file_records_the_gate_signals(project, queries):
    res = rag("ask", "--queries", queries, "--name", "on", "-q", "-p", project.root)
    assert res.exit_code == 0, res.output
    rows = pq.read_table(project.root / "answers" / "on.parquet").to_pylist()
    assert [r["query_id"] for r in rows] == [q for q, _ in QUESTIONS]
    for r in rows:
        assert 0.0 <= r["entity_coverage"] <= 1.0 and r["rerank_score"] is None
        assert r["refused"] == bool(r["reason"])
        # the generator ran exactly when the gate let the question through
        gate_refused = r["refused"] and r["generator_refused"] is None
        assert (r["generator_refused"] is None) == gate_refused
    off = rag("ask", "--queries", queries, "--name", "off", "--gate", "off", "-q", "-p", project.root)
    assert off.exit_code == 0, off.output
    rows_off = pq.read_table(project.root / "answers" / "off.parquet").to_pylist()
    assert all(r["generator_refused"] is not None for r in rows_off)
    assert [r["best_score"] for r in rows_off] == pytest.approx([r["best_score"] for r in rows])
    assert sum(r["refused"] for r in rows_off) <= sum(r["refused"] for r in rows)
    assert Project.open(project.root).config.ask.gate == "on"  # a flag, not saved


def test_old_answers_files_are_still_scored(project, tmp_path):
    old = pa.table({"query_id": ["q1"], "question": ["How does BM25 rank documents?"], "answer": ["by tf-idf"],
                    "citations": [[]], "contexts": [[]], "refused": [False], "generator": ["extractive"],
                    "latency_ms": [1.0], "best_score": [0.9], "coverage": [1.0]})
    pq.write_table(old, tmp_path / "old.parquet")
    (tmp_path / "gold.jsonl").write_text(json.dumps({"_id": "q1", "answers": ["by tf-idf"]}) + "\n")
    res = rag("eval", "answers", "--answers", tmp_path / "old.parquet", "--gold", tmp_path / "gold.jsonl", "--json",
              "-o", tmp_path / "r.json", "-p", project.root)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["metrics"]["em"] == 1.0


def test_sample_unanswerable_removes_whole_documents_until_n_questions():
    from rag_cli.evaluate.unanswerable import sample_unanswerable

    qrels = {"a": {"d1": 1}, "b": {"d1": 1}, "c": {"d2": 1, "d3": 1}, "d": {"d3": 1}, "e": {"d4": 0}}
    for seed in range(5):
        picked, removed = sample_unanswerable(qrels, 2, seed)
        assert len(picked) >= 2 and "e" not in picked and "d4" not in removed
        for q in picked:  # every relevant document of a picked question is removed
            assert set(qrels[q]) <= set(removed)
        if "d1" in removed:
            assert {"a", "b"} <= set(picked)  # both questions of a removed passage
    assert sample_unanswerable(qrels, 10, 0)[0] and len(sample_unanswerable(qrels, 10, 0)[1]) == 3


def _tiny_dataset(folder: Path) -> list[Path]:
    """corpus d1-d3 (every one relevant), questions a-d; a and b ask d1, c asks d2, d asks d3."""
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": f"text {d}"}) + "\n"
                                                 for d in ("d1", "d2", "d3")))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"question {q}"}) + "\n"
                                                  for q in "abcd"))
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\na\td1\t1\nb\td1\t1\nc\td2\t1\nd\td3\t1\n")
    return [folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels.tsv"]


def test_make_unanswerable_keeps_a_document(tmp_path):
    corpus, queries, qrels = _tiny_dataset(tmp_path / "data")
    args = ["eval", "make-unanswerable", "--corpus", corpus, "--queries", queries, "--qrels", qrels]
    # keeping d2 or d3 loses one question: 3 of the 4 can be made unanswerable, not 4
    bad = rag(*args, 4, "-o", tmp_path / "x")
    assert bad.exit_code == 2 and "at most 3 question(s)" in bad.stderr and "N <= 3" in bad.stderr
    assert not (tmp_path / "x").exists()
    for seed in range(8):
        res = rag(*args, 3, "-o", tmp_path / f"s{seed}", "--seed", seed, "--json")
        assert res.exit_code == 0, res.output
        summary = json.loads(res.stdout)
        assert summary["n_questions"] >= 3 and summary["n_docs_kept"] >= 1
        kept = (tmp_path / f"s{seed}" / "corpus.jsonl").read_text().splitlines()
        assert len(kept) == summary["n_docs_kept"] == 3 - len(summary["removed_docs"])
    seen = set()
    for seed in range(8):
        res = rag(*args, 1, "-o", tmp_path / f"one{seed}", "--seed", seed)
        assert res.exit_code == 0, res.output
        summary = json.loads((tmp_path / f"one{seed}" / "removed.json").read_text())
        n_q, n_d = summary["n_questions"], len(summary["removed_docs"])
        words = ("1 question" if n_q == 1 else f"{n_q} questions", "1 document" if n_d == 1 else f"{n_d} documents")
        assert f"{words[0]} made unanswerable: {words[1]} removed" in " ".join(res.stderr.split())
        seen.add(n_q)
    assert seen == {1, 2}  # a question of d2 or d3 alone, and both of d1


@pytest.mark.e2e
def test_make_unanswerable_on_cmrc(cmrc_dir, tmp_path):
    out = tmp_path / "variant"
    res = rag("eval", "make-unanswerable", 10, "--corpus", cmrc_dir / "corpus.jsonl", "--queries",
              cmrc_dir / "queries.jsonl", "--qrels", cmrc_dir / "qrels" / "test.tsv", "-o", out, "--seed", 3,
              "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary == json.loads((out / "removed.json").read_text())
    kept = [json.loads(line)["_id"] for line in (out / "corpus.jsonl").read_text().splitlines()]
    n_all = sum(1 for line in (cmrc_dir / "corpus.jsonl").read_text().splitlines() if line.strip())
    assert len(kept) == n_all - len(summary["removed_docs"]) and not set(kept) & set(summary["removed_docs"])
    qs = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    assert [q["_id"] for q in qs] == summary["questions"] and len(qs) >= 10
    from rag_cli.evaluate.datasets import read_qrels

    qrels = read_qrels(cmrc_dir / "qrels" / "test.tsv")
    assert all(set(qrels[q["_id"]]) <= set(summary["removed_docs"]) for q in qs)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    bad = rag("eval", "make-unanswerable", 10, "--corpus", cmrc_dir / "corpus.jsonl", "--queries",
              cmrc_dir / "queries.jsonl", "--qrels", cmrc_dir / "qrels" / "test.tsv", "-o", tmp_path / "other")
    assert bad.exit_code == 2 and (tmp_path / "other" / "keep.txt").exists()


def _set_ask(root: Path, **options) -> None:
    p = Project.open(root)
    p.config.with_options("ask", options)[0].save(p.config_path)


def _refused(root: Path, queries: Path, name: str) -> list[bool]:
    res = rag("ask", "--queries", queries, "--name", name, "-q", "-p", root)
    assert res.exit_code == 0, res.output
    return pq.read_table(root / "answers" / f"{name}.parquet").column("refused").to_pylist()


@pytest.mark.e2e
def test_simulated_decision_equals_the_real_ask_decision(tmp_path, project, queries):
    import shutil

    from rag_cli.evaluate.gate_tuning import simulate

    root = tmp_path / "p.rag"
    shutil.copytree(project.root, root)
    res = rag("ask", "--queries", queries, "--name", "rec", "--gate", "off", "-q", "-p", root)
    assert res.exit_code == 0, res.output
    recorded = pq.read_table(root / "answers" / "rec.parquet").to_pylist()
    best = sorted(r["best_score"] for r in recorded)
    cov = sorted(r["coverage"] for r in recorded)
    ent = sorted(r["entity_coverage"] for r in recorded)
    settings = [{}, {"min_score": best[2]}, {"min_score": -1.0, "min_coverage": cov[2], "strong_score": 1.0},
                {"min_score": -1.0, "min_coverage": 0.0, "min_entity_coverage": ent[3] if ent[3] > 0 else 0.5,
                 "entity_scope": "all", "strong_score": best[3]},
                {"min_score": best[1], "min_coverage": cov[3], "strong_score": best[4]}]
    seen = set()
    for i, setting in enumerate(settings):
        # one min_score given: every question judged by it (ask.min_score_en follows it), as before that key
        _set_ask(root, **{**AskConfig().__dict__, **apply_follows("ask", setting)})
        expected = simulate(recorded, Project.open(root).config.ask)
        assert _refused(root, queries, f"s{i}") == expected, setting
        seen.add(tuple(expected))
    assert len(seen) >= 3  # the settings refuse different questions: the check can fail


@pytest.mark.e2e
def test_tune_refusal_writes_the_best_setting_and_ask_follows_it(tmp_path, project, queries):
    import shutil

    from rag_cli.evaluate.gate_tuning import simulate

    root = tmp_path / "p.rag"
    shutil.copytree(project.root, root)
    lines = queries.read_text().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:3]) + "\n")  # "answerable"
    (tmp_path / "u.jsonl").write_text("\n".join(lines[3:]) + "\n")  # "unanswerable"
    for n in ("a", "u"):
        res = rag("ask", "--queries", tmp_path / f"{n}.jsonl", "--gate", "off", "-q", "-p", root)
        assert res.exit_code == 0, res.output
    a, u = root / "answers" / "a.parquet", root / "answers" / "u.parquet"
    res = rag("eval", "tune", "refusal", "--answers", a, "--unanswerable", u, "--max-false-refusal", 0.34,
              "--test-answers", a, "--test-unanswerable", u, "--json", "--md", tmp_path / "t.md", "-p", root)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["target_met"] and report["train"]["tuned"]["false_refusal_rate"] <= 0.34
    assert report["train"]["tuned"]["refusal_unanswerable"] >= report["train"]["current"]["refusal_unanswerable"]
    assert report["train"]["tuned"] == report["test"]["tuned"]
    cfg = Project.open(root).config.ask
    assert {k: getattr(cfg, k) for k in report["best"]} == report["best"]
    rows_a, rows_u = pq.read_table(a).to_pylist(), pq.read_table(u).to_pylist()
    assert _refused(root, tmp_path / "a.jsonl", "a-on") == simulate(rows_a, cfg)
    assert _refused(root, tmp_path / "u.jsonl", "u-on") == simulate(rows_u, cfg)
    assert sum(simulate(rows_u, cfg)) == report["train"]["tuned"]["n_refused_unanswerable"]
    assert "Refusal gate tuned on train" in (tmp_path / "t.md").read_text()
    rules = rag("eval", "tune", "refusal", "--answers", a, "--unanswerable", u, "--max-false-refusal", 0.34,
                "--no-learn", "--json", "-p", root)
    assert rules.exit_code == 0, rules.output
    rules = json.loads(rules.stdout)
    assert not rules["learn"] and rules["learned_weights"] is None and rules["best"]["refusal_weights"] == []
    assert Project.open(root).config.ask.refusal_weights == []
    assert {k: v for k, v in rules["best"].items() if k not in ("refusal_weights", "refusal_scope")} == \
        {k: v for k, v in report["best"].items() if k not in ("refusal_weights", "refusal_scope")}
    # answers recorded with the gate on cannot be tuned on when the gate refused first
    on = rag("ask", "--queries", tmp_path / "u.jsonl", "--name", "u-strict", "--min-score", 0.9999, "-q", "-p", root)
    assert on.exit_code == 0, on.output
    bad = rag("eval", "tune", "refusal", "--answers", a, "--unanswerable", root / "answers" / "u-strict.parquet",
              "-p", root)
    assert bad.exit_code == 2 and "--gate off" in bad.output


@pytest.mark.e2e
def test_eval_reports_refusal_on_made_unanswerable(tmp_path, project, queries):
    import shutil

    root = tmp_path / "p.rag"
    shutil.copytree(project.root, root)
    res = rag("ask", "--queries", queries, "--name", "all", "-q", "-p", root)
    refused = pq.read_table(root / "answers" / "all.parquet").column("refused").to_pylist()
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"_id": q, "answers": ["x"]}) + "\n" for q, _ in QUESTIONS))
    res = rag("eval", "answers", "--answers", root / "answers" / "all.parquet", "--gold", gold, "--unanswerable",
              root / "answers" / "all.parquet", "--json", "--md", tmp_path / "r.md", "-p", root)
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)["refusal"]
    assert r["refusal_unanswerable"] == pytest.approx(sum(refused) / 5)
    assert r["false_answer_rate"] == pytest.approx(1 - sum(refused) / 5)
    assert r["false_refusal_rate"] == pytest.approx(sum(refused) / 5)
    assert "false_answer_rate" in (tmp_path / "r.md").read_text()
    table = rag("eval", "answers", "--answers", root / "answers" / "all.parquet", "--gold", gold, "--unanswerable",
                root / "answers" / "all.parquet", "-p", root)
    assert table.exit_code == 0 and "refusal_unanswerable" in table.output


@pytest.mark.e2e
def test_eval_warns_of_answers_recorded_with_the_gate_off(tmp_path, project, queries):
    import shutil

    root = tmp_path / "p.rag"
    shutil.copytree(project.root, root)
    for name, gate in (("off", "off"), ("on", "on")):
        res = rag("ask", "--queries", queries, "--name", name, "--gate", gate, "-q", "-p", root)
        assert res.exit_code == 0, res.output
        if gate == "off":  # a gate that refuses the two questions of the lowest cosines
            best = sorted(r["best_score"] for r in pq.read_table(root / "answers" / "off.parquet").to_pylist())
            _set_ask(root, min_score=(best[1] + best[2]) / 2)
    on, off = root / "answers" / "on.parquet", root / "answers" / "off.parquet"
    assert any(r["generator_refused"] is None for r in pq.read_table(on).to_pylist())  # the gate refused some
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"_id": q, "answers": ["x"]}) + "\n" for q, _ in QUESTIONS))
    res = rag("eval", "answers", "--answers", on, "--gold", gold, "--unanswerable", off, "--json",
              "--md", tmp_path / "r.md", "-p", root)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["recorded_gate_off"] == [str(off)]
    assert "--gate off" in " ".join(res.stderr.split()) and str(off) in "".join(res.stderr.split())
    assert json.loads((root / "eval" / "answers-on.json").read_text())["recorded_gate_off"] == [str(off)]
    assert "Recorded with the gate off" in (tmp_path / "r.md").read_text()
    res = rag("eval", "answers", "--answers", on, "--gold", gold, "--unanswerable", on, "--json", "-p", root)
    assert res.exit_code == 0 and json.loads(res.stdout)["recorded_gate_off"] == [] and "--gate off" not in res.stderr


@pytest.mark.e2e
def test_cross_encoder_gate(tmp_path, project, queries, tiny_cross_encoder):
    import shutil

    root = tmp_path / "p.rag"
    shutil.copytree(project.root, root)
    p = Project.open(root)
    p.config.with_options("model", {"reranker": str(tiny_cross_encoder)})[0].save(p.config_path)
    res = rag("ask", "--queries", queries, "--name", "off", "--gate", "off", "-q", "-p", root)
    assert res.exit_code == 0, res.output
    scores = pq.read_table(root / "answers" / "off.parquet").column("rerank_score").to_pylist()
    assert all(s is not None for s in scores)
    cut = sorted(scores)[2]
    res = rag("ask", "--queries", queries, "--name", "ce", "--min-rerank-score", cut, "--min-score", -1,
              "--min-coverage", 0, "-q", "-p", root)
    assert res.exit_code == 0, res.output
    rows = pq.read_table(root / "answers" / "ce.parquet").to_pylist()
    for r, s in zip(rows, scores):
        assert (s < cut) == ("min_rerank_score" in r["reason"]), (s, cut, r["reason"])
        assert r["rerank_score"] == pytest.approx(s, abs=1e-5)
    one = rag("ask", QUESTIONS[0][1], "--min-rerank-score", max(scores) + 1, "--json", "-p", root)
    assert one.exit_code == 0 and "min_rerank_score" in json.loads(one.stdout)["reason"]


# --------------------------------------------------------------------------- the learned refusal
def _row(qid, answerable: bool, terms: float, type_missing: bool = False, cos: float = 0.86) -> dict:
    return {"query_id": qid, "question": "What year was it?", "contexts": ["d#0"], "best_score": cos,
            "coverage": 0.6, "entity_coverage": 0.7, "rerank_score": None, "answer_terms": terms,
            "answer_type": 0.0 if type_missing else 1.0, "sentence_score": cos, "reader_null": None,
            "generator_refused": False, "refused": False}


def test_the_learned_refusal_is_a_logistic_regression_on_the_sentence_signals():
    from rag_cli.evaluate.gate_tuning import fit_learned, rates
    from rag_cli.generate.gate import FEATURES, features, learned_score

    import random

    rnd = random.Random(3)
    # answerable: the sentence to quote holds most of the question's terms; unanswerable: few, or lacks the year asked
    answerable = [_row(f"a{i}", True, rnd.uniform(0.5, 1.0)) for i in range(60)]
    unanswerable = [_row(f"u{i}", False, rnd.uniform(0.0, 0.6), type_missing=i % 3 == 0) for i in range(60)]
    cfg = AskConfig(min_score=0.5)
    learned = fit_learned((answerable, unanswerable), cfg, 0.05)
    weights = learned["refusal_weights"]
    assert len(weights) == len(FEATURES) + 1 and learned["refusal_scope"] == "en"
    w = dict(zip(FEATURES, weights[1:]))
    assert w["answer_terms"] > 0 and w["answer_type_missing"] < 0  # more terms: answerable; a missing year: not
    assert w["rerank_score"] == 0 and w["reader_null"] == 0  # not recorded: no weight
    tuned = replace(cfg, **learned)
    r = rates(answerable, unanswerable, tuned)
    assert r["false_refusal_rate"] <= 0.05 and r["refusal_unanswerable"] >= 0.6
    s = GateSignals(1, 0.86, 0.6, 0.7, False, answer_terms=0.05, answer_type=0.0, sentence_score=0.86)
    assert learned_score(s, weights) < 0 and "learned refusal" in gate_reason(s, tuned)
    assert features(s)[FEATURES.index("answer_type_missing")] == 1.0
    # the scope: a Chinese question is not judged by weights fitted on English ones
    assert gate_reason(replace(s, cjk=True), tuned) == ""
    assert gate_reason(s, replace(tuned, gate="off")) == ""


def test_tune_refusal_reports_the_learned_weights_and_no_learn_fits_none():
    import io

    from rich.console import Console

    from rag_cli.evaluate.gate_tuning import tune_refusal
    from rag_cli.generate.gate import FEATURES
    from rag_cli.lab.tune_refusal import TuneRefusalReport

    import random

    rnd = random.Random(5)
    answerable = [_row(f"a{i}", True, rnd.uniform(0.5, 1.0)) for i in range(60)]
    unanswerable = [_row(f"u{i}", False, rnd.uniform(0.0, 0.6), type_missing=i % 3 == 0) for i in range(60)]
    cfg = AskConfig(min_score=0.5, refusal_weights=[0.1] * 9, refusal_scope="en")
    learned = tune_refusal((answerable, unanswerable), None, cfg, max_false_refusal=0.05)
    assert learned["learn"] and learned["learned"]
    named = learned["learned_weights"]
    assert list(named) == ["bias", *FEATURES] and [named[k] for k in named] == learned["best"]["refusal_weights"]
    assert named["answer_terms"] > 0
    out = io.StringIO()
    TuneRefusalReport(learned).print_tables(Console(file=out, width=200))
    text = out.getvalue()
    assert "learned refusal" in text and "answer_terms" in text and f"{named['answer_terms']:.4g}" in text
    rules = tune_refusal((answerable, unanswerable), None, cfg, max_false_refusal=0.05, learn=False)
    assert not rules["learn"] and not rules["learned"] and rules["learned_weights"] is None
    assert rules["best"]["refusal_weights"] == []  # the rules alone: the learned refusal is switched off
    assert rules["train"]["tuned"]["refusal_unanswerable"] < learned["train"]["tuned"]["refusal_unanswerable"]
    out = io.StringIO()
    TuneRefusalReport(rules).print_tables(Console(file=out, width=200))
    assert "learned refusal" not in out.getvalue()


def test_refusal_weights_are_checked(tmp_path):
    from rag_cli.config import Config
    from rag_cli.errors import BadInput

    path = tmp_path / "rag.toml"
    path.write_text("[ask]\nrefusal_weights = [1.0, 2.0]\n")
    with pytest.raises(BadInput, match="refusal_weights"):
        Config.load(path)
    path.write_text("[ask]\nrefusal_weights = [" + ", ".join(["0.5"] * 9) + "]\nrefusal_scope = \"all\"\n")
    assert Config.load(path).ask.refusal_weights == [0.5] * 9
