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

The file's schema metadata holds `rag.evidence_texts`: a JSON object
{chunk_id: `text_digest` of its text} of every chunk the answers cite or
were given, as they were when answered, and `rag.evidence_sha256`, the
`evidence_fingerprint` of all of them. Scoring compares the digests of the
chunk ids the scored rows use with the project's current texts
(`evidence_changed`), so a row subset of the file (its answerable rows, say)
is compared on its own ids: answers recorded in another project, or before
the documents changed, are told apart from answers that merely cite chunks
that still exist. Files with only `rag.evidence_sha256` (written before the
per-chunk digests) are compared as a whole.
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
EVIDENCE_TEXTS_KEY = b"rag.evidence_texts"


def text_digest(text: str) -> str:
    """The first 16 hex digits (64 bits) of the sha256 of `text` (UTF-8):
    enough to tell a changed text, a tenth of the size of a full digest."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


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
    as its `evidence_fingerprint` and its per-chunk `text_digest`s in the
    schema metadata."""
    import json

    schema = ANSWERS_SCHEMA
    if evidence is not None:
        digests = {cid: text_digest(evidence[cid]) for cid in sorted(evidence)}
        schema = schema.with_metadata({EVIDENCE_KEY: evidence_fingerprint(evidence).encode(),
                                       EVIDENCE_TEXTS_KEY: json.dumps(digests, ensure_ascii=False).encode()})
    atomic.write_parquet(path, pa.Table.from_pylist(rows, schema=schema))


def read_evidence_fingerprint(table: pa.Table) -> str | None:
    """The `evidence_fingerprint` an answers table was written with, or None (older files)."""
    meta = table.schema.metadata or {}
    value = meta.get(EVIDENCE_KEY)
    return value.decode() if value else None


def evidence_changed(table: pa.Table, texts: dict[str, str], ids: set[str] | None = None) -> bool | None:
    """Whether the project's `texts` ({chunk_id: text}, "" for an id not in
    the project, for every chunk id the rows of `table` cite or were given)
    differ from those recorded when it was written: per chunk with
    `rag.evidence_texts`, over `ids` only when given (the chunks of the rows
    that are scored), so a row subset is compared on its own ids; as a whole
    with only `rag.evidence_sha256`; None when the file records neither."""
    import json

    meta = table.schema.metadata or {}
    if meta.get(EVIDENCE_TEXTS_KEY):
        recorded = json.loads(meta[EVIDENCE_TEXTS_KEY].decode())
        return any(recorded.get(cid) != text_digest(text) for cid, text in texts.items()
                   if ids is None or cid in ids)
    whole = read_evidence_fingerprint(table)
    return None if whole is None else whole != evidence_fingerprint(texts)


def read_answers(path: Path) -> pa.Table:
    """Read an answers file. Raises BadInput naming the file if it is a
    folder, unreadable or lacks the columns query_id, answer, citations, refused."""
    from rag_cli.store.parquet import read_parquet
    from rag_cli.textfiles import not_folder

    not_folder(path, "one answers/NAME.parquet file (written by `rag ask --queries`), not the folder of them")
    return read_parquet(path, "is it an answers file written by `rag ask --queries`?",
                        required=["query_id", "answer", "citations", "refused"])
