"""`--filter`: restrict retrieval to chunks whose chunk or document fields match.

An expression is ``FIELD OP VALUE``; repeated expressions combine with AND.

- ``FIELD=VALUE``: equal; with shell wildcards (``* ? [..]``, fnmatch,
  case-sensitive) a glob, so ``doc_id=guides/*`` is a doc_id prefix and
  ``path=*.md`` a path glob. ``FIELD!=VALUE`` is its negation.
- ``FIELD in [a, b]`` / ``FIELD not in [a, b]``: equal to one of / none of.
- ``FIELD>=V``, ``>``, ``<=``, ``<``: numeric when both sides are numbers,
  by date and time when both are ISO 8601 dates (``2025-01-01``,
  ``2025-01-01T12:00:00Z``; a date alone is its midnight, UTC when the
  other side has a time zone), else no match.
- A list value (front matter ``tags: [api, cli]``) matches when one of its
  elements does (``!=`` and ``not in``: when none does).
- A document without the field matches only ``!=`` and ``not in``.
- Quotes around VALUE or list items are removed; ``==`` is ``=``.
- Refused (BadInput), as they could never match what was meant: an empty
  VALUE (write ``""`` for an empty string) or list, a VALUE that starts with
  ``= < >`` (a doubled operator such as ``path===x`` or ``n=>3``), a glob
  with a ``[`` that is never closed (write ``[[]`` for a literal ``[``), and
  a control character (newline, tab, escape) anywhere in the expression.

Fields: the chunk columns of the index (chunk_id, doc_id, title_path,
parent_id, context_start, context_end), then the document fields of the
generation's docs table (path, title, n_chars) and its front-matter /
BEIR metadata keys (`rag_cli.store.index_folder`, docs.parquet). A name
that is none of these is BadInput listing the fields that exist.

The result is a (n_chunks,) bool mask that both retrievers apply before
ranking (`DenseIndex.search`, `SparseIndex.search`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from rag_cli.errors import BadInput

#: Chunk columns that hold text, not something to filter on.
TEXT_COLUMNS = ("text", "embed_text", "context", "label")
#: Document fields of the generation's docs table (besides metadata keys).
DOC_FIELDS = ("path", "title", "n_chars")

_EXPR = re.compile(r"^\s*([^\s=!<>]+?)\s*(?:\s(not\s+in|in)\s*\[(.*)\]|(<=|>=|!=|==|=|<|>)(.*))\s*$", re.S)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$")


def _unquote(v: str) -> str:
    v = v.strip()
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" else v


@dataclass(frozen=True)
class Condition:
    """One parsed expression: `field`, `op` (= != < <= > >= in "not in"), `value` (str, or tuple of str for in)."""

    expr: str
    field: str
    op: str
    value: Any

    def matches(self, value: Any) -> bool:
        """Whether a field value (None when missing; str, number, bool or list) satisfies the condition."""
        negated = self.op in ("!=", "not in")
        if value is None:
            return negated
        values = value if isinstance(value, list) else [value]
        if negated:
            return not any(self._positive(v) for v in values)
        return any(self._positive(v) for v in values)

    def _positive(self, v: Any) -> bool:
        if self.op in ("=", "!="):
            return _equal(v, self.value)
        if self.op in ("in", "not in"):
            return any(_equal(v, x) for x in self.value)
        a, b = _ordered(v), _ordered(self.value)
        if a is None or b is None or a[0] != b[0]:
            return False
        a, b = _same_tz(a[1], b[1])
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _equal(v: Any, want: str) -> bool:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and _NUMBER.match(want):
        return float(v) == float(want)
    if any(c in want for c in "*?["):
        return fnmatch.fnmatchcase(_text(v), want)
    return _text(v) == want


def _ordered(v: Any) -> tuple[str, Any] | None:
    """("n", float) for a number, ("d", datetime) for an ISO date, else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return "n", float(v)
    s = str(v).strip()
    if _NUMBER.match(s):
        return "n", float(s)
    if _DATE.match(s):
        try:
            return "d", datetime.fromisoformat(s.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _same_tz(a, b):
    if isinstance(a, datetime) and (a.tzinfo is None) != (b.tzinfo is None):
        a, b = (a.replace(tzinfo=timezone.utc) if a.tzinfo is None else a,
                b.replace(tzinfo=timezone.utc) if b.tzinfo is None else b)
    return a, b


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _check_value(expr: str, value: str) -> None:
    """BadInput for a glob whose `[` is never closed (fnmatch would take it literally)."""
    i = value.find("[")
    while i >= 0:
        j = i + 1 + (value[i + 1:i + 2] in "!^")  # a set may start with ! and then with ]
        j += value[j:j + 1] == "]"
        close = value.find("]", j)
        if close < 0:
            raise BadInput(f"--filter {expr!r}: the '[' in {value!r} is never closed; a glob set is [abc], "
                           "and a literal '[' is written [[]")
        i = value.find("[", close + 1)


def parse(expr: str) -> Condition:
    """Parse one --filter expression (module docstring). Raises BadInput naming
    the expression and saying the forms allowed, or why it could never match."""
    if _CONTROL.search(expr):
        raise BadInput(f"--filter {expr!r}: holds a control character (newline, tab, escape); "
                       "give one FIELD OP VALUE on one line")
    m = _EXPR.match(expr)
    if not m:
        raise BadInput(f"--filter {expr!r}: expected FIELD=VALUE (VALUE may be a glob), FIELD!=VALUE, "
                       "FIELD>=VALUE (also >, <=, <), or 'FIELD in [a,b]'")
    field = m.group(1)
    if m.group(2):
        items = tuple(_unquote(x) for x in m.group(3).split(",") if x.strip())
        if not items:
            raise BadInput(f"--filter {expr!r}: the list is empty, so nothing would match; give 'FIELD in [a, b]'")
        for item in items:
            _check_value(expr, item)
        return Condition(expr, field, "not in" if m.group(2).startswith("not") else "in", items)
    op = "=" if m.group(4) == "==" else m.group(4)
    raw = m.group(5).strip()
    if not raw:
        raise BadInput(f"--filter {expr!r}: no VALUE after {op!r}; give FIELD{op}VALUE, or FIELD{op}\"\" "
                       "for an empty string")
    if raw[0] in "=<>":
        raise BadInput(f"--filter {expr!r}: the value starts with {raw[0]!r}, a doubled operator; "
                       "use one of = != < <= > >=, and quote a value that starts with one of them")
    value = _unquote(raw)
    _check_value(expr, value)
    if op in ("<", "<=", ">", ">=") and _ordered(value) is None:
        raise BadInput(f"--filter {expr!r}: {op} needs a number or an ISO date (like 2025-01-31), not {value!r}")
    return Condition(expr, field, op, value)


def chunk_mask(exprs: str | Sequence[str] | None, chunks: pa.Table, docs: pa.Table | None) -> np.ndarray | None:
    """The (n,) bool mask over `chunks` (an index generation's chunk table)
    of the chunks matching every expression in `exprs`, or None when there
    are none. `docs` is the generation's docs table (doc_id, path, title,
    n_chars, metadata JSON), None for a generation written before it had
    one. Raises BadInput for a bad expression or an unknown field (listing
    the fields that exist)."""
    if isinstance(exprs, str):
        exprs = [exprs]
    exprs = [e for e in exprs or [] if e is not None]
    if not exprs:
        return None
    conditions = [parse(e) for e in exprs]
    n = chunks.num_rows
    chunk_fields = [c for c in chunks.column_names if c not in TEXT_COLUMNS]
    doc_rows, meta = _doc_fields(docs)
    mask = np.ones(n, dtype=bool)
    doc_of_chunk = None
    for cond in conditions:
        if cond.field in chunk_fields:
            values = chunks.column(cond.field).to_pylist()
            mask &= np.fromiter((cond.matches(v) for v in values), dtype=bool, count=n)
            continue
        if docs is None or (cond.field not in DOC_FIELDS and cond.field not in meta):
            fields = chunk_fields + ([f for f in DOC_FIELDS if docs is not None]) + sorted(meta)
            hint = "" if docs is not None else (" (this index generation has no document table: rebuild it with "
                                                "`rag index` to filter on document fields and metadata)")
            raise BadInput(f"--filter {cond.expr!r}: no field {cond.field!r}; the fields are "
                           f"{', '.join(fields)}{hint}")
        if doc_of_chunk is None:
            row_of = {d: i for i, d in enumerate(doc_rows["doc_id"])}
            doc_of_chunk = np.fromiter((row_of.get(d, -1) for d in chunks.column("doc_id").to_pylist()),
                                       dtype=np.int64, count=n)
        if cond.field in DOC_FIELDS:
            values = doc_rows[cond.field]
        else:
            values = [m.get(cond.field) for m in doc_rows["metadata"]]
        doc_ok = np.append(np.fromiter((cond.matches(v) for v in values), dtype=bool, count=len(values)),
                           cond.matches(None))  # index -1: a chunk whose document is not in the table
        mask &= doc_ok[doc_of_chunk]
    return mask


def _doc_fields(docs: pa.Table | None) -> tuple[dict[str, list], set[str]]:
    """(columns of `docs` as lists with metadata parsed to dicts, the metadata keys that occur)."""
    if docs is None:
        return {}, set()
    rows = {c: docs.column(c).to_pylist() for c in ("doc_id", *DOC_FIELDS) if c in docs.column_names}
    metas = []
    for m in (docs.column("metadata").to_pylist() if "metadata" in docs.column_names else [None] * docs.num_rows):
        try:
            parsed = json.loads(m) if m else {}
        except ValueError:
            parsed = {}
        metas.append(parsed if isinstance(parsed, dict) else {})
    rows["metadata"] = metas
    return rows, {k for m in metas for k in m}
