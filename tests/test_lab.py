"""The evaluation lab (`rag_cli.lab`): each experiment through `run(...) ->
Report` on the small data the CLI eval tests use, with their exact values;
`Report.render` prints what `rag eval` prints for the same report (stdout
and stderr compared with the CLI's); `--ks` parsed in one place; the
preamble's checks."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rag_cli import Project, lab
from rag_cli.cli import app
from rag_cli.errors import BadInput
from rag_cli.evaluate.markdown import to_markdown
from test_answer_metrics import EXPECTED
from test_answer_metrics import _project as answers_project
from test_judge import REPEAT_1, fake  # noqa: F401 (the fake OpenAI server fixture)
from test_judge import _project as judge_project
from test_refusal_gate import QUESTIONS, _tiny_dataset
from test_structure import PKG, imported_modules

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
SAMPLE_QUESTIONS = REPO / "sample_corpus" / "questions.jsonl"
SAMPLE_QRELS = REPO / "sample_corpus" / "qrels.tsv"
WIDTH = 200

QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n"
RUN_A = "q1 Q0 d1 1 3.0 a\nq1 Q0 d9 2 2.0 a\nq2 Q0 d9 1 3.0 a\nq2 Q0 d2 2 2.0 a\nq3 Q0 d8 1 1.0 a\n"


def rendered(report, quiet: bool = False) -> tuple[str, str]:
    """(stdout, stderr) of `report.render` on consoles as wide as the CLI's under COLUMNS=WIDTH."""
    out, err = io.StringIO(), io.StringIO()
    report.render(Console(file=out, width=WIDTH, soft_wrap=True), quiet,
                  err=Console(file=err, width=WIDTH, soft_wrap=True))
    return out.getvalue(), err.getvalue()


def cli(*args) -> tuple[str, str]:
    res = CliRunner().invoke(app, ["eval", *map(str, args)], env={"COLUMNS": str(WIDTH)})
    assert res.exit_code == 0, res.output
    return res.stdout, res.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory, make_sample_project) -> Project:
    """sample_corpus in 300-character chunks, tiny bi-encoder, indexed."""
    return make_sample_project(tmp_path_factory.mktemp("lab") / "p.rag", unit="chars", size=300, overlap=0)


@pytest.fixture()
def files(tmp_path) -> Path:
    (tmp_path / "qrels.tsv").write_text(QRELS)
    (tmp_path / "a.trec").write_text(RUN_A)
    return tmp_path


# --------------------------------------------------------------------------- --ks, the package's shape
def test_ks_parsed_in_one_place_with_one_default():
    assert lab.DEFAULT_KS == (1, 5, 10, 20, 100) and lab.cutoffs() == [1, 5, 10, 20, 100]
    assert lab.cutoffs("10, 1,5,5") == lab.cutoffs([10, 1, 5, 5]) == lab.cutoffs((5, 10, 1)) == [1, 5, 10]
    for bad, said in (("1,,5", "an empty item"), ([], "an empty item"), ([0, 5], "integers >= 1"),
                      ("x", "expected comma-separated integers"), ([5.5], "expected comma-separated integers"),
                      ([True], "expected comma-separated integers"), (7, "comma-separated integers >= 1")):
        with pytest.raises(BadInput, match="--ks") as err:
            lab.cutoffs(bad)
        assert said in str(err.value), bad


def test_the_lab_imports_neither_the_project_nor_the_cli():
    for path in (PKG / "lab").glob("*.py"):
        wrong = {m for m in imported_modules(path) if m.startswith(("rag_cli.project", "rag_cli.cli"))}
        assert not wrong, f"{path.name} imports {sorted(wrong)}"
    assert not (PKG / "stages" / "evaluation.py").exists()


