"""The query log of `rag serve --log` (rag_cli.store.query_log) and the
online metrics computed from it (rag_cli.lab.online), on logs written
here: the parts, their schema, flushing, and every number of the report
checked by hand. (tests/test_serve.py runs the same through a real server.)"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest

from rag_cli import Project, lab
from rag_cli.errors import BadInput
from rag_cli.lab.online import OnlineReport, normalized, percentiles, summarize
from rag_cli.store.query_log import FEEDBACK_SCHEMA, QUERY_SCHEMA, LogWriter, read_log

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


def row(i: int, query: str, *, endpoint: str = "search", hits=("a#0",), cosine=0.9, refused=None, status=200,
        ms: float = 10.0, gen: str = "gen-000001", via: str = "http") -> dict:
    return {"time": T0 + timedelta(seconds=i), "answer_id": f"{i:032x}", "endpoint": endpoint, "via": via,
            "query": query, "mode": "hybrid", "k": 5, "filter": None, "generation": gen,
            "hit_ids": list(hits) if status == 200 else None, "best_cosine": cosine if status == 200 else None,
            "latency_ms": ms, "refused": refused, "reason": "" if refused is False else None, "status": status,
            "error": None if status == 200 else "bad"}


def feedback(i: int, answer: int, rating: str) -> dict:
    return {"time": T0 + timedelta(seconds=100 + i), "answer_id": f"{answer:032x}", "rating": rating, "comment": None}


ROWS = [
    row(0, "rrf fusion", ms=5),
    row(1, "RRF  Fusion", ms=7, cosine=0.5),              # low cosine; the same query as 0 once normalised
    row(2, "weather today", endpoint="ask", refused=True, ms=50, hits=()),  # refused, no evidence
    row(3, "bm25", endpoint="ask", refused=False, ms=70),
    row(4, "", status=400, ms=1),
    row(5, "rrf fusion", ms=9, cosine=None, hits=()),     # no hits (sparse: no cosine)
    row(6, "hnsw", ms=11, via="mcp", gen="gen-000002"),
]
FEEDBACK = [feedback(0, 3, "down"), feedback(1, 3, "up"), feedback(2, 6, "down"), feedback(3, 99, "down")]


def test_summarize_counts_every_metric():
    d = summarize(ROWS, FEEDBACK, min_score=0.82, top=2)
    assert (d["n_requests"], d["n_ok"], d["n_search"], d["n_ask"], d["n_refused"]) == (7, 6, 4, 2, 1)
    assert d["errors_by_status"] == {"400": 1} and d["by_via"] == {"http": 6, "mcp": 1}
    assert d["by_generation"] == {"gen-000001": 6, "gen-000002": 1}
    # the last rating of an answer counts (3: down, then up); 99 was never answered in this log
    assert d["feedback"] == {"n_rated": 2, "up": 1, "down": 1, "rated_share": 2 / 6, "n_unknown_answer_ids": 1}
    m = d["metrics"]
    assert m["error_rate"] == 1 / 7 and m["refusal_rate"] == 0.5 and m["thumbs_down_rate"] == 0.5
    assert m["no_good_hit_rate"] == 4 / 6  # 1 (low cosine), 2 (refused), 5 (no hits), 6 (rated down)
    assert d["latency_ms"]["search"] == percentiles([5, 7, 9, 11]) == {"n": 4, "mean": 8.0, "p50": 8.0, "p95": 10.7,
                                                                         "p99": 10.9}
    assert d["latency_ms"]["ask"]["n"] == 2 and d["latency_ms"]["all"]["n"] == 6
    assert d["without_good_hit"]["n"] == 4
    first, second = d["without_good_hit"]["top"]
    # grouped by the normalised query, shown in its most frequent form (the first seen on a tie)
    assert first == {"query": "RRF  Fusion", "count": 2, "no_hits": 1, "refused": 0, "low_cosine": 1,
                     "thumbs_down": 0} and normalized(first["query"]) == "rrf fusion"
    assert second == {"query": "hnsw", "count": 1, "no_hits": 0, "refused": 0, "low_cosine": 0, "thumbs_down": 1}


def test_summarize_of_an_empty_log_has_no_rates():
    d = summarize([], [], min_score=0.8)
    assert d["n_requests"] == 0 and all(v is None for v in d["metrics"].values())
    assert d["latency_ms"]["all"] == {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None}


def test_log_writer_parts_flush_and_read_back(tmp_path):
    w = LogWriter(tmp_path, "queries", flush_rows=3, flush_seconds=3600)
    threads = [threading.Thread(target=lambda r=r: w.append(r)) for r in ROWS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    parts = sorted((tmp_path / "logs" / "queries").glob("*.parquet"))
    assert len(parts) == 2  # 3 + 3 rows written, 1 waiting
    w.close()
    parts = sorted((tmp_path / "logs" / "queries").glob("*.parquet"))
    assert len(parts) == 3 and all(pq.read_schema(p).remove_metadata() == QUERY_SCHEMA for p in parts)
    table = read_log(tmp_path, "queries")
    assert table.num_rows == 7 and table.column("time").to_pylist() == sorted(r["time"] for r in ROWS)
    assert sorted(table.to_pylist(), key=lambda r: r["time"]) == ROWS
    assert read_log(tmp_path, "feedback").num_rows == 0 and read_log(tmp_path, "feedback").schema == FEEDBACK_SCHEMA


def test_log_writer_flushes_on_its_timer(tmp_path):
    w = LogWriter(tmp_path, "feedback", flush_rows=1000, flush_seconds=0.05).start()
    w.append(FEEDBACK[0])
    for _ in range(200):
        if list((tmp_path / "logs" / "feedback").glob("*.parquet")):
            break
        threading.Event().wait(0.05)
    assert read_log(tmp_path, "feedback").to_pylist() == [FEEDBACK[0]]
    w.close()


def test_a_row_that_cannot_be_stored_is_dropped_counted_and_logging_goes_on(tmp_path):
    """A lone surrogate cannot be encoded as UTF-8: its row is dropped at the first flush (never retried) and
    counted, the other rows of the batch and every later row are written."""
    told = []
    w = LogWriter(tmp_path, "queries", flush_rows=1000, flush_seconds=3600, on_error=told.append)
    w.append(row(0, "bm25 \ud800"))
    w.append(row(1, "bm25"))
    assert w.flush() is not None
    w.append(row(2, "hnsw"))
    assert w.flush() is not None
    assert read_log(tmp_path, "queries").column("query").to_pylist() == ["bm25", "hnsw"]
    assert w.n_dropped == 1 and w.n_written == 2 and len(told) == 1
    assert "1 row(s) dropped" in told[0] and "UnicodeEncodeError" in w.error and str(tmp_path) not in w.error


def test_rows_waiting_for_a_disk_are_bounded(tmp_path):
    """A part that cannot be written is retried, but at most max_rows rows wait: the oldest beyond are dropped."""
    told = []
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "feedback").write_text("not a folder")  # every part fails to be written
    w = LogWriter(tmp_path, "feedback", flush_rows=2, flush_seconds=3600, max_rows=3, on_error=told.append)
    for i in range(4):
        w.append(feedback(i, i, "up"))
    assert len(w._rows) == 3 and w.n_dropped == 1 and told
    (tmp_path / "logs" / "feedback").unlink()
    assert w.flush() is not None
    assert read_log(tmp_path, "feedback").to_pylist() == [feedback(i, i, "up") for i in (1, 2, 3)]


def test_a_damaged_part_is_named(tmp_path):
    (tmp_path / "logs" / "queries").mkdir(parents=True)
    (tmp_path / "logs" / "queries" / "x.parquet").write_bytes(b"not parquet")
    with pytest.raises(BadInput, match=r"x\.parquet cannot be read as a queries log part"):
        read_log(tmp_path, "queries")


def test_online_run_reads_the_project_log_and_writes_its_report(tmp_path):
    p = Project.create(tmp_path / "p")
    with pytest.raises(BadInput, match="rag serve --log"):
        lab.online.run(p)
    for kind, rows in (("queries", ROWS), ("feedback", FEEDBACK)):
        w = LogWriter(p.root, kind)
        for r in rows:
            w.append(r)
        w.close()
    report = lab.online.run(p, top=3)
    assert report.path == p.root / "eval" / "online.json"
    assert json.loads(report.path.read_text()) == json.loads(json.dumps(report.to_dict()))
    assert report["min_score"] == p.config.ask.min_score and report["n_requests"] == 7
    later = lab.online.run(p, since="2026-12-01T08:00:03Z", until="2026-12-01T08:00:06", name="window",
                           md=tmp_path / "o.md")
    assert later["n_requests"] == 3 and later.path.name == "window.json"  # rows 3, 4 and 5
    assert "| refusal_rate |" in (tmp_path / "o.md").read_text()
    assert lab.online.run(p, min_score=0.4)["metrics"]["no_good_hit_rate"] == 3 / 6
    for bad in ({"since": "yesterday"}, {"top": 0}, {"name": "a/b"}):
        with pytest.raises(BadInput):
            lab.online.run(p, **bad)


def test_the_report_renders(tmp_path, capsys):
    from rich.console import Console

    report = OnlineReport(summarize(ROWS, FEEDBACK, min_score=0.82), None)
    console = Console(record=True, width=200)
    report.print_tables(console)
    text = console.export_text()
    assert "refusal rate" in text and "50.0%" in text and "most frequent queries without a good hit" in text
    assert report.warnings() == []


def test_a_low_cosine_is_judged_by_the_threshold_of_the_query_language():
    """ask.min_score judges queries with Chinese characters, ask.min_score_en the others (the gate's rule):
    a cosine of 0.815 is low for a Chinese query at 0.82 and good for an English one at 0.81."""
    rows = [row(0, "what is rrf", cosine=0.815), row(1, "什么是 RRF", cosine=0.815), row(2, "hnsw", cosine=0.805)]
    d = summarize(rows, [], min_score=0.82, min_score_en=0.81)
    assert (d["min_score"], d["min_score_en"]) == (0.82, 0.81)
    assert sorted((r["query"], r["low_cosine"]) for r in d["without_good_hit"]["top"]) == [("hnsw", 1), ("什么是 RRF", 1)]
    one = summarize(rows, [], min_score=0.82)  # one threshold (rag eval online --min-score) judges every query
    assert one["min_score_en"] == 0.82 and one["without_good_hit"]["n"] == 3
    md = OnlineReport(d, None).markdown()
    assert "0.82 (queries with Chinese characters) / 0.81 (others)" in md
