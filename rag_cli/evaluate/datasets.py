"""Readers for query files and relevance judgements (qrels).

Query files (`read_queries`):

* JSONL, one object a line, with `_id`/`text` (BEIR) or `query_id`/`query`;
* TSV, `id<TAB>text` a line, with an optional header line
  (e.g. `query-id<TAB>text`). Only the first tab splits; the text keeps the rest.

Qrels (`read_qrels`):

* BEIR TSV, `query-id  corpus-id  score`, with an optional header line;
* TREC 4-column, `qid  iter  docid  rel` (the iteration column is ignored).

A line that contains a tab is split on tabs (so ids may contain spaces) when
that gives 3 or 4 fields; otherwise it is split on runs of whitespace. Three fields are BEIR, four are
TREC. Ids are always strings ("4983" stays "4983"); relevance is an integer
(graded relevance is kept; `1.0` is read as 1).

Files are UTF-8 (a BOM is skipped); `.gz` files are read through gzip; blank
lines are skipped. A bad row raises `rag_cli.errors.BadInput` naming the file,
the line number and what the line should look like; so does an empty file,
a duplicate query id, or a (query, doc) pair judged twice with different
relevance. A pair judged again with the same relevance counts once and is
listed in the result's `repeated` (`Qrels`), which the evaluation reports
warn about (as they do for repeated run rows).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from rag_cli.errors import BadInput
from rag_cli.textfiles import text_lines

_QUERY_ID_HEADERS = {"_id", "id", "qid", "query-id", "query_id", "queryid", "topic", "topic_id"}
_QUERY_TEXT_HEADERS = {"text", "query", "question", "title", "query_text"}
_QRELS_HEADER_FIRST = _QUERY_ID_HEADERS
_JSONL_KEYS = (("_id", "text"), ("query_id", "query"))

_QUERIES_WANT = (
    "a JSON object with '_id' and 'text' (BEIR) or 'query_id' and 'query' per line, "
    "or 'id<TAB>text' per line"
)
_JSONL_WANT = ("each line of a .jsonl query file must be a JSON object with '_id' and 'text' (BEIR) "
               "or 'query_id' and 'query', e.g. {\"_id\": \"1\", \"text\": \"what is BM25?\"}")
_QRELS_WANT = "'query-id<TAB>corpus-id<TAB>score' (BEIR) or 'qid iter docid rel' (TREC)"


def _id_str(value, path: Path, lineno: int, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadInput(f"{path}:{lineno}: {what} must be a string (or an integer), got {value!r}")
    s = str(value).strip()
    if not s:
        raise BadInput(f"{path}:{lineno}: {what} is empty; every query needs a non-empty id")
    return s


def read_queries(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Read a query file into a list of `(query_id, text)` in file order.

    JSONL (`_id`/`text` or `query_id`/`query`) or TSV (`id<TAB>text`, header
    optional); the format is detected from the first non-blank line: JSONL
    when it starts with `{`, or with `[` in a `.jsonl` (`.jsonl.gz`) file. Text is stripped of surrounding whitespace.
    """
    path = Path(path)
    out: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    fmt = None
    first_row = True
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        if fmt is None:
            start = line.lstrip()[:1]
            fmt = "jsonl" if start == "{" or (start == "[" and ".jsonl" in path.suffixes) else "tsv"
        if fmt == "jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInput(f"{path}:{lineno}: not valid JSON ({e.msg}); expected {_QUERIES_WANT}") from None
            if not isinstance(obj, dict):
                raise BadInput(f"{path}:{lineno}: a JSON {type(obj).__name__}, not an object; {_JSONL_WANT}, "
                               f"got {line[:80]!r}")
            for id_key, text_key in _JSONL_KEYS:
                if id_key in obj and text_key in obj:
                    qid = _id_str(obj[id_key], path, lineno, f"'{id_key}'")
                    text = obj[text_key]
                    break
            else:
                raise BadInput(
                    f"{path}:{lineno}: expected {_QUERIES_WANT}; this object has keys {sorted(obj)}"
                )
            if not isinstance(text, str):
                raise BadInput(f"{path}:{lineno}: the query text must be a string, got {text!r}")
        else:
            if "\t" not in line:
                raise BadInput(f"{path}:{lineno}: expected 'id<TAB>text' (a TSV query file), got {line[:80]!r}")
            if first_row:
                _not_qrels(path, lineno, line)
            qid, text = line.split("\t", 1)
            qid = qid.strip()
            if first_row and qid.lower() in _QUERY_ID_HEADERS and text.strip().lower() in _QUERY_TEXT_HEADERS:
                first_row = False
                continue  # header line
            qid = _id_str(qid, path, lineno, "the query id (1st field)")
        text = text.strip()
        if not text:
            raise BadInput(f"{path}:{lineno}: query {qid!r} has empty text; every query needs text")
        if qid in seen:
            raise BadInput(f"{path}:{lineno}: query id {qid!r} repeats line {seen[qid]}; query ids must be unique")
        seen[qid] = lineno
        first_row = False
        out.append((qid, text))
    if not out:
        raise BadInput(f"{path}: no queries in the file; expected {_QUERIES_WANT}")
    return out


