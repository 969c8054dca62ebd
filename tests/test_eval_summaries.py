"""`rag eval --md FILE --plots DIR`: the Markdown summary and the PNG plots
of a metric report and of a comparison (hand-made TREC runs)."""

from __future__ import annotations

import struct

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.evaluate.markdown import to_markdown
from rag_cli.evaluate.plots import plot_report

pytest.importorskip("matplotlib")

QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n"
RUN_A = "q1 Q0 d1 1 3.0 a\nq1 Q0 d9 2 2.0 a\nq2 Q0 d9 1 3.0 a\nq2 Q0 d2 2 2.0 a\nq3 Q0 d8 1 1.0 a\n"
RUN_B = "q1 Q0 d1 1 3.0 b\nq2 Q0 d2 1 3.0 b\nq3 Q0 d8 1 2.0 b\nq3 Q0 d3 2 1.0 b\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def files(tmp_path):
    (tmp_path / "qrels.tsv").write_text(QRELS)
    (tmp_path / "a.trec").write_text(RUN_A)
    (tmp_path / "b.trec").write_text(RUN_B)
    return tmp_path


def test_metric_report_md_and_plot(files):
    md, plots = files / "sum.md", files / "plots"
    res = CliRunner().invoke(app, ["eval", "--run", str(files / "a.trec"), "--qrels", str(files / "qrels.tsv"),
                                   "--ks", "1,2", "-o", str(files / "a.json"), "--md", str(md),
                                   "--plots", str(plots)])
    assert res.exit_code == 0, res.output
    text = md.read_text()
    # q1 at rank 1, q2 at rank 2, q3 missing: MRR@2 = (1 + 1/2 + 0)/3, Recall@1 = 1/3
    assert "| metric | @1 | @2 |" in text
    assert "| mrr | 0.3333 | 0.5000 |" in text and "| recall | 0.3333 | 0.6667 |" in text
    png = plots / "a-metrics.png"
    assert _png_size(png)[0] > 400


def test_comparison_md_and_plot(files):
    md, plots = files / "cmp.md", files / "plots"
    res = CliRunner().invoke(app, ["eval", "compare", "--qrels", str(files / "qrels.tsv"), str(files / "a.trec"),
                                   str(files / "b.trec"), "--ks", "2", "--permutations", "100",
                                   "-o", str(files / "cmp.json"), "--md", str(md), "--plots", str(plots)])
    assert res.exit_code == 0, res.output
    text = md.read_text()
    assert "## baseline a.trec vs b.trec" in text and "| ndcg@2 |" in text  # baseline first, as the columns
    assert "1/2/0" in text  # ndcg@2: q2 and q3 better, q1 tied
    assert _png_size(plots / "cmp-diff-b.png")[0] > 400


def test_markdown_of_other_reports():
    funnel = {"n_queries": 4, "counts": {"not_in_sparse": 1, "not_in_dense": 2,
                                         "first_missing": {"retrieval": 1, "fusion": 0, "none": 3}},
              "ann": {"ann_recall@10": 0.99}}
    text = to_markdown(funnel)
    assert "| first lost: retrieval | 1 | 25.0% |" in text and "| ann_recall@10 | 0.9900 |" in text
    answers = {"answers": "a.parquet", "counts": {"n_questions": 2, "n_refused": 1},
               "metrics": {"f1": 0.5, "latency_p50_ms": 12.34, "has_answer": None}}
    text = to_markdown(answers)
    assert "| f1 | 0.5000 |" in text and "| latency_p50_ms | 12.3 |" in text and "| has_answer | n/a |" in text


def test_funnel_plot_leaves_out_layers_not_measured(tmp_path):
    report = {"n_queries": 300, "layers_measured": ["sparse", "dense", "fusion", "evidence", "cited"],
              "counts": {"not_in_sparse": 20, "not_in_dense": 15,
                         "first_missing": {"retrieval": 8, "fusion": 12, "rerank": 0, "evidence": 30,
                                           "citation": 40, "none": 210}},
              "ann": {"ann_recall@10": 0.99}}
    import matplotlib.pyplot as plt

    calls = []
    real = plt.Axes.barh
    plt.Axes.barh = lambda self, labels, values, **kw: calls.append(list(labels)) or real(self, labels, values, **kw)
    try:
        (png,) = plot_report(report, tmp_path, "f")
    finally:
        plt.Axes.barh = real
    assert png.name == "f-funnel.png" and _png_size(png)[0] > 400
    assert calls == [["reached the last layer", "lost in citation", "lost in evidence", "lost in fusion",
                      "in neither candidate list"]]


def test_perturb_plot_shows_one_cutoff_and_warns_nothing(tmp_path):
    import warnings

    from rag_cli.evaluate.plots import _perturb_metrics

    names = [f"{m}@{k}" for m in ("recall", "hit", "mrr", "ndcg", "precision", "map") for k in (1, 5, 10, 20, 100)]
    names += ["map", "rprec"]
    shown = _perturb_metrics(names)
    assert shown == ["recall@10", "hit@10", "mrr@10", "ndcg@10", "precision@10", "map@10", "map", "rprec"]
    assert _perturb_metrics(["ndcg@3", "ndcg@5", "ndcg@20", "map"]) == ["ndcg@5", "map"]
    assert _perturb_metrics(["ndcg@20", "ndcg@50"]) == ["ndcg@20"]
    loss = {m: -0.01 for m in names}
    report = {"original": {m: 0.5 for m in names}, "n_queries": 30, "mode": "hybrid",
              "perturbations": {k: {"loss": loss} for k in ("upper", "lower", "typo", "punct")}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (png,) = plot_report(report, tmp_path, "p")
    assert [str(w.message) for w in caught] == []
    assert png.name == "p-perturb.png" and _png_size(png)[0] > 400
