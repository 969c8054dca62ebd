"""logs/: what `rag serve --log` records, as Parquet parts a reader can
open at any time (DuckDB: `read_parquet('.rag/logs/queries/*.parquet')`).

    logs/
      queries/YYYYMMDD-HHMMSS-PID-SEQ.parquet    one row per /search or /ask request (HTTP or MCP)
      feedback/YYYYMMDD-HHMMSS-PID-SEQ.parquet   one row per POST /feedback

Parquet files cannot be appended to, so a writer (`LogWriter`) buffers rows
and writes each batch as a new part (atomically: temporary file, rename),
when `flush_rows` rows are waiting, every `flush_seconds`, and when it is
closed (the server's shutdown). A part is never changed once written; the
time, process id and a sequence number in its name keep names unique.

Columns of a query row (`QUERY_SCHEMA`):

- time (timestamp, UTC, ms): when the request arrived;
- answer_id (string, 32 hex digits): the id the response carried
  (`X-Rag-Answer-Id`), which `/feedback` refers to;
- endpoint (`search` | `ask`), via (`http` | `mcp`);
- query (the query or question as sent), mode, k (int32; null when the
  request left them to rag.toml and failed before they were resolved),
  filter (list of the filter expressions);
- generation: the index generation that answered (`gen-000007`);
- hit_ids (list of chunk ids, best first: the hits of a search, the
  evidence of an answer), best_cosine (float64: the best bi-encoder cosine
  among them; null when none was computed, e.g. a sparse search);
- latency_ms (float64, the server's time from parsing to the answer);
- refused (bool; null for a search), reason (why it was refused, "" if
  answered; null for a search);
- status (int16: 200, or the error's HTTP status), error (its message, null on success).

Columns of a feedback row (`FEEDBACK_SCHEMA`): time, answer_id, rating
(`up` | `down`), comment (string, null when none).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from rag_cli import atomic

QUERY_SCHEMA = pa.schema([
    ("time", pa.timestamp("ms", tz="UTC")), ("answer_id", pa.string()), ("endpoint", pa.string()),
    ("via", pa.string()), ("query", pa.string()), ("mode", pa.string()), ("k", pa.int32()),
    ("filter", pa.list_(pa.string())), ("generation", pa.string()), ("hit_ids", pa.list_(pa.string())),
    ("best_cosine", pa.float64()), ("latency_ms", pa.float64()), ("refused", pa.bool_()), ("reason", pa.string()),
    ("status", pa.int16()), ("error", pa.string())])

FEEDBACK_SCHEMA = pa.schema([("time", pa.timestamp("ms", tz="UTC")), ("answer_id", pa.string()),
                             ("rating", pa.string()), ("comment", pa.string())])

#: logs/<kind>/ of each kind of row, and its schema.
KINDS = {"queries": QUERY_SCHEMA, "feedback": FEEDBACK_SCHEMA}

RATINGS = ("up", "down")


def logs_dir(project_root: Path) -> Path:
    """The project's logs/ folder."""
    return Path(project_root) / "logs"


def now() -> datetime:
    """The current time, UTC (a row's `time`)."""
    return datetime.now(timezone.utc)


