"""`rag eval --compare`: Holm, the randomisation test, the t-test, win/tie/loss,
and the CLI on two TREC runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.evaluate.compare import compare_reports, holm, randomisation_p, t_test_p
from rag_cli.evaluate.report import evaluate_run


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.9, 0.8]) == [1.0, 1.0]
    assert holm([]) == []


def test_randomisation_matches_the_exact_distribution():
    # 3 equal differences: of the 8 sign patterns, 2 reach |mean| >= 1
    assert randomisation_p(np.array([1.0, 1.0, 1.0]), 40000, seed=1) == pytest.approx(0.25, abs=0.01)
    # [2, 1, 1]: |mean| = 4/3 only when all signs agree (2/8); [2,-1,-1] etc. give 0
    assert randomisation_p(np.array([2.0, 1.0, 1.0]), 40000, seed=2) == pytest.approx(0.25, abs=0.01)
    assert randomisation_p(np.zeros(5)) == 1.0
    # deterministic for a seed
    d = np.random.default_rng(0).normal(0.1, 1, 50)
    assert randomisation_p(d, 2000, 7) == randomisation_p(d, 2000, 7)


def test_t_test_equals_scipy_ttest_rel():
    from scipy import stats

    rng = np.random.default_rng(3)
    a, b = rng.random(40), rng.random(40)
    assert t_test_p(b - a) == pytest.approx(stats.ttest_rel(b, a).pvalue, rel=1e-12)
    assert t_test_p(np.zeros(4)) == 1.0


def test_compare_reports_counts_and_shapes():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    base = evaluate_run({"q1": {"a": 2.0, "x": 1.0}, "q2": {"x": 2.0, "b": 1.0}, "q3": {"x": 1.0}}, qrels, ks=(1,),
                        metrics=("hit",), whole_run_metrics=())
    run = evaluate_run({"q1": {"a": 2.0}, "q2": {"b": 2.0}, "q3": {"c": 1.0}}, qrels, ks=(1,),
                       metrics=("hit",), whole_run_metrics=())
    out = compare_reports([base, run], ["base", "new"], permutations=1000)
    row = out["comparisons"][0]["metrics"]["hit@1"]
    assert (row["baseline"], row["run"], row["mean_diff"]) == pytest.approx((1 / 3, 1.0, 2 / 3))
    assert (row["wins"], row["ties"], row["losses"]) == (2, 1, 0)
    assert row["p_randomisation_holm"] == row["p_randomisation"]  # one metric: Holm changes nothing
    assert out["comparisons"][0]["per_query"] == {"q1": {"hit@1": 0.0}, "q2": {"hit@1": 1.0}, "q3": {"hit@1": 1.0}}
    with pytest.raises(ValueError):
        compare_reports([base], ["base"])


def test_cli_compare(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    good, bad = [], []
    lines = []
    for i in range(30):
        lines.append(f"q{i}\td{i}\t1\n")
        good.append(f"q{i} Q0 d{i} 1 2.0 good\nq{i} Q0 x{i} 2 1.0 good\n")
        # the bad run finds the relevant document at rank 2 for most queries
        bad.append(f"q{i} Q0 x{i} 1 2.0 bad\nq{i} Q0 d{i} 2 {2.0 if i < 3 else 1.0} bad\n")
    qrels.write_text("".join(lines))
    (tmp_path / "good.trec").write_text("".join(good))
    (tmp_path / "bad.trec").write_text("".join(bad))
    res = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(qrels), str(tmp_path / "bad.trec"),
                                   str(tmp_path / "good.trec"), "--ks", "1,10", "--permutations", "2000",
                                   "-o", str(tmp_path / "cmp.json"), "-p", str(tmp_path / "none")])
    assert res.exit_code == 0, res.stderr
    report = json.loads((tmp_path / "cmp.json").read_text())
    assert report["baseline"] == "bad.trec" and report["runs"] == ["bad.trec", "good.trec"]
    hit1 = report["comparisons"][0]["metrics"]["hit@1"]
    # bad.trec: ties at 2.0 for q0..q2 are broken by id descending: x > d, so hit@1 = 0 everywhere
    assert hit1["mean_diff"] == pytest.approx(1.0) and (hit1["wins"], hit1["ties"], hit1["losses"]) == (30, 0, 0)
    assert hit1["p_randomisation"] == pytest.approx(1 / 2001)
    assert report["comparisons"][0]["metrics"]["hit@10"]["p_randomisation"] == 1.0
    # the title names the runs in the order of the columns (baseline first) and the direction of diff
    out = " ".join(res.stdout.split())
    assert "baseline bad vs good: 30 queries; diff = good − bad" in out
    header = next(line for line in res.stdout.splitlines() if "metric" in line)
    assert header.index("bad") < header.index("good") < header.index("diff")
    row = next(line for line in res.stdout.splitlines() if "hit@1" in line)
    assert row.split()[1:6] == ["hit@1", "│", "0.0000", "│", "1.0000"]
    one = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(qrels), str(tmp_path / "bad.trec")])
    assert one.exit_code == 2 and "two or more run files" in one.stderr


def _two_runs(tmp_path, second_queries=range(30)):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("".join(f"q{i}\td{i}\t1\n" for i in range(30)))
    (tmp_path / "a.trec").write_text("".join(f"q{i} Q0 d{i} 1 2.0 a\n" for i in range(15)))
    (tmp_path / "b.trec").write_text("".join(f"q{i} Q0 x{i} 1 2.0 b\nq{i} Q0 d{i} 2 1.0 b\n"
                                             for i in second_queries))
    return qrels, tmp_path / "a.trec", tmp_path / "b.trec"


def test_compare_refuses_runs_that_share_no_query(tmp_path):
    """a answers q0-q14, b q15-q29: every paired difference would be a score against a missing run's 0, so
    exit 2 naming both runs, nothing written (#31 item 14)."""
    qrels, a, b = _two_runs(tmp_path, range(15, 30))
    res = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(qrels), str(a), str(b),
                                   "-o", str(tmp_path / "cmp.json"), "-p", str(tmp_path / "none")])
    assert res.exit_code == 2, (res.stdout, res.stderr)
    message = " ".join(res.stderr.split())
    assert "share no query" in message and "b.trec" in "".join(res.stderr.split())
    assert not (tmp_path / "cmp.json").exists()


