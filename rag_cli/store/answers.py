"""answers/NAME.parquet: one row per question answered by `rag ask --queries`.

Columns: query_id, question, answer, citations (list of chunk ids cited, in
order of first citation), contexts (list of chunk ids retrieved as
evidence), refused (bool), generator, latency_ms (float64, milliseconds),
best_score (the best evidence's bi-encoder cosine), coverage (the idf-weighted
share of the question's terms found in the evidence, 0-1), and the other
signals of the refusal gate (`rag_cli.generate.gate.GateSignals`):
entity_coverage (float64, 0-1), rerank_score (float64, the best
cross-encoder logit; null without a reranker), reason (why it was refused,
"" when answered) and generator_refused (bool: the generator's own refusal;
null when the gate refused before the generator ran).

Files written before the gate signals were recorded lack the last four
columns; they are read as they are (`read_answers` requires only query_id,
answer, citations, refused), and what needs a signal says which is missing.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from rag_cli import atomic

ANSWERS_SCHEMA = pa.schema([("query_id", pa.string()), ("question", pa.string()), ("answer", pa.string()),
                            ("citations", pa.list_(pa.string())), ("contexts", pa.list_(pa.string())),
                            ("refused", pa.bool_()), ("generator", pa.string()), ("latency_ms", pa.float64()),
                            ("best_score", pa.float64()), ("coverage", pa.float64()),
                            ("entity_coverage", pa.float64()), ("rerank_score", pa.float64()),
                            ("reason", pa.string()), ("generator_refused", pa.bool_())])


def write_answers(path: Path, rows: list[dict]) -> None:
    """Write answer rows (dicts with the ANSWERS_SCHEMA keys) atomically."""
    atomic.write_parquet(path, pa.Table.from_pylist(rows, schema=ANSWERS_SCHEMA))


def read_answers(path: Path) -> pa.Table:
    """Read an answers file. Raises BadInput naming the file if it is a
    folder, unreadable or lacks the columns query_id, answer, citations, refused."""
    from rag_cli.store.parquet import not_folder, read_parquet

    not_folder(path, "one answers/NAME.parquet file (written by `rag ask --queries`), not the folder of them")
    return read_parquet(path, "is it an answers file written by `rag ask --queries`?",
                        required=["query_id", "answer", "citations", "refused"])