class LogWriter:
    """Append rows of one kind ("queries" or "feedback") to logs/<kind>/ as Parquet parts.

    `append(row)` (a dict with the schema's keys) is thread-safe and cheap:
    rows wait in memory until `flush_rows` are waiting, `flush_seconds`
    have passed (a daemon thread started by `start()`), or `close()`.

    Drop policy (docs/serve.md#the-query-log-feedback-and-online-metrics): a row that cannot be
    converted to the schema (a query holding a lone surrogate, which UTF-8 cannot encode) is dropped
    at once, never retried; a part that cannot be written (a full disk) is retried at the next flush,
    but at most `max_rows` rows wait: beyond them the oldest are dropped. `n_dropped` counts the dropped
    rows, `error` keeps the last message (without the folder's path), and `on_error(message)` (stderr
    in `rag serve`) is told of each failure.
    """

    _seq = itertools.count()

    def __init__(self, project_root: Path, kind: str, *, flush_rows: int = 1000, flush_seconds: float = 30.0,
                 max_rows: int = 100_000, on_error=None):
        if kind not in KINDS:
            raise ValueError(f"unknown log kind {kind!r}; known: {', '.join(KINDS)}")
        self.folder = logs_dir(project_root) / kind
        self.schema = KINDS[kind]
        self.flush_rows, self.flush_seconds, self.max_rows = flush_rows, flush_seconds, max(max_rows, flush_rows)
        self.on_error = on_error or (lambda message: None)
        self._rows: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.n_written = 0
        self.n_dropped = 0

    def start(self) -> "LogWriter":
        """Start the thread that flushes every `flush_seconds`; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"rag-log-{self.folder.name}", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            self.flush()

    def append(self, row: dict) -> None:
        with self._lock:
            self._rows.append(row)
            full = len(self._rows) >= self.flush_rows
        if full:
            self.flush()

    def _table(self, rows: list[dict]) -> pa.Table:
        """`rows` as a table of the schema, less the rows that cannot be converted (dropped and counted)."""
        try:
            return pa.Table.from_pylist(rows, schema=self.schema)
        except Exception:  # noqa: BLE001 - find the rows at fault; arrow raises several kinds
            pass
        kept, bad = [], None
        for row in rows:
            try:
                pa.Table.from_pylist([row], schema=self.schema)
                kept.append(row)
            except Exception as exc:  # noqa: BLE001
                bad = exc
        self._failed(len(rows) - len(kept), f"{type(bad).__name__}: {bad}", "cannot be stored")
        return pa.Table.from_pylist(kept, schema=self.schema)

    def _failed(self, n_dropped: int, message: str, why: str) -> None:
        self.n_dropped += n_dropped
        self.error = f"logs/{self.folder.name}: {message}"
        dropped = f"{n_dropped} row(s) dropped ({why}; {self.n_dropped} in all)" if n_dropped else "rows kept"
        self.on_error(f"the {self.folder.name} log: {dropped}: {message}")

    def flush(self) -> Path | None:
        """Write the waiting rows as one new part; returns its path (None when none were waiting or it failed)."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return None
        table = self._table(rows)
        if table.num_rows == 0:
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        path = self.folder / f"{stamp}-{os.getpid()}-{next(self._seq):06d}.parquet"
        try:
            atomic.write_parquet(path, table)
        except Exception as exc:  # noqa: BLE001 - a log must never take the server down
            with self._lock:
                self._rows = table.to_pylist() + self._rows  # kept for the next try, at most max_rows
                over = max(len(self._rows) - self.max_rows, 0)
                del self._rows[:over]
            self._failed(over, f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}",
                         f"over {self.max_rows} waiting")
            return None
        self.n_written += table.num_rows
        return path

    def close(self) -> None:
        """Stop the flushing thread and write what is waiting."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()


def read_log(project_root: Path, kind: str) -> pa.Table:
    """Every part of logs/<kind>/ as one table of the kind's schema (empty when there is none), ordered by
    time. Raises BadInput naming a part that cannot be read."""
    import pyarrow.parquet as pq

    from rag_cli.errors import BadInput

    schema = KINDS[kind]
    tables = []
    for path in sorted((logs_dir(project_root) / kind).glob("*.parquet")):
        try:
            t = pq.ParquetFile(path).read()
            tables.append(t.select(schema.names).cast(schema))
        except Exception as exc:  # arrow raises its own kinds
            raise BadInput(f"{path} cannot be read as a {kind} log part ({type(exc).__name__}: {exc}); "
                           "move it out of the folder") from exc
    if not tables:
        return schema.empty_table()
    table = pa.concat_tables(tables)
    return table.sort_by("time")
