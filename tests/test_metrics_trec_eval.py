"""Every metric against pytrec_eval (trec_eval's own code) as a hypothesis
property: random TREC run files with ties, repeated (query, doc) rows, ranks
that start at 0 or are all 1, and graded qrels (including 0 and negative)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_cli.evaluate.report import evaluate_rows
from rag_cli.store.runs import read_run

# ids whose byte order differs from a naive order: case, digits, non-ASCII
DOC_IDS = ["a", "B", "b", "10", "9", "doc-1", "é", "中", "Z", "zz"]
QUERY_IDS = ["1", "2", "q3"]
KS = (1, 2, 3, 5, 10)

# ours -> pytrec_eval measure, at k ("{}" is the cutoff) or over the whole run
AT_K = {"recall": "recall_{}", "precision": "P_{}", "hit": "success_{}", "ndcg": "ndcg_cut_{}", "map": "map_cut_{}"}
WHOLE = {"map": "map", "rprec": "Rprec"}


@st.composite
def collections(draw):
    lines, qrels = [], {}
    for qid in QUERY_IDS:
        if draw(st.booleans()) or not qrels:
            judged = draw(st.lists(st.sampled_from(DOC_IDS), unique=True, min_size=1, max_size=6))
            qrels[qid] = {d: draw(st.sampled_from([-1, 0, 1, 1, 2, 3])) for d in judged}
        n = draw(st.integers(0, 14))
        rank_style = draw(st.sampled_from(["from0", "ones", "random"]))
        for i in range(n):
            doc = draw(st.sampled_from(DOC_IDS))  # repeats are duplicates
            score = draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, -2.0]))  # coarse: frequent ties
            rank = {"from0": i, "ones": 1, "random": draw(st.integers(0, 50))}[rank_style]
            lines.append(f"{qid} Q0 {doc} {rank} {score} tag\n")
    if not lines:
        lines.append("1 Q0 a 1 1.0 tag\n")
    return "".join(lines), qrels


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=collections())
def test_every_metric_equals_pytrec_eval(tmp_path_factory, pytrec_eval, data):
    text, qrels = data
    path = tmp_path_factory.mktemp("run") / "run.trec"
    path.write_text(text, encoding="utf-8")
    rows = read_run(path)
    report = evaluate_rows(rows, qrels, ks=KS, level="doc")
    # the reference run: one score per (query, doc), the highest of its repeats
    run: dict[str, dict[str, float]] = {}
    for r in rows:
        docs = run.setdefault(r.query_id, {})
        docs[r.doc_id] = max(docs.get(r.doc_id, r.score), r.score)
    measures = {"recall", "P", "success", "ndcg_cut", "map_cut", "map", "Rprec", "recip_rank"}
    ref = pytrec_eval.RelevanceEvaluator(
        qrels, {f"{m}.{','.join(map(str, KS))}" if m in ("recall", "P", "success", "ndcg_cut", "map_cut") else m
                for m in measures}
    ).evaluate(run)
    assert report["duplicates"]["n"] == len(rows) - sum(len(d) for d in run.values())
    for qid in qrels:
        ours = report["per_query"][qid]
        theirs = ref.get(qid)
        if theirs is None:  # pytrec_eval leaves out queries absent from the run; we score them 0
            assert qid not in run and all(v == 0.0 for v in ours.values())
            continue
        for name, measure in AT_K.items():
            for k in KS:
                assert ours[f"{name}@{k}"] == pytest.approx(theirs[measure.format(k)], abs=1e-9), (qid, name, k)
        for name, measure in WHOLE.items():
            assert ours[name] == pytest.approx(theirs[measure], abs=1e-9), (qid, name)
        # MRR@k at a k beyond the run's depth is recip_rank
        assert ours["mrr@10"] == pytest.approx(theirs["recip_rank"], abs=1e-9) or len(run[qid]) > 10