def test_compare_metrics_restricts_the_comparison_and_holm(tmp_path):
    qrels, a, b = _two_runs(tmp_path)
    out = tmp_path / "cmp.json"
    res = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(qrels), str(a), str(b), "--metrics",
                                   "ndcg@10,recall@100", "-o", str(out), "-p", str(tmp_path / "none")])
    assert res.exit_code == 0, res.stderr
    rows = json.loads(out.read_text())["comparisons"][0]["metrics"]
    assert list(rows) == ["ndcg@10", "recall@100"]
    p = [rows[m]["p_t_test"] for m in rows]
    assert [rows[m]["p_t_test_holm"] for m in rows] == pytest.approx(holm(p))  # across these two only
    bad = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(qrels), str(a), str(b), "--metrics",
                                   "ndcg@7", "-p", str(tmp_path / "none")])
    assert bad.exit_code == 2 and "--metrics" in bad.stderr and "ndcg@7" in bad.stderr


@pytest.mark.parametrize("args", [["--md", "--plots"], ["-o", "--md", "x.md"], ["--plots", "--json"]])
def test_a_report_path_that_looks_like_a_flag_is_refused(tmp_path, args, monkeypatch):
    """`rag eval --md --plots` wrote a Markdown file named `--plots` (#31 item 15)."""
    monkeypatch.chdir(tmp_path)
    qrels, a, b = _two_runs(tmp_path)
    res = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(qrels), str(a), str(b), *args,
                                   "-p", str(tmp_path / "none")])
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert "looks like a flag" in " ".join(res.stderr.split())
    assert not list(tmp_path.glob("--*"))