def _not_qrels(path: Path, lineno: int, line: str) -> None:
    """Raise BadInput when the first row of a TSV query file is a qrels
    header (query-id corpus-id score) or a qrels row (3+ fields, the last an
    integer grade); a query text may hold tabs, but does not end in one
    field that is a number."""
    fields = [f.strip() for f in line.split("\t")]
    header = [f.lower() for f in fields[:3]] == ["query-id", "corpus-id", "score"]
    if header or (len(fields) >= 3 and re.fullmatch(r"-?\d+", fields[-1]) is not None):
        raise BadInput(f"{path}:{lineno}: this looks like a qrels file ({'its header' if header else 'a row'} "
                       f"{line[:80]!r}: query id, document id, grade), not a query file; expected "
                       f"{_QUERIES_WANT}. Give the qrels to --qrels and the queries (e.g. queries.jsonl) to --queries")


def _split_qrels_line(line: str) -> list[str]:
    if "\t" in line:
        fields = [f.strip() for f in line.split("\t")]
        fields = [f for f in fields if f]
        if len(fields) in (3, 4):
            return fields
    return line.split()


def _parse_rel(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        f = float(value)
    except ValueError:
        return None
    return int(f) if f.is_integer() else None


class Qrels(dict):
    """`{query_id: {doc_id: relevance}}` as `read_qrels` read it, and
    `repeated`: the rows that judged a pair again with the same relevance
    (counted once): `{"n": rows, "examples": [[qid, doc_id, first line, line],
    ...]}` (the first 10)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.repeated: dict = {"n": 0, "examples": []}


#: Repeated qrels rows named as examples.
_REPEATED_EXAMPLES = 10


def read_qrels(path: str | os.PathLike) -> Qrels:
    """Read qrels into `{query_id: {doc_id: relevance}}` (a `Qrels`, whose
    `repeated` lists the pairs judged again alike).

    BEIR TSV (`query-id corpus-id score`, header optional) or TREC 4-column
    (`qid iter docid rel`). Pairs with relevance 0 (or below) are kept: they are
    judged non-relevant, and the query still counts in evaluation.
    """
    path = Path(path)
    qrels = Qrels()
    where: dict[tuple[str, str], int] = {}
    first = True
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        fields = _split_qrels_line(line)
        is_first, first = first, False
        if len(fields) not in (3, 4):
            raise BadInput(
                f"{path}:{lineno}: expected {_QRELS_WANT}, got {len(fields)} field(s): {line[:120]!r}"
            )
        rel = _parse_rel(fields[-1])
        if rel is None:
            if is_first and fields[0].lower() in _QRELS_HEADER_FIRST:
                continue  # header line
            raise BadInput(
                f"{path}:{lineno}: the relevance (last field) must be an integer, got {fields[-1]!r}; "
                f"expected {_QRELS_WANT}"
            )
        qid, docid = fields[0], fields[1] if len(fields) == 3 else fields[2]
        prev = qrels.setdefault(qid, {}).get(docid)
        if prev is not None and prev != rel:
            raise BadInput(
                f"{path}:{lineno}: query {qid!r}, document {docid!r} is judged {rel} here but {prev} "
                f"on line {where[(qid, docid)]}; judge each pair once"
            )
        if prev is not None:
            qrels.repeated["n"] += 1
            if len(qrels.repeated["examples"]) < _REPEATED_EXAMPLES:
                qrels.repeated["examples"].append([qid, docid, where[(qid, docid)], lineno])
        qrels[qid][docid] = rel
        where.setdefault((qid, docid), lineno)
    if not qrels:
        raise BadInput(f"{path}: no relevance judgements in the file; expected lines {_QRELS_WANT}")
    return qrels


def _some(ids) -> str:
    """The first three of `ids` for a message, "..." when there are more."""
    ids = list(ids)
    return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")


def queries_with_relevant(queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], queries_file: str,
                          qrels_file: str) -> list[tuple[str, str]]:
    """The `(query_id, text)` of `queries` that have a relevant document
    (relevance >= `rag_cli.evaluate.metrics.RELEVANCE_LEVEL`) in `qrels`, in
    order. `queries_file` and `qrels_file` name the inputs in the message,
    e.g. "--queries sf/train.jsonl".

    Raises BadInput when none has: the queries and the qrels are of
    different query sets (e.g. the train queries with the test qrels), and
    every score would be 0 over no query.
    """
    from rag_cli.evaluate.metrics import RELEVANCE_LEVEL

    judged = {q for q, docs in qrels.items() if any(rel >= RELEVANCE_LEVEL for rel in docs.values())}
    out = [(q, t) for q, t in queries if q in judged]
    if not out:
        raise BadInput(f"no query of {queries_file} has a relevant document (relevance >= {RELEVANCE_LEVEL}) in "
                       f"{qrels_file}: give the qrels of the same query set (query ids {_some(q for q, _ in queries)}"
                       f"; the qrels judge {_some(sorted(judged)) or 'none as relevant'})")
    return out


def relevant_in_corpus(qrels: dict[str, dict[str, int]], doc_ids, qrels_file: str, where: str) -> None:
    """Raises BadInput when no document `qrels` judges relevant (relevance >=
    `RELEVANCE_LEVEL`) is among `doc_ids` (the searched collection's document
    ids): the qrels are of another collection, and every score would be 0.
    `qrels_file` ("--qrels x.tsv") and `where` (the project folder) name the
    inputs in the message."""
    from rag_cli.evaluate.metrics import RELEVANCE_LEVEL

    relevant = {d for docs in qrels.values() for d, rel in docs.items() if rel >= RELEVANCE_LEVEL}
    have = set(doc_ids)
    if relevant and not relevant & have:
        raise BadInput(f"none of the {len(relevant)} relevant documents of {qrels_file} ({_some(sorted(relevant))}) "
                       f"is in {where} (its documents: {_some(sorted(have))}): give the qrels of this collection, or "
                       f"-p the project indexed from it")


_GOLD_WANT = "a JSON object with '_id' (the query id) and 'answers' (a list of gold answer strings) per line"


def read_gold_answers(path: str | os.PathLike) -> dict[str, list[str]]:
    """Read gold answers (`answers.jsonl` of the CMRC 2018 data: one
    `{"_id": query id, "answers": [str, ...]}` a line) into
    {query_id: [answer, ...]} in file order.

    Raises BadInput naming the file and line for a line that is not such an
    object, an empty answer list, a non-string answer, a repeated query id,
    or a file without answers.
    """
    path = Path(path)
    out: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{path}:{lineno}: not valid JSON ({e.msg}); expected {_GOLD_WANT}") from None
        if not isinstance(obj, dict) or "_id" not in obj or "answers" not in obj:
            raise BadInput(f"{path}:{lineno}: expected {_GOLD_WANT}, got {line[:80]!r}")
        qid = _id_str(obj["_id"], path, lineno, "'_id'")
        answers = obj["answers"]
        if (not isinstance(answers, list) or not answers
                or not all(isinstance(a, str) and a.strip() for a in answers)):
            raise BadInput(f"{path}:{lineno}: 'answers' of {qid!r} must be a non-empty list of non-empty strings, "
                           f"got {answers!r}")
        if qid in seen:
            raise BadInput(f"{path}:{lineno}: query id {qid!r} repeats line {seen[qid]}; query ids must be unique")
        seen[qid] = lineno
        out[qid] = [a.strip() for a in answers]
    if not out:
        raise BadInput(f"{path}: no gold answers in the file; expected {_GOLD_WANT}")
    return out