# --------------------------------------------------------------------------- score
def test_score_a_run_without_a_project(files):
    nowhere = Project.open(files / "none")
    report = lab.score.run(nowhere, files / "qrels.tsv", run=files / "a.trec", ks="1,2")
    assert isinstance(report, lab.score.ScoreReport) and report.path is None and not (files / "none").exists()
    m = report.to_dict()["metrics"]
    # q1 at rank 1, q2 at rank 2, q3 missing: MRR@2 = (1 + 1/2 + 0)/3, Recall@1 = 1/3
    assert m["mrr@1"] == pytest.approx(1 / 3) and m["mrr@2"] == pytest.approx(0.5)
    assert m["recall@1"] == pytest.approx(1 / 3) and m["recall@2"] == pytest.approx(2 / 3)
    assert report["run_depth"] == 2 and report.warnings() == []
    assert rendered(report) == cli("--qrels", files / "qrels.tsv", "--run", files / "a.trec", "--ks", "1,2",
                                   "-p", files / "none")
    assert "no project folder: the report was not written" in rendered(report)[1]
    out = files / "r.json"
    written = lab.score.run(nowhere, files / "qrels.tsv", run=files / "a.trec", ks=[2, 1], output=out)
    assert written.path == out and json.loads(out.read_text()) == written.to_dict()
    assert rendered(written) == cli("--qrels", files / "qrels.tsv", "--run", files / "a.trec", "--ks", "1,2", "-o", out)
    assert rendered(written, quiet=True) == (rendered(written)[0], "")


def test_score_warnings_are_the_clis(tmp_path):
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 bm25.md 0 2.0 t\nq1 Q0 bm25.md 0 1.0 t\nq1 Q0 rrf.md 1 1.0 t\nq1 Q0 x.md 1 1.0 t\n"
                   "zz9 Q0 bm25.md 1 1.0 t\n", encoding="utf-8")
    qrels = tmp_path / "q.tsv"
    qrels.write_text("q1\tbm25.md\t1\nq7\tbm25.md\t0\n", encoding="utf-8")
    report = lab.score.run(Project.open(tmp_path / "none"), qrels, run=run)
    assert report.warnings() == [
        "the run holds at most 3 documents per query, fewer than k = 100: metrics at a larger k count only those "
        "(P@100 <= 0.03); search deeper or leave out that k (--ks)",
        "1 of 2 qrels queries are not in the run and score 0 (is it the run and qrels of the same query set?): q7",
        "1 qrels query has no relevant document (relevance >= 1) and score 0: q7",
        "1 run query is not in the qrels and ignored: zz9",
        "1 repeated (query, id) row(s) counted once, at their best score; e.g. q1/bm25.md"]
    assert report.messages()[-1] == ("note", "ties: 2 ids in 1 groups of equal score (1 queries) ordered by id, "
                                             "descending, as trec_eval orders them")
    assert rendered(report) == cli("--qrels", qrels, "--run", run, "-p", tmp_path / "none")


def test_score_searches_queries_first(project, tmp_path):
    report = lab.score.run(project, SAMPLE_QRELS, queries=SAMPLE_QUESTIONS, ks="1,3")
    assert report.path == project.root / "eval" / "questions-hybrid-qrels.json"
    assert (project.root / "runs" / "questions-hybrid.parquet").exists()
    assert report["n_queries_truncated"] == 0 and report["max_length"] and "map" in report["metrics"]
    assert json.loads(report.path.read_text()) == report.to_dict()
    assert rendered(report) == cli("--qrels", SAMPLE_QRELS, "--queries", SAMPLE_QUESTIONS, "--ks", "1,3",
                                   "-p", project.root)


def test_the_preamble_checks_before_any_work(files, project, tmp_path):
    nowhere = Project.open(files / "none")
    q, a = files / "qrels.tsv", files / "a.trec"
    for kwargs, said in (({"run": a, "output": a}, "is also --run"), ({"run": a, "output": ""}, "-o is empty"),
                         ({}, "give --run FILE (a run to score) or --queries FILE"),
                         ({"run": a, "queries": a}, "not both"), ({"run": a, "ks": "0"}, "--ks '0'"),
                         ({"run": a, "name": "a/b"}, "--name"), ({"queries": a}, "does not exist")):
        with pytest.raises(BadInput) as err:
            lab.score.run(nowhere, q, **kwargs)
        assert said in str(err.value), kwargs
    assert a.read_text() == RUN_A and not (files / "none").exists()
    foreign = tmp_path / "foreign.tsv"
    foreign.write_text("query-id\tcorpus-id\tscore\nzz1\tdoc-a\t1\n")
    runs = sorted((project.root / "runs").glob("*")) if (project.root / "runs").exists() else []
    for experiment in (lambda: lab.funnel.run(project, foreign, SAMPLE_QUESTIONS),
                       lambda: lab.perturb.run(project, foreign, SAMPLE_QUESTIONS, ["upper"]),
                       lambda: lab.score.run(project, foreign, queries=SAMPLE_QUESTIONS, name="foreign")):
        with pytest.raises(BadInput, match="has a relevant document"):
            experiment()
    assert sorted((project.root / "runs").glob("*")) == runs and not (project.root / "eval" / "foreign.json").exists()
    with pytest.raises(BadInput, match="--perturb 'caps'"):
        lab.perturb.run(project, SAMPLE_QRELS, SAMPLE_QUESTIONS, ["caps"])
    with pytest.raises(BadInput, match="name one or more"):
        lab.perturb.run(project, SAMPLE_QRELS, SAMPLE_QUESTIONS, [])


