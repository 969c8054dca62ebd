"""Evaluation: readers on real files, metrics against pytrec_eval, MaxP, reports."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rag_cli.errors import BadInput
from rag_cli.evaluate.datasets import read_qrels, read_queries
from rag_cli.evaluate.metrics import (
    hit_at_k,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    ranked,
    recall_at_k,
)
from rag_cli.evaluate.report import doc_level_run, evaluate_rows, evaluate_run, judged_level, tie_counts
from rag_cli.store.runs import RunRow

KS = (1, 3, 5, 10, 20)


# ---------------------------------------------------------------- readers


def test_read_scifact(scifact_dir):
    queries = read_queries(scifact_dir / "queries.jsonl")
    assert len(queries) == 300
    assert queries[0] == ("1", "0-dimensional biomaterials show inductive properties.")
    assert all(isinstance(q, str) and isinstance(t, str) and t for q, t in queries)
    qrels = read_qrels(scifact_dir / "qrels/test.tsv")
    assert len(qrels) == 300
    assert sum(len(d) for d in qrels.values()) == 339
    assert all(isinstance(d, str) for docs in qrels.values() for d in docs)
    assert set(qrels) == {q for q, _ in queries}
    assert len(read_queries(scifact_dir / "queries-train.jsonl")) == 809
    assert sum(len(d) for d in read_qrels(scifact_dir / "qrels/train.tsv").values()) == 919


def test_read_cmrc(cmrc_dir):
    queries = read_queries(cmrc_dir / "queries.jsonl")
    assert len(queries) == 1000
    assert queries[0] == ("TRIAL_800_QUERY_0", "生命数耗完即算为什么？")
    qrels = read_qrels(cmrc_dir / "qrels/test.tsv")
    assert len(qrels) == 1000 and sum(len(d) for d in qrels.values()) == 1000
    assert qrels["TRIAL_800_QUERY_0"] == {"TRIAL_800": 1}


def test_queries_formats(tmp_path):
    beir = tmp_path / "q.jsonl"
    beir.write_text('{"_id": 7, "text": " seven "}\n\n{"_id": "x", "text": "ex", "metadata": {}}\n', encoding="utf-8")
    assert read_queries(beir) == [("7", "seven"), ("x", "ex")]
    ours = tmp_path / "ours.jsonl"
    ours.write_text('{"query_id": "a", "query": "什么是BM25？"}\n', encoding="utf-8")
    assert read_queries(ours) == [("a", "什么是BM25？")]
    tsv = tmp_path / "q.tsv"
    tsv.write_text("query-id\ttext\r\n1\tfirst\tpart\r\n2\tsecond\r\n", encoding="utf-8")
    assert read_queries(tsv) == [("1", "first\tpart"), ("2", "second")]
    noheader = tmp_path / "n.tsv"
    noheader.write_text("\ufeff1\tone\n", encoding="utf-8")
    assert read_queries(noheader) == [("1", "one")]


@pytest.mark.parametrize("content, line", [
    ("query-id\tcorpus-id\tscore\nTRIAL_109\tTRIAL_109_d\t1\n", 1),  # the BEIR qrels header
    ("q1\tdoc1\t1\nq2\tdoc2\t0\n", 1),  # BEIR rows without a header
    ("\n301\t0\tFBIS3-10082\t1\n", 2),  # TREC 4 columns, tab-separated
])
def test_a_qrels_file_is_not_a_query_file(tmp_path, content, line):
    path = tmp_path / "test.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        read_queries(path)
    assert f"{path}:{line}:" in str(err.value) and "looks like a qrels file" in str(err.value)


def test_a_qrels_file_as_queries_on_the_cli(cmrc_dir, tmp_path):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    qrels = str(cmrc_dir / "qrels" / "test.tsv")
    res = CliRunner().invoke(app, ["eval", "make-unanswerable", "1", "--corpus", str(cmrc_dir / "corpus.jsonl"),
                                   "--queries", qrels, "--qrels", qrels, "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "looks like a qrels file" in " ".join(res.stderr.split())
    assert not (tmp_path / "out").exists()


def test_qrels_formats(tmp_path):
    beir = tmp_path / "b.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\n1\t31715818\t1\n1\t2\t2\n2\tmy notes.md\t0\n", encoding="utf-8")
    assert read_qrels(beir) == {"1": {"31715818": 1, "2": 2}, "2": {"my notes.md": 0}}
    trec = tmp_path / "t.txt"
    trec.write_text("301 0 FBIS3-10082 1\n301  0   FBIS3-10169\t0\n302 Q0 d1 2.0\n", encoding="utf-8")
    assert read_qrels(trec) == {"301": {"FBIS3-10082": 1, "FBIS3-10169": 0}, "302": {"d1": 2}}
    # the malformed SciFact source rows: a TREC iteration column, space-separated
    mixed = tmp_path / "m.tsv"
    mixed.write_text("1 0 31715818 1\n3 0 14717500 1\n", encoding="utf-8")
    assert read_qrels(mixed) == {"1": {"31715818": 1}, "3": {"14717500": 1}}


def test_identical_repeated_qrels_rows_are_warned_like_run_duplicates(tmp_path):
    """#23 item 17: a (query, document) pair judged twice alike was dropped without a word."""
    from typer.testing import CliRunner

    from rag_cli.cli import app

    qrels = tmp_path / "q.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\ta.md\t1\nq1\tb.md\t0\nq1\ta.md\t1\nq2\tb.md\t2\n"
                     "q2\tb.md\t2\nq2\tb.md\t2\n", encoding="utf-8")
    judged = read_qrels(qrels)
    assert judged == {"q1": {"a.md": 1, "b.md": 0}, "q2": {"b.md": 2}}
    assert judged.repeated == {"n": 3, "examples": [["q1", "a.md", 2, 4], ["q2", "b.md", 5, 6], ["q2", "b.md", 5, 7]]}
    (tmp_path / "once.tsv").write_text("q1\ta.md\t1\n", encoding="utf-8")
    assert read_qrels(tmp_path / "once.tsv").repeated == {"n": 0, "examples": []}
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 a.md 1 2.0 t\nq2 Q0 b.md 1 1.0 t\n", encoding="utf-8")
    warning = ("the qrels judge 3 (query, document) pair(s) again with the same relevance; each counts once: "
               "q1/a.md (lines 2 and 4), q2/b.md (lines 5 and 6), q2/b.md (lines 5 and 7)")
    res = CliRunner().invoke(app, ["eval", "--qrels", str(qrels), "--run", str(run), "--ks", "1",
                                   "-o", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    assert warning in " ".join(res.stderr.split())
    assert json.loads((tmp_path / "e.json").read_text())["qrels_duplicates"]["n"] == 3
    res = CliRunner().invoke(app, ["eval", "compare", str(run), str(run), "--qrels", str(qrels), "--ks", "1",
                                   "--permutations", "10", "-o", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    assert " ".join(res.stderr.split()).count(warning) == 1  # once, not once per run


@pytest.mark.parametrize(
    "content, line, needle",
    [
        ('{"_id": "1", "text": "a"}\n{"id": "2", "body": "b"}\n', 2, "'_id' and 'text'"),
        ('{"_id": "1", "text": "a"}\nnot json\n', 2, "not valid JSON"),
        ('{"_id": "1", "text": "a"}\n{"_id": "1", "text": "b"}\n', 2, "repeats line 1"),
        ('{"_id": "1", "text": "  "}\n', 1, "empty text"),
        ("1\tone\n2 two\n", 2, "id<TAB>text"),
    ],
)
def test_queries_bad_rows_name_the_line(tmp_path, content, line, needle):
    path = tmp_path / "queries.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        read_queries(path)
    msg = str(err.value)
    assert f"{path}:{line}:" in msg and needle in msg


@pytest.mark.parametrize(
    "content, line, needle",
    [
        ("query-id\tcorpus-id\tscore\n1\t2\t1\n1\t3\n", 3, "2 field(s)"),
        ("q1 d1 1\nq1 d2 yes\n", 2, "must be an integer"),
        ("q1 0 d1 1\nq1 0 d1 1 extra\n", 2, "'qid iter docid rel'"),
        ("q1\td1\t1\nq1\td1\t0\n", 2, "on line 1"),
        ("foo\tbar\tbaz\n", 1, "must be an integer"),
    ],
)
def test_qrels_bad_rows_name_the_line(tmp_path, content, line, needle):
    path = tmp_path / "qrels.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        read_qrels(path)
    msg = str(err.value)
    assert f"{path}:{line}:" in msg and needle in msg


def test_empty_files_are_bad_input(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(BadInput, match="no queries"):
        read_queries(empty)
    with pytest.raises(BadInput, match="no relevance judgements"):
        read_qrels(empty)
    header_only = tmp_path / "h.tsv"
    header_only.write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    with pytest.raises(BadInput, match="no relevance judgements"):
        read_qrels(header_only)
    with pytest.raises(BadInput, match="no such file"):
        read_qrels(tmp_path / "missing.tsv")


# ---------------------------------------------------------------- metrics by hand

QRELS = {"q": {"a": 3, "b": 2, "c": 0, "e": 1}}
RUN = {"q": {"x": 0.9, "b": 0.8, "c": 0.7, "a": 0.6, "y": 0.5}}


def test_hand_computed_examples():
    # ranking: x, b, c, a, y — relevant: b (2), a (3); e (1) never retrieved
    assert recall_at_k(RUN, QRELS, 1) == {"q": 0.0}
    assert recall_at_k(RUN, QRELS, 2) == {"q": pytest.approx(1 / 3)}
    assert recall_at_k(RUN, QRELS, 5) == {"q": pytest.approx(2 / 3)}
    assert hit_at_k(RUN, QRELS, 1) == {"q": 0.0}
    assert hit_at_k(RUN, QRELS, 2) == {"q": 1.0}
    assert mrr_at_k(RUN, QRELS, 1) == {"q": 0.0}
    assert mrr_at_k(RUN, QRELS, 10) == {"q": 0.5}
    assert precision_at_k(RUN, QRELS, 4) == {"q": 0.5}
    assert precision_at_k(RUN, QRELS, 10) == {"q": 0.2}
    dcg = 2 / math.log2(3) + 3 / math.log2(5)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(RUN, QRELS, 5)["q"] == pytest.approx(dcg / idcg, abs=1e-12)
    # cut at 2: ideal is cut too
    assert ndcg_at_k(RUN, QRELS, 2)["q"] == pytest.approx((2 / math.log2(3)) / (3 + 2 / math.log2(3)), abs=1e-12)
    perfect = {"q": {"a": 3.0, "b": 2.0, "e": 1.0}}
    assert ndcg_at_k(perfect, QRELS, 3)["q"] == pytest.approx(1.0)


def test_ties_break_by_doc_id_descending():
    assert ranked({"A": 1.0, "a": 1.0, "b": 1.0, "B": 1.0, "10": 1.0, "9": 1.0, "z": 2.0}) == [
        "z", "b", "a", "B", "A", "9", "10"
    ]
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}
    assert mrr_at_k(run, qrels, 10) == {"q": pytest.approx(1 / 3)}
    assert hit_at_k(run, qrels, 2) == {"q": 0.0}


def test_query_coverage_rules():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    run = {"q1": {"a": 1.0}, "q3": {"c": 1.0}, "extra": {"z": 1.0}}
    for fn in (recall_at_k, hit_at_k, mrr_at_k, ndcg_at_k, precision_at_k):
        values = fn(run, qrels, 10)
        assert set(values) == {"q1", "q2", "q3"}  # extra ignored
        assert values["q2"] == 0.0 and values["q3"] == 0.0
    report = evaluate_run(run, qrels, ks=(10,))
    assert report["n_queries"] == 3
    assert report["n_queries_missing_from_run"] == 1
    assert report["n_queries_without_relevant"] == 1
    assert report["n_run_queries_not_in_qrels"] == 1
    assert report["metrics"]["recall@10"] == pytest.approx(1 / 3)
    json.dumps(report)


def test_bad_k():
    with pytest.raises(ValueError):
        recall_at_k(RUN, QRELS, 0)


# ---------------------------------------------------------------- against pytrec_eval


def _random_collection(seed: int, n_queries: int = 1000):
    rng = random.Random(seed)
    run, qrels = {}, {}
    for i in range(n_queries):
        qid = f"q{i}"
        pool = [f"d{j}" for j in range(rng.randint(1, 60))]
        judged = rng.sample(pool, rng.randint(1, min(len(pool), 12)))
        # graded relevance, including 0 and, rarely, negative judgements
        qrels[qid] = {d: rng.choice([-1, 0, 0, 1, 1, 1, 2, 3]) for d in judged}
        if rng.random() < 0.05:
            qrels[qid][f"unretrieved{i}"] = 1  # relevant but never retrieved
        if rng.random() < 0.05:
            continue  # query missing from the run
        retrieved = rng.sample(pool, rng.randint(1, len(pool)))
        # coarse scores so that ties are frequent, sometimes all equal
        levels = 1 if rng.random() < 0.05 else rng.randint(2, 8)
        run[qid] = {d: float(rng.randint(0, levels - 1)) / 2 - 1.0 for d in retrieved}
    run["not_judged"] = {"d1": 1.0}
    return run, qrels


@pytest.mark.parametrize("seed", [0, 1])
def test_metrics_equal_pytrec_eval(seed, pytrec_eval):
    run, qrels = _random_collection(seed)
    cut = ",".join(map(str, KS))
    measures = {f"ndcg_cut.{cut}", f"recall.{cut}", f"success.{cut}", f"P.{cut}", "recip_rank"}
    ref = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ours = {
        (name, k): fn(run, qrels, k)
        for k in KS
        for name, fn in (("ndcg_cut", ndcg_at_k), ("recall", recall_at_k), ("success", hit_at_k), ("P", precision_at_k))
    }
    mrr10 = mrr_at_k(run, qrels, 10)
    checked = 0
    for qid in qrels:
        if qid not in ref:  # pytrec_eval leaves out queries absent from the run
            for values in ours.values():
                assert values[qid] == 0.0
            assert mrr10[qid] == 0.0
            continue
        for (name, k), values in ours.items():
            assert values[qid] == pytest.approx(ref[qid][f"{name}_{k}"], abs=1e-6), (qid, name, k)
        checked += 1
    assert checked > 900
    # MRR@k two ways: recip_rank on the run cut to its top k (cut by pytrec_eval's
    # own tie-breaking: rank r is the first relevant when recip_rank == 1/r)
    for k in KS:
        ours_mrr = mrr_at_k(run, qrels, k)
        for qid in ref:
            rr = ref[qid]["recip_rank"]
            expected = rr if rr > 0 and round(1 / rr) <= k else 0.0
            assert ours_mrr[qid] == pytest.approx(expected, abs=1e-6), (qid, k)
        cut_run = {q: {d: docs[d] for d in ranked(docs, k)} for q, docs in run.items()}
        ref_cut = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
        for qid in ref_cut:
            assert ours_mrr[qid] == pytest.approx(ref_cut[qid]["recip_rank"], abs=1e-6), (qid, k)


def test_evaluate_run_means_equal_pytrec_eval_with_missing_as_zero(pytrec_eval):
    run, qrels = _random_collection(7, 300)
    report = evaluate_run(run, qrels, ks=(10,), metrics=("ndcg", "recall"))
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10"}).evaluate(run)
    for ours, theirs in (("ndcg@10", "ndcg_cut_10"), ("recall@10", "recall_10")):
        expected = sum(ref.get(q, {}).get(theirs, 0.0) for q in qrels) / len(qrels)
        assert report["metrics"][ours] == pytest.approx(expected, abs=1e-9)
    assert report["n_queries"] == len(qrels)


# ---------------------------------------------------------------- MaxP and reports


def _row(qid, rank, chunk, score, stage="hybrid"):
    return RunRow(qid, "question", rank, chunk, chunk.rsplit("#", 1)[0], score, stage)


def test_doc_level_run_is_maxp_by_score_and_ignores_rank():
    # Changed with trec_eval semantics: a document scores its best chunk's
    # score (was 1 / best rank), and equal scores are ordered by doc id
    # descending, as trec_eval orders them; the rank column is not used.
    rows = [
        _row("q", 1, "b.md#3", 0.5),
        _row("q", 2, "a.md#0", 0.5),
        _row("q", 3, "b.md#0", 0.4),
        _row("q", 4, "c.md#1", 0.5),
        _row("q", 5, "d.md#1", 0.7),  # ranks disagree with scores: scores win
        _row("r", 1, "a.md#2", 9.0),
    ]
    run = doc_level_run(rows)
    assert run == {"q": {"b.md": 0.5, "a.md": 0.5, "c.md": 0.5, "d.md": 0.7}, "r": {"a.md": 9.0}}
    assert ranked(run["q"]) == ["d.md", "c.md", "b.md", "a.md"]
    assert tie_counts(run) == {"n_queries": 1, "n_ids": 3, "n_groups": 1}


def test_evaluate_rows_reports_duplicates_ties_and_unmatched_queries():
    rows = [_row("q", 1, "a.md#0", 1.0), _row("q", 1, "a.md#0", 1.0), _row("q", 1, "b.md#0", 1.0),
            _row("extra", 1, "a.md#0", 1.0)]
    report = evaluate_rows(rows, {"q": {"a.md": 1}, "none": {"a.md": 0}}, ks=(1,))
    assert report["duplicates"] == {"n": 1, "examples": [["q", "a.md#0"]]}
    assert report["ties"] == {"n_queries": 1, "n_ids": 2, "n_groups": 1}
    assert report["queries_without_relevant"] == ["none"]
    assert report["queries_missing_from_run"] == ["none"]
    assert report["run_queries_not_in_qrels"] == ["extra"]
    # b.md wins the tie (doc id descending), so a.md is second
    assert report["per_query"]["q"]["mrr@1"] == 0.0 and report["per_query"]["q"]["map"] == 0.5


def test_evaluate_rows_doc_and_chunk_level():
    rows = [_row("q", 1, "x.md#0", 3.0), _row("q", 2, "a.md#4", 2.0), _row("q", 3, "a.md#1", 1.0)]
    doc_qrels = {"q": {"a.md": 1}}
    report = evaluate_rows(rows, doc_qrels, ks=(1, 2))
    assert report["level"] == "doc"
    assert report["metrics"] == {
        "recall@1": 0.0, "recall@2": 1.0, "hit@1": 0.0, "hit@2": 1.0,
        "mrr@1": 0.0, "mrr@2": 0.5, "ndcg@1": 0.0, "ndcg@2": pytest.approx(1 / math.log2(3)),
        "precision@1": 0.0, "precision@2": 0.5, "map@1": 0.0, "map@2": 0.5, "map": 0.5, "rprec": 0.0,
    }
    chunk_qrels = {"q": {"a.md#1": 1}}
    assert judged_level(rows, chunk_qrels) == "chunk"
    report = evaluate_rows(rows, chunk_qrels, ks=(2, 3))
    assert report["level"] == "chunk"
    assert report["metrics"]["mrr@2"] == 0.0 and report["metrics"]["mrr@3"] == pytest.approx(1 / 3)
    json.dumps(report, ensure_ascii=False)


def test_perfect_run_on_scifact_scores_one(scifact_dir):
    qrels = read_qrels(scifact_dir / "qrels/test.tsv")
    rows = []
    for qid, docs in qrels.items():
        for rank, doc in enumerate(sorted(docs), 1):
            rows.append(_row(qid, rank, f"{doc}#0", 1.0))
    report = evaluate_rows(rows, qrels, ks=(10,))
    assert report["n_queries"] == 300
    means = dict(report["metrics"])
    # P@10 of a perfect run is the number of relevant documents / 10
    assert means.pop("precision@10") == pytest.approx(sum(min(len(d), 10) for d in qrels.values()) / 10 / 300)
    assert set(means) == {"recall@10", "hit@10", "mrr@10", "ndcg@10", "map@10", "map", "rprec"}
    assert all(v == pytest.approx(1.0) for v in means.values())


# ---------------------------------------------------------------- sample corpus


def test_sample_corpus_questions_and_qrels():
    root = Path(__file__).resolve().parent.parent / "sample_corpus"
    queries = dict(read_queries(root / "questions.jsonl"))
    qrels = read_qrels(root / "qrels.tsv")
    assert set(qrels) < set(queries)
    unanswerable = set(queries) - set(qrels)
    assert len(unanswerable) == 1  # the refusal demo question
    docs = sorted(p.name for p in (root / "docs").iterdir() if p.suffix in (".md", ".txt"))
    assert 6 <= len(docs) <= 8
    assert {d for judged in qrels.values() for d in judged} <= set(docs)
    for name in docs:
        text = (root / "docs" / name).read_text(encoding="utf-8")
        size = len(text.split()) + sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
        assert 300 <= size <= 1500, (name, size)
