"""The run format: ranked search results, one row per (query, chunk).

A run in memory is a list of `RunRow`s (a named tuple, so plain 7-tuples in
the same order work too): `query_id`, `query`, `rank` (1-based, per query),
`chunk_id`, `doc_id`, `score`, `stage` (`dense`, `sparse`, `hybrid`,
`rerank`). On disk it is either

* our Parquet run (`runs/NAME.parquet`, see DESIGN.md), with exactly the
  columns of `RUN_SCHEMA` (score is float64 so fused scores never collapse
  into ties; float32 files are read as well), or
* a standard 6-column TREC run file, one line per result::

      qid Q0 docno rank score tag

  We write the **chunk id** as the `docno` (a chunk run stays a chunk run)
  and the row's stage as the `tag`. Reading a TREC run, `chunk_id` is the
  docno and `doc_id` is the docno without a trailing `#<digits>` (the chunk
  id form `doc_id#ordinal`), so a TREC file from another tool, whose docnos
  are document ids, reads as a document run. The query text is not part of
  the TREC format: it reads back as "". Evaluation scores a chunk run at
  document level anyway (MaxP, see `rag_cli.evaluate.report`).

Rows are kept in the order of the file; `rank` is taken from the file (it is
not recomputed from the score) but is **never a sort key**: as trec_eval does,
a run is ordered by score, descending, ties broken by docno descending
(`trec_order`). The rank column is only output, so a TREC file whose ranks
start at 0, are all 1, or disagree with the scores reads and scores as
trec_eval reads it. `dedupe` keeps one row per (query, chunk id) and counts
the others.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from rag_cli.errors import BadInput
from rag_cli.textfiles import not_folder, text_lines

RUN_COLUMNS = ("query_id", "query", "rank", "chunk_id", "doc_id", "score", "stage")
STAGES = ("dense", "sparse", "hybrid", "rerank")
_CHUNK_SUFFIX = re.compile(r"#\d+$")


class Hit(NamedTuple):
    """One ranked chunk (or document) of one query: the record of search
    results, runs and reranking alike. The first seven fields are a run's
    columns (RUN_COLUMNS; `score` is the stage's: cosine, BM25, fused or
    cross-encoder); a hit fresh from an index also has its index `row`, the
    bi-encoder `cosine` when the dense retriever saw it, and the chunk `text`
    (None, None, "" when read from a run file)."""

    query_id: str = ""
    query: str = ""
    rank: int = 0
    chunk_id: str = ""
    doc_id: str = ""
    score: float = 0.0
    stage: str = ""
    row: int | None = None
    cosine: float | None = None
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        """rank, chunk_id, doc_id, score, stage, text (what `rag search --json` prints of a hit)."""
        return {"rank": self.rank, "chunk_id": self.chunk_id, "doc_id": self.doc_id, "score": self.score,
                "stage": self.stage, "text": self.text}


#: A row of a run file: a `Hit` (the name the run readers and writers use).
RunRow = Hit


def run_schema():
    """The Arrow schema of a Parquet run (column names and types are fixed)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("query_id", pa.string()),
            ("query", pa.string()),
            ("rank", pa.int32()),
            ("chunk_id", pa.string()),
            ("doc_id", pa.string()),
            ("score", pa.float64()),
            ("stage", pa.string()),
        ]
    )


def doc_id_of(chunk_id: str) -> str:
    """The document id of a chunk id (`doc_id#ordinal`); other ids unchanged."""
    return _CHUNK_SUFFIX.sub("", chunk_id)


def _as_row(row: Any) -> RunRow:
    if isinstance(row, RunRow):
        return row
    if isinstance(row, dict):
        missing = [c for c in RUN_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"run row lacks {missing}: {row!r}")
        return RunRow(*(row[c] for c in RUN_COLUMNS))
    row = tuple(row)
    if len(row) not in (len(RUN_COLUMNS), len(Hit._fields)):
        raise ValueError(f"a run row has {len(RUN_COLUMNS)} fields {RUN_COLUMNS}, got {len(row)}: {row!r}")
    return RunRow(*row)


def as_rows(rows: Any) -> list[RunRow]:
    """Normalise rows (RunRows, 7-tuples, dicts, or a `pyarrow.Table`) to RunRows."""
    if hasattr(rows, "to_pylist") and hasattr(rows, "column_names"):
        return [_as_row(d) for d in rows.select(list(RUN_COLUMNS)).to_pylist()]
    return [_as_row(r) for r in rows]


