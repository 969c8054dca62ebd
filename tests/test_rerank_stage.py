"""rerank_rows: pairs of all queries scored together, raw logits or sigmoid."""

from __future__ import annotations

import numpy as np
import pytest

from rag_cli.models.cross_encoder import CrossEncoder, sigmoid
from rag_cli.models.folder import ModelFolder
from rag_cli.store.runs import RunRow
from rag_cli.stages.rerank import rerank_rows

TEXTS = {
    "a#0": "the cat sat on the mat",
    "b#0": "paris is the capital of france",
    "c#0": "the dog ran fast",
    "d#0": "london is a city in england",
}
QUERIES = {"q1": "where is paris", "q2": "what did the cat do"}


def _rows() -> list[RunRow]:
    return [RunRow(qid, q, rank, cid, cid.split("#")[0], 1.0 / rank, "dense")
            for qid, q in QUERIES.items() for rank, cid in enumerate(TEXTS, start=1)]


@pytest.mark.parametrize("probability", [False, True])
def test_rerank_rows_scores_all_queries_in_one_call(tiny_cross_encoder, probability):
    ce = CrossEncoder(ModelFolder.load(tiny_cross_encoder))
    calls = []
    score_pairs = ce.score_pairs
    ce.score_pairs = lambda pairs, *a, **k: calls.append(len(pairs)) or score_pairs(pairs, *a, **k)
    out, n_cut = rerank_rows(_rows(), TEXTS, ce, top_in=4, top_out=3, probability=probability)
    assert calls == [8] and n_cut == 0
    for qid, q in QUERIES.items():
        logits = CrossEncoder(ModelFolder.load(tiny_cross_encoder)).score(q, list(TEXTS.values()))
        want = sigmoid(logits) if probability else logits
        order = np.argsort(-want, kind="stable")[:3]
        got = [r for r in out if r.query_id == qid]
        assert [r.chunk_id for r in got] == [list(TEXTS)[i] for i in order]
        np.testing.assert_allclose([r.score for r in got], want[order], rtol=1e-6)
        assert [r.rank for r in got] == [1, 2, 3] and all(r.stage == "rerank" for r in got)
        if probability:
            assert all(0.0 < r.score < 1.0 for r in got)