# --------------------------------------------------------------------------- compare
def test_compare(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    lines, good, bad = [], [], []
    for i in range(30):
        lines.append(f"q{i}\td{i}\t1\n")
        good.append(f"q{i} Q0 d{i} 1 2.0 good\nq{i} Q0 x{i} 2 1.0 good\n")
        bad.append(f"q{i} Q0 x{i} 1 2.0 bad\nq{i} Q0 d{i} 2 {2.0 if i < 3 else 1.0} bad\n")
    qrels.write_text("".join(lines))
    (tmp_path / "good.trec").write_text("".join(good))
    (tmp_path / "bad.trec").write_text("".join(bad))
    runs = [tmp_path / "bad.trec", tmp_path / "good.trec"]
    out = tmp_path / "cmp.json"
    report = lab.compare.run(Project.open(tmp_path / "none"), qrels, runs, ks="1,10", permutations=2000, output=out)
    assert report["baseline"] == "bad.trec" and report["runs"] == ["bad.trec", "good.trec"]
    hit1 = report["comparisons"][0]["metrics"]["hit@1"]
    assert hit1["mean_diff"] == pytest.approx(1.0) and (hit1["wins"], hit1["ties"], hit1["losses"]) == (30, 0, 0)
    assert hit1["p_randomisation"] == pytest.approx(1 / 2001)
    assert report["comparisons"][0]["metrics"]["hit@10"]["p_randomisation"] == 1.0
    assert json.loads(out.read_text()) == report.to_dict()
    stdout, stderr = rendered(report)
    assert "baseline bad vs good: 30 queries; diff = good − bad" in stdout
    assert stderr.splitlines() == [*(f"{r}.trec: the run holds at most 2 documents per query, fewer than k = 10: "
                                     "metrics at a larger k count only those (P@10 <= 0.2); search deeper or leave "
                                     "out that k (--ks)" for r in ("bad", "good")), f"written: {out}"]
    assert (stdout, stderr) == cli("compare", "--qrels", qrels, *runs, "--ks", "1,10", "--permutations", 2000,
                                   "-o", out, "-p", tmp_path / "none")
    assert lab.compare.run(Project.open(tmp_path / "none"), qrels, runs, ks="1", permutations=10).path is None
    with pytest.raises(BadInput, match="two or more run files"):
        lab.compare.run(Project.open(tmp_path / "none"), qrels, runs[:1])


def test_compare_warns_per_run(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1\td1\t1\nq2\td2\t1\n")
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 2.0 a\nq2 Q0 d2 1 2.0 a\n")
    # b shares q1 with a (runs sharing no query are refused: test_compare.py::test_compare_refuses_runs_that_share_no_query)
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 2.0 b\nx1 Q0 d1 1 2.0 b\nx2 Q0 d2 1 2.0 b\n")
    runs = [tmp_path / "a.trec", tmp_path / "b.trec"]
    report = lab.compare.run(Project.open(tmp_path / "none"), qrels, runs, ks=[1], permutations=10,
                             output=tmp_path / "c.json")
    assert report.warnings() == [
        "b.trec: 1 of 2 qrels queries are not in the run and score 0 (is it the run and qrels of the same query "
        "set?): q2",
        "b.trec: 2 run queries are not in the qrels and ignored: x1, x2"]
    assert rendered(report) == cli("compare", "--qrels", qrels, *runs, "--permutations", 10, "--ks", 1,
                                   "-o", tmp_path / "c.json")


# --------------------------------------------------------------------------- answers and the judge
def test_answers(tmp_path):
    proj, gold = answers_project(tmp_path)
    p, answers = Project.open(proj), proj / "answers" / "hand.parquet"
    report = lab.answers.run(p, answers, gold)
    assert report["metrics"] == pytest.approx(EXPECTED)
    assert report.path == proj / "eval" / "answers-hand.json"
    assert json.loads(report.path.read_text()) == report.to_dict()
    assert report.warnings() == ["1 question(s) of the gold file have no answer row: q5",
                                 "1 answer row(s) have no gold answer and were not scored: q4"]
    assert rendered(report) == cli("answers", "--answers", answers, "--gold", gold, "-p", proj)
    with_cut = lab.answers.run(p, answers, gold, unanswerable=answers, name="cut")
    # 1 of the 4 rows refused, in both files; false refusals among the 3 answerable rows (q4 has no gold: #23 item 23)
    assert with_cut["refusal"]["refusal_unanswerable"] == 0.25 and with_cut["refusal"]["false_answer_rate"] == 0.75
    assert with_cut["refusal"]["false_refusal_rate"] == pytest.approx(1 / 3) and with_cut["refusal"]["n_neither"] == 1
    assert rendered(with_cut) == cli("answers", "--answers", answers, "--gold", gold, "--unanswerable", answers,
                                     "--name", "cut", "-p", proj)
    with pytest.raises(BadInput, match="needs --gold FILE"):
        lab.answers.run(p, answers, None)


def test_judge(tmp_path, tiny_bi_encoder, fake):  # noqa: F811 (the fixture)
    proj = judge_project(tmp_path, tiny_bi_encoder, with_context=True)
    p, answers = Project.open(proj), proj / "answers" / "a.parquet"
    replies = [*REPEAT_1[:3], "What is it?", "What is it?", *REPEAT_1[3:], "What is it?", "What is it?"]
    fake.replies = list(replies)
    report = lab.judge.run(p, answers, judge_generator="openai", llm={"base_url": fake.base_url, "model": "judge-1"},
                           judge_repeats=1, judge_temperature=0.5)
    judge = report["judge"]
    assert set(report.to_dict()) == {"answers", "judge"}
    assert judge["model"]["model"] == "judge-1" and judge["model"]["seeds"] == [0]
    assert judge["metrics"]["faithfulness"]["repeats"] == [0.75] and judge["metrics"]["faithfulness"]["sd"] == 0.0
    assert judge["counts"]["n_judged"] == 2 and judge["counts"]["n_refused"] == 1
    assert report.markdown() == to_markdown(json.loads(report.path.read_text()))
    fake.replies = list(replies)
    assert rendered(report) == cli("answers", "--answers", answers, "--judge", "--judge-generator", "openai",
                                   "--judge-base-url", fake.base_url, "--judge-model", "judge-1", "--judge-repeats", 1,
                                   "--judge-temperature", 0.5, "-p", proj)
    shutil.rmtree(proj / "eval")
    with pytest.raises(BadInput, match="--judge-repeats 0"):
        lab.judge.run(p, answers, judge_generator="openai", judge_repeats=0)
    with pytest.raises(BadInput, match="--judge-generator openai or llama-cpp"):
        lab.judge.run(p, answers)
    assert not (proj / "eval").exists()


# --------------------------------------------------------------------------- funnel, perturb
def test_funnel(project):
    report = lab.funnel.run(project, SAMPLE_QRELS, SAMPLE_QUESTIONS, k=2, candidates=3)
    n_judged = len({line.split("\t")[0] for line in SAMPLE_QRELS.read_text().splitlines()[1:] if line.strip()})
    assert report["n_queries"] == n_judged == len(report["per_query"])
    assert sum(report["counts"]["first_missing"].values()) == n_judged
    assert report["layers_measured"] == ["sparse", "dense", "fusion", "evidence", "cited"]
    assert set(report["ann"]) == {"ann_recall@2", "ann_recall@3", "ann_recall@10"}
    assert report["ann"]["ann_recall@10"] == pytest.approx(1.0)
    assert report.path == project.root / "eval" / "funnel-questions.json"
    stdout, _ = rendered(report)
    assert "not in dense candidates" in stdout and "ANN recall (HNSW vs exact)" in stdout
    # the CLI takes k and candidates from rag.toml: the same project with them set
    default = lab.funnel.run(project, SAMPLE_QRELS, SAMPLE_QUESTIONS, name="f")
    assert rendered(default) == cli("funnel", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS,
                                    "--name", "f", "-p", project.root)


def test_perturb(project, tmp_path):
    out = tmp_path / "perturb.json"
    report = lab.perturb.run(project, SAMPLE_QRELS, SAMPLE_QUESTIONS, ["case", "punct"], ks="3", permutations=200,
                             output=out)
    assert list(report["perturbations"]) == ["upper", "lower", "punct"]
    up, low = report["perturbations"]["upper"], report["perturbations"]["lower"]
    assert up["metrics"] == low["metrics"]  # all capitals are folded to lower case before encoding
    for r in report["perturbations"].values():
        for m, loss in r["loss"].items():
            assert loss == pytest.approx(r["metrics"][m] - report["original"][m])
    assert rendered(report) == cli("perturb", "--perturb", "case", "--perturb", "punct", "--queries", SAMPLE_QUESTIONS,
                                   "--qrels", SAMPLE_QRELS, "--ks", 3, "--permutations", 200, "-o", out,
                                   "-p", project.root)
    default = lab.perturb.run(project, SAMPLE_QRELS, SAMPLE_QUESTIONS, ["upper"], permutations=10)
    assert {m.split("@")[1] for m in default["original"] if "@" in m} == {"1", "5", "10", "20", "100"}
    assert default.path == project.root / "eval" / "perturb-questions.json"


def test_perturb_counts_the_queries_asked_and_warns_of_the_missing(project, tmp_path):
    """A queries file holding some of the qrels' queries: the title counts those asked, and a warning lists the
    qrels queries that score 0 because they were not asked (as `rag eval run` warns)."""
    lines = SAMPLE_QUESTIONS.read_text(encoding="utf-8").splitlines()
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    report = lab.perturb.run(project, SAMPLE_QRELS, few, ["upper"], ks="3", permutations=10,
                             output=tmp_path / "p.json")
    n = report["n_queries"]
    assert report["n_queries_asked"] == 2 < n and len(report["qrels_queries_not_asked"]) == n - 2
    [warning] = report.warnings()
    assert f"{n - 2} of {n} qrels queries are not in --queries {few}" in warning
    stdout, _ = rendered(report)
    assert f"perturbed queries (2 asked of {n} judged" in stdout


# --------------------------------------------------------------------------- tuning (on copies: they write rag.toml)
def _copy(project, tmp_path, name) -> Project:
    shutil.copytree(project.root, tmp_path / name)
    return Project.open(tmp_path / name)


def test_tune_fusion(project, tmp_path):
    p, twin = _copy(project, tmp_path, "a.rag"), _copy(project, tmp_path, "b.rag")
    out = tmp_path / "tune.json"
    report = lab.tune_fusion.run(p, SAMPLE_QUESTIONS, SAMPLE_QRELS, test_queries=SAMPLE_QUESTIONS,
                                 test_qrels=SAMPLE_QRELS, permutations=200, output=out)
    assert report["tuned_on"] == "train" and report["metric"] == "ndcg@10" and len(report["grid"]) == 28
    assert report["train"]["best"] == max(g["train"] for g in report["grid"]) >= report["train"]["default"]
    assert report["test"]["best"]["ndcg@10"] == pytest.approx(report["train"]["best"])
    assert p.config.search.fusion == report["best"]["fusion"] and report["written_to"] == str(p.config_path)
    stdout, stderr = cli("tune", "fusion", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS,
                         "--test-queries", SAMPLE_QUESTIONS, "--test-qrels", SAMPLE_QRELS, "--permutations", 200,
                         "-o", out, "-p", twin.root)
    assert rendered(report) == (stdout, stderr.replace(str(twin.root), str(p.root)))
    assert stderr == f"written: {twin.config_path} (search.fusion) and {out}\n"
    with pytest.raises(BadInput, match="go together"):
        lab.tune_fusion.run(p, SAMPLE_QUESTIONS, SAMPLE_QRELS, test_queries=SAMPLE_QUESTIONS)


def _losing_on_test(*args, **kwargs) -> dict:
    """`tune_fusion`'s report of a winner that gains on train and loses on test (#31 item 16's figures)."""
    row = {"baseline": 0.70, "run": 0.692, "mean_diff": -0.008, "p_randomisation_holm": 0.4}
    return {"tuned_on": "train", "metric": "ndcg@10", "candidates": 5, "best": {"fusion": "zscore", "dense_weight": 0.3},
            "grid": [{"fusion": "zscore", "dense_weight": 0.3, "train": 0.718}],
            "train": {"best": 0.718, "default": 0.70, "n_queries": 10},
            "test": {"n_queries": 10, "default": {"ndcg@10": 0.70}, "best": {"ndcg@10": 0.692},
                     "comparison": {"metrics": {"ndcg@10": row}}}}


def test_tune_fusion_writes_nothing_when_the_test_split_disagrees(project, tmp_path, monkeypatch):
    """A winner that loses on the test split is reported, not written to rag.toml, and the warning says
    why and names --force, which writes it."""
    import rag_cli.evaluate.tuning

    monkeypatch.setattr(rag_cli.evaluate.tuning, "tune_fusion", _losing_on_test)
    p = _copy(project, tmp_path, "a.rag")
    before = p.config_path.read_bytes()
    report = lab.tune_fusion.run(p, SAMPLE_QUESTIONS, SAMPLE_QRELS, test_queries=SAMPLE_QUESTIONS,
                                 test_qrels=SAMPLE_QRELS, output=tmp_path / "tune.json")
    assert p.config_path.read_bytes() == before and report["written_to"] is None
    [warning] = report.warnings()
    assert "rag.toml is not changed" in warning and "-0.0080" in warning and "--force" in warning
    forced = lab.tune_fusion.run(p, SAMPLE_QUESTIONS, SAMPLE_QRELS, test_queries=SAMPLE_QUESTIONS,
                                 test_qrels=SAMPLE_QRELS, output=tmp_path / "tune.json", force=True)
    assert Project.open(p.root).config.search.fusion == "zscore" and forced["written_to"] == str(p.config_path)
    assert "--force" in forced.warnings()[0]


def test_tune_refusal(project, tmp_path):
    p, twin = _copy(project, tmp_path, "a.rag"), _copy(project, tmp_path, "b.rag")
    lines = [json.dumps({"_id": q, "text": t}, ensure_ascii=False) for q, t in QUESTIONS]
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")  # "answerable"
    (tmp_path / "u.jsonl").write_text("\n".join(lines[3:]) + "\n", encoding="utf-8")  # "unanswerable"
    for n in ("a", "u"):
        p.ask_queries(tmp_path / f"{n}.jsonl", gate="off")
        shutil.copy(p.answers_path(n), tmp_path / f"{n}.parquet")
    a, u = tmp_path / "a.parquet", tmp_path / "u.parquet"
    out = tmp_path / "refusal.json"
    report = lab.tune_refusal.run(p, a, u, max_false_refusal=0.34, test_answers=a, test_unanswerable=u, output=out)
    assert report["target_met"] and report["train"]["tuned"]["false_refusal_rate"] <= 0.34
    assert report["train"]["tuned"] == report["test"]["tuned"]
    assert {k: getattr(p.config.ask, k) for k in report["best"]} == report["best"]
    stdout, stderr = cli("tune", "refusal", "--answers", a, "--unanswerable", u, "--max-false-refusal", 0.34,
                         "--test-answers", a, "--test-unanswerable", u, "-o", out, "-p", twin.root)
    assert rendered(report) == (stdout, stderr.replace(str(twin.root), str(p.root)))
    with pytest.raises(BadInput, match="--max-false-refusal"):
        lab.tune_refusal.run(p, a, u, max_false_refusal=2)


def test_tune_refusal_warns_on_few_questions(project, tmp_path):
    """The learned refusal fitted on fewer than 10 train questions per weight warns, naming the counts and,
    without a test split, --test-answers; --no-learn (learn=False) fits nothing and says nothing."""
    p = _copy(project, tmp_path, "a.rag")
    lines = [json.dumps({"_id": q, "text": t}, ensure_ascii=False) for q, t in QUESTIONS]
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    (tmp_path / "u.jsonl").write_text("\n".join(lines[3:]) + "\n", encoding="utf-8")
    for n in ("a", "u"):
        p.ask_queries(tmp_path / f"{n}.jsonl", gate="off")
        shutil.copy(p.answers_path(n), tmp_path / f"{n}.parquet")
    a, u = tmp_path / "a.parquet", tmp_path / "u.parquet"
    report = lab.tune_refusal.run(p, a, u, max_false_refusal=0.34, output=tmp_path / "r.json")
    [warning] = report.warnings()
    assert f"fits 9 weights on {len(QUESTIONS)} train questions, fewer than 90" in warning
    assert "--test-answers" in warning and "--no-learn" in warning
    tested = lab.tune_refusal.run(p, a, u, max_false_refusal=0.34, test_answers=a, test_unanswerable=u,
                                  output=tmp_path / "r.json")
    assert "--test-answers" not in tested.warnings()[0]
    assert lab.tune_refusal.run(p, a, u, max_false_refusal=0.34, learn=False, output=tmp_path / "r.json").warnings() == []


# --------------------------------------------------------------------------- make-unanswerable
def test_unanswerable(tmp_path):
    corpus, queries, qrels = _tiny_dataset(tmp_path / "data")
    out = tmp_path / "x"
    report = lab.unanswerable.run(3, corpus=corpus, queries=queries, qrels=qrels, output=out, seed=1)
    assert report.path == out / "removed.json" and json.loads(report.path.read_text()) == report.to_dict()
    assert report["n_questions"] >= 3 and report["n_docs_kept"] >= 1
    assert len((out / "corpus.jsonl").read_text().splitlines()) == report["n_docs_kept"]
    assert rendered(report) == cli("make-unanswerable", 3, "--corpus", corpus, "--queries", queries,
                                   "--qrels", qrels, "-o", out, "--seed", 1)
    with pytest.raises(BadInput, match="at most 3 question"):
        lab.unanswerable.run(4, corpus=corpus, queries=queries, qrels=qrels, output=tmp_path / "y")
    with pytest.raises(BadInput, match="no Markdown"):
        report.write_summaries(md=tmp_path / "r.md")


# --------------------------------------------------------------------------- Report
def test_report_save_markdown_and_summaries(files):
    report = lab.score.run(Project.open(files / "none"), files / "qrels.tsv", run=files / "a.trec", ks="1,2")
    assert report.as_tuple() == (report.to_dict(), None) and report["level"] == "doc" and "metrics" in report
    with pytest.raises(ValueError):
        report.save()
    path = report.save(files / "out" / "a.json")
    assert path == report.path == files / "out" / "a.json" and json.loads(path.read_text()) == report.to_dict()
    assert report.markdown() == to_markdown(report.to_dict())
    assert "| mrr | 0.3333 | 0.5000 |" in report.markdown()
    written = report.write_summaries(md=files / "a.md")
    assert written == [files / "a.md"] and (files / "a.md").read_text() == report.markdown()
    pytest.importorskip("matplotlib")
    assert report.write_summaries(plots=files / "plots") == [files / "plots" / "a-metrics.png"]


EVIL = "\x1b[31mq2\x1b]0;PWNED\x07"


def test_ids_from_user_files_are_plain_text(tmp_path):
    (tmp_path / "evil.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{EVIL}\td2\t1\n")
    (tmp_path / f"{EVIL}.trec").write_text(f"q1 Q0 d1 1 3.0 a\n{EVIL}x Q0 d2 1 3.0 a\n")
    report = lab.score.run(Project.open(tmp_path / "none"), tmp_path / "evil.tsv", run=tmp_path / f"{EVIL}.trec")
    assert "1 run query is not in the qrels and ignored: q2x" in report.warnings()
    stdout, stderr = rendered(report)
    assert "q2.trec: 2 queries (doc level)" in stdout
    for text in (stdout, stderr, *report.warnings()):
        assert "\x1b" not in text and "\x07" not in text and "PWNED" not in text
    assert (stdout, stderr) == cli("--qrels", tmp_path / "evil.tsv", "--run", tmp_path / f"{EVIL}.trec",
                                   "-p", tmp_path / "none")