def run_table(rows: Iterable[Any]):
    """A `pyarrow.Table` with exactly the run columns, in order, from `rows`.

    Ranks must be integers >= 1 and ids non-empty: a `ValueError` otherwise
    (rows come from our own code, so this is a bug, not bad input).
    """
    import pyarrow as pa

    rows = as_rows(rows)
    cols: dict[str, list] = {c: [] for c in RUN_COLUMNS}
    for r in rows:
        if int(r.rank) != r.rank or r.rank < 1:
            raise ValueError(f"rank must be an integer >= 1, got {r.rank!r} in {r!r}")
        if not r.query_id or not r.chunk_id or not r.doc_id:
            raise ValueError(f"query_id, chunk_id and doc_id must be non-empty: {r!r}")
        cols["query_id"].append(str(r.query_id))
        cols["query"].append("" if r.query is None else str(r.query))
        cols["rank"].append(int(r.rank))
        cols["chunk_id"].append(str(r.chunk_id))
        cols["doc_id"].append(str(r.doc_id))
        cols["score"].append(float(r.score))
        cols["stage"].append(str(r.stage))
    return pa.table(cols, schema=run_schema())


def trec_field(value: Any) -> str:
    """A run value as one TREC field: unchanged unless it contains whitespace;
    then every whitespace character and every `%` is percent-encoded as its
    UTF-8 bytes (`"a b"` -> `"a%20b"`, `"5%\tx"` -> `"5%25%09x"`), as in a URL,
    so the field stays one token and `urllib.parse.unquote` gives it back."""
    text = str(value)
    if not any(ch.isspace() for ch in text):
        return text
    return "".join("".join(f"%{b:02X}" for b in ch.encode("utf-8")) if ch.isspace() or ch == "%" else ch
                   for ch in text)


def trec_escaped(rows: Iterable[Any]) -> list[str]:
    """The distinct query ids, chunk ids and stages of `rows` that `trec_lines`
    writes percent-encoded (they contain whitespace), in order of first appearance."""
    out: dict[str, None] = {}
    for r in as_rows(rows):
        for value in (r.query_id, r.chunk_id, r.stage):
            if trec_field(value) != str(value):
                out.setdefault(str(value), None)
    return list(out)


def trec_lines(rows: Iterable[Any]) -> str:
    """The 6-column TREC run text of `rows` (docno = chunk id, tag = stage).

    A field with whitespace is percent-encoded (`trec_field`); `trec_escaped`
    lists those. Raises BadInput for an empty query id, chunk id or stage.
    """
    out = []
    for r in as_rows(rows):
        for name, value in (("query_id", r.query_id), ("chunk_id", r.chunk_id), ("stage", r.stage)):
            if value is None or not str(value).strip():
                raise BadInput(f"cannot write a TREC run: {name} {value!r} is empty "
                               "(TREC run fields are whitespace-separated); write the Parquet run instead")
        out.append(f"{trec_field(r.query_id)} Q0 {trec_field(r.chunk_id)} {int(r.rank)} {float(r.score)!r} "
                   f"{trec_field(r.stage)}\n")
    return "".join(out)


def write_run(path: str | os.PathLike, rows: Iterable[Any], fmt: str = "parquet") -> Path:
    """Write `rows` to `path` atomically as a Parquet run or a TREC run file.

    `fmt` is "parquet" or "trec". Returns the path written.
    """
    from rag_cli import atomic

    path = Path(path)
    if fmt == "parquet":
        atomic.write_parquet(path, run_table(rows))
    elif fmt == "trec":
        atomic.write_text(path, trec_lines(rows))
    else:
        raise BadInput(f"unknown run format {fmt!r}: use 'parquet' or 'trec'")
    return path


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def _read_parquet_run(path: Path) -> list[RunRow]:
    from rag_cli.store.parquet import read_parquet

    table = read_parquet(path, "is it a run written by `rag search --queries` or `rag rerank`?")
    missing = [c for c in RUN_COLUMNS if c not in table.column_names]
    if missing:
        raise BadInput(
            f"{path}: a run needs the columns {', '.join(RUN_COLUMNS)}; missing {', '.join(missing)}"
        )
    rows = []
    for i, d in enumerate(table.select(list(RUN_COLUMNS)).to_pylist()):
        if d["rank"] is None or not d["query_id"] or not d["chunk_id"] or d["score"] is None:
            raise BadInput(
                f"{path}: row {i}: needs a query_id, a chunk_id, a score and a rank, got {d!r}"
            )
        if math.isnan(d["score"]):
            raise BadInput(f"{path}: row {i}: score is NaN; it must be a number")
        rows.append(
            RunRow(
                str(d["query_id"]),
                d["query"] or "",
                int(d["rank"]),
                str(d["chunk_id"]),
                str(d["doc_id"] or doc_id_of(d["chunk_id"])),
                float(d["score"]),
                d["stage"] or "",
            )
        )
    return rows


