"""`rag rerank`: rescore the top-N of a run with an ONNX cross-encoder.

Scores are the cross-encoder's raw logits (higher is more relevant), or with
`--sigmoid` their sigmoid, a probability in [0, 1] computed in float64 (same
order: rows are ranked by the logits, so probabilities that round to 1.0 keep
their order); the reranked run keeps the top-n per query at or above
`min_score` (on the chosen scale), with stage `rerank`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from rag_cli.errors import BadInput
from rag_cli.progress import Progress
from rag_cli.store.chunks import embedded_column, read_chunks
from rag_cli.store.runs import RunRow, trec_key

#: What a reranked score is, by `probability`: stated in the output and JSON.
SCORE_SCALES = {False: "logit (cross-encoder raw score, unbounded, higher is more relevant)",
                True: "probability (sigmoid of the cross-encoder logit, 0..1)"}


def chunk_texts(chunks_path, chunk_ids: set[str]) -> dict[str, str]:
    """Text to score for each wanted chunk id (the embedded text, with its heading path)."""
    table = read_chunks(chunks_path, required=["chunk_id"])
    col = embedded_column(table.column_names)
    ids = table.column("chunk_id").to_pylist()
    texts = table.column(col).to_pylist()
    return {c: t for c, t in zip(ids, texts) if c in chunk_ids}


def check_min_score(min_score: float | None, probability: bool) -> None:
    """Raise BadInput (exit 2) for a `--min-score` that would drop every row
    without a word: NaN or ±inf, or with `--sigmoid` (`probability`) a value
    outside [0, 1]. None (no minimum) and any finite logit are fine."""
    from rag_cli.config import check_flag

    if min_score is None:
        return
    check_flag("--min-score", min_score, (None, None))
    if probability and not 0.0 <= min_score <= 1.0:
        raise BadInput(f"--min-score {min_score}: must be from 0 to 1 (a probability, with --sigmoid)")


def rerank_rows(rows: list[RunRow], texts: dict[str, str], cross_encoder, *, top_in: int = 100,
                top_out: int = 10, source: str = "the run", probability: bool = False,
                min_score: float | None = None, progress: Progress | None = None) -> tuple[list[RunRow], int]:
    """Rerank each query's best `top_in` rows (by score, ties by chunk id descending, as
    trec_eval orders a run; the rank column is not used) and keep the best `top_out`.

    `texts` maps chunk_id -> text. All (query, passage) pairs of the run are
    scored together (`CrossEncoder.score_pairs`: length-sorted token-budget
    batches across queries). Scores are raw logits, or their sigmoid
    (a probability, same order) when `probability`; see
    `rag_cli.models.cross_encoder` for the scale. Raises BadInput when a chunk
    of the run has no text (the run was made from another project), naming
    the chunk id. Rows are ranked by the logits (ties keep the earlier rank
    first); rows scoring below `min_score` (on the chosen scale) are dropped
    (`check_min_score`: a finite number, from 0 to 1 with `probability`).
    Progress: ("reranking", pairs scored, pairs).
    Returns (rows, number of (query, passage) pairs cut to the model's max_length).
    """
    from rag_cli.models.cross_encoder import sigmoid

    if top_in < 1 or top_out < 1:
        raise BadInput(f"--top-n/--candidates must be at least 1 (got {top_in}, {top_out})")
    check_min_score(min_score, probability)
    by_query: dict[str, list[RunRow]] = defaultdict(list)
    order: list[str] = []
    for r in rows:
        if r.query_id not in by_query:
            order.append(r.query_id)
        by_query[r.query_id].append(r)
    groups: list[tuple[str, list[RunRow]]] = []
    pairs: list[tuple[str, str]] = []
    for qid in order:
        cands = sorted(by_query[qid], key=trec_key, reverse=True)[:top_in]  # trec_eval order, not the rank column
        query = cands[0].query
        if not query:
            raise BadInput(f"{source}: query {qid!r} has no query text (a TREC run has none); "
                           "rerank a Parquet run written by `rag search --queries`")
        missing = [r.chunk_id for r in cands if r.chunk_id not in texts]
        if missing:
            raise BadInput(f"{source}: chunk {missing[0]!r} is not in chunks.parquet of this project; "
                           "rerank a run made from the same project (-p/--project)")
        groups.append((qid, cands))
        pairs.extend((query, texts[r.chunk_id]) for r in cands)
    report = (lambda done, n: progress("reranking", done, n)) if progress else None
    all_scores = cross_encoder.score_pairs(pairs, progress=report) if pairs else np.zeros(0, np.float32)
    n_truncated = int(cross_encoder.n_truncated) if pairs else 0
    logits = np.asarray(all_scores, dtype=np.float64)
    shown = sigmoid(logits) if probability else logits
    out: list[RunRow] = []
    start = 0
    for qid, cands in groups:
        order_by, scores = logits[start : start + len(cands)], shown[start : start + len(cands)]
        start += len(cands)
        idx = [i for i in np.argsort(-order_by, kind="stable") if min_score is None or scores[i] >= min_score]
        for rank, i in enumerate(idx[:top_out], start=1):
            c = cands[i]
            out.append(RunRow(qid, c.query, rank, c.chunk_id, c.doc_id, float(scores[i]), "rerank"))
    return out, n_truncated
