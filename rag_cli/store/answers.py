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
null when the gate refused before the generator ran), and the signals of
the sentence that would be quoted (`ExtractiveGenerator.signals`):
answer_terms (the idf-weighted share of the question's terms it holds),
answer_type (1.0 / 0.0: it holds / lacks the number or date asked for; null
when none is asked), sentence_score, and reader_null (the reader's
no-answer score minus its best span's; null without a reader).

Files written before the gate signals were recorded lack the last four
columns; they are read as they are (`read_answers` requires only query_id,
answer, citations, refused), and what needs a signal says which is missing.

The file's schema metadata holds `rag.evidence_sha256`: `evidence_fingerprint`
of the texts of every chunk the answers cite or were given, as they were
when answered. Scoring compares it with the project's current texts of the
same chunk ids (`read_evidence_fingerprint`): answers recorded in another
project, or before the documents changed, are then told apart from answers
that merely cite chunks that still exist.
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
                            ("reason", pa.string()), ("generator_refused", pa.bool_()),
                            ("answer_terms", pa.float64()), ("answer_type", pa.float64()),
                            ("sentence_score", pa.float64()), ("reader_null", pa.float64())])


EVIDENCE_KEY = b"rag.evidence_sha256"


def evidence_fingerprint(texts: dict[str, str]) -> str:
    """sha256 (hex) of {chunk_id: text}, over the ids in sorted order (each
    id and text length-prefixed, so no two mappings share a digest)."""
    import hashlib

    h = hashlib.sha256()
    for cid in sorted(texts):
        for part in (cid, texts[cid]):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def write_answers(path: Path, rows: list[dict], evidence: dict[str, str] | None = None) -> None:
    """Write answer rows (dicts with the ANSWERS_SCHEMA keys) atomically;
    `evidence` ({chunk_id: text} of the chunks cited or given) is kept as
    its `evidence_fingerprint` in the schema metadata."""
    schema = ANSWERS_SCHEMA
    if evidence is not None:
        schema = schema.with_metadata({EVIDENCE_KEY: evidence_fingerprint(evidence).encode()})
    atomic.write_parquet(path, pa.Table.from_pylist(rows, schema=schema))


def read_evidence_fingerprint(table: pa.Table) -> str | None:
    """The `evidence_fingerprint` an answers table was written with, or None (older files)."""
    meta = table.schema.metadata or {}
    value = meta.get(EVIDENCE_KEY)
    return value.decode() if value else None


def read_answers(path: Path) -> pa.Table:
    """Read an answers file. Raises BadInput naming the file if it is a
    folder, unreadable or lacks the columns query_id, answer, citations, refused."""
    from rag_cli.store.parquet import read_parquet
    from rag_cli.textfiles import not_folder

    not_folder(path, "one answers/NAME.parquet file (written by `rag ask --queries`), not the folder of them")
    return read_parquet(path, "is it an answers file written by `rag ask --queries`?",
                        required=["query_id", "answer", "citations", "refused"])