def _read_trec_run(path: Path) -> list[RunRow]:
    rows = []
    for lineno, line in text_lines(path, hint="a run is Parquet or a UTF-8 TREC run file"):
        if not line.strip():
            continue
        fields = line.split()
        want = "6 whitespace-separated fields 'qid Q0 docno rank score tag'"
        if len(fields) != 6:
            raise BadInput(f"{path}:{lineno}: a TREC run line has {want}, got {len(fields)}: {line.rstrip()!r}")
        qid, _q0, docno, rank_s, score_s, tag = fields
        try:
            rank = int(rank_s)
        except ValueError:
            raise BadInput(f"{path}:{lineno}: rank (4th field) must be an integer, got {rank_s!r}") from None
        try:
            score = float(score_s)
        except ValueError:
            raise BadInput(f"{path}:{lineno}: score (5th field) must be a number, got {score_s!r}") from None
        if math.isnan(score):
            raise BadInput(f"{path}:{lineno}: score is NaN; it must be a number")
        rows.append(RunRow(qid, "", rank, docno, doc_id_of(docno), score, tag))
    if not rows:
        raise BadInput(f"{path}: the run is empty; expected TREC run lines 'qid Q0 docno rank score tag'")
    return rows


def read_run(path: str | os.PathLike) -> list[RunRow]:
    """Read a Parquet run or a 6-column TREC run file (detected by content)."""
    path = Path(path)
    not_folder(path, "one run file (runs/NAME.parquet or a TREC run), not a folder of them")
    if not path.is_file():
        where = "" if path.is_absolute() else (f" (a relative path is read from the working directory {Path.cwd()}, "
                                                "not from the project folder: e.g. .rag/runs/NAME.parquet)")
        raise BadInput(f"{path}: no such run file{where}")
    if _is_parquet(path):
        return _read_parquet_run(path)
    if path.suffix == ".parquet":
        raise BadInput(f"{path}: not a Parquet file (it does not start with PAR1); is it a run written by "
                       "`rag search --queries` or `rag rerank`? A TREC run file is read by content, under any "
                       "other name")
    return _read_trec_run(path)


def trec_key(row: RunRow) -> tuple[float, str]:
    """The sort key of trec_eval's order, for `sorted(..., reverse=True)`:
    score descending, then docno (here the chunk id) descending.

    trec_eval 9.0.x, form_res_rels.c `comp_sim_docno`: `sim` descending, ties by
    `strcmp(docno)` descending; Python's str order is the same order (UTF-8 byte
    order is code point order)."""
    return (float(row.score), str(row.chunk_id))


def trec_order(rows: Iterable[Any]) -> dict[str, list[RunRow]]:
    """`{query_id: rows best first}` in trec_eval's order (`trec_key`); the rank
    column is ignored. Queries keep their order of first appearance."""
    by_query: dict[str, list[RunRow]] = {}
    for r in as_rows(rows):
        by_query.setdefault(r.query_id, []).append(r)
    return {qid: sorted(rs, key=trec_key, reverse=True) for qid, rs in by_query.items()}


class Duplicates(NamedTuple):
    """Rows that repeat a (query_id, chunk_id) pair: how many were dropped and
    up to `examples` of the pairs, as `[query_id, chunk_id]` lists."""

    n: int
    examples: list


def dedupe(rows: Iterable[Any], examples: int = 5) -> tuple[list[RunRow], Duplicates]:
    """One row per (query_id, chunk_id): the one with the highest score (the
    first in file order among equals); file order otherwise kept.

    Returns (rows, Duplicates). trec_eval refuses such a run; we count each pair
    once and report the repeats instead."""
    best: dict[tuple[str, str], int] = {}
    out: list[RunRow] = []
    n_dup = 0
    seen_examples: list = []
    for r in as_rows(rows):
        key = (r.query_id, r.chunk_id)
        i = best.get(key)
        if i is None:
            best[key] = len(out)
            out.append(r)
            continue
        n_dup += 1
        if len(seen_examples) < examples and list(key) not in seen_examples:
            seen_examples.append(list(key))
        if r.score > out[i].score:
            out[i] = r
    return out, Duplicates(n_dup, seen_examples)
