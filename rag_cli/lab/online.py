"""Online metrics (`rag eval online`): what the query log of `rag serve
--log` says about the served index (logs/queries/, logs/feedback/; see
`rag_cli.store.query_log`).

Over the requests logged between `since` and `until`:

- error rate (requests answered with 4xx or 5xx) and the requests per
  endpoint, front end and index generation;
- refusal rate: refused answers / answered `ask` requests (the seeds'
  "empty-answer rate");
- thumbs-down rate: answers rated down / answers rated (each answer's last
  rating counts), and the share of answers rated at all;
- latency percentiles P50/P95/P99 (ms, the server's own time per request),
  per endpoint and over all successful requests;
- the most frequent queries without a good hit: a successful request has
  no good hit when it returned no hits, was refused, its best bi-encoder
  cosine is below the threshold of its language (default: the project's
  ask.min_score for a query with Chinese characters, ask.min_score_en for
  the others, as the refusal gate judges them), or its answer was rated down. Queries are grouped by their normalised form
  (NFKC, case-folded, whitespace collapsed) and shown as most often sent.
"""

from __future__ import annotations

import os
import unicodedata
from collections import Counter, defaultdict
from datetime import datetime, timezone

from rag_cli.errors import BadInput
from rag_cli.lab.common import prepare
from rag_cli.lab.report import Report

#: Why a request had no good hit, in the order a report lists them.
REASONS = ("no_hits", "refused", "low_cosine", "thumbs_down")


def run(p, *, since: str | None = None, until: str | None = None, top: int = 10, min_score: float | None = None,
        name: str | None = None, output: str | os.PathLike | None = None,
        md: str | os.PathLike | None = None) -> "OnlineReport":
    """The online metrics of project `p` from its query log (see the module
    docstring): requests whose time is at or after `since` and before
    `until` (ISO dates or times, UTC unless they say otherwise; None = no
    bound), the `top` most frequent queries without a good hit, a good hit's
    cosine at least `min_score` for every query (None: the gate's threshold
    of the query's language, ask.min_score or ask.min_score_en of rag.toml,
    `rag_cli.generate.gate.min_score_for`). Writes
    `output`, else eval/NAME.json (NAME: `name`, else "online"), and `md`.
    Raises BadInput for a bad --since/--until/--top, a missing project, or no
    query log (start the server with `rag serve --log`)."""
    from rag_cli.store.query_log import logs_dir, read_log

    start, end = _time("--since", since), _time("--until", until)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise BadInput(f"--top {top!r}: give a whole number of queries, at least 1")
    path = prepare(p, {}, name=name, default="online", output=output, md=md)
    if not (logs_dir(p.root) / "queries").is_dir():
        raise BadInput(f"{logs_dir(p.root) / 'queries'} does not exist: nothing was logged; serve the project with "
                       "`rag serve --log` (config serve.log) to record its queries")
    queries = read_log(p.root, "queries").to_pylist()
    feedback = read_log(p.root, "feedback").to_pylist()
    queries = [r for r in queries if (start is None or r["time"] >= start) and (end is None or r["time"] < end)]
    if min_score is None:
        data = summarize(queries, feedback, min_score=p.config.ask.min_score,
                         min_score_en=p.config.ask.min_score_en, top=top)
    else:
        data = summarize(queries, feedback, min_score=float(min_score), top=top)
    data.update(log=str(logs_dir(p.root)), since=since, until=until)
    report = OnlineReport(data, path)
    if path is not None:
        report.save()
    if md is not None:
        report.write_summaries(md=md)
    return report


def _time(flag: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BadInput(f"{flag} {value!r}: give an ISO date or time, e.g. 2026-12-01 or 2026-12-01T08:00:00Z") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def normalized(query: str) -> str:
    """The form queries are grouped by: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", query or "").casefold().split())


def percentiles(values: list[float]) -> dict:
    """{n, mean, p50, p95, p99} of latencies (ms, 1 decimal; linear interpolation), None values without data."""
    import numpy as np

    if not values:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    a = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"n": len(values), "mean": round(float(a.mean()), 1), "p50": round(float(p50), 1),
            "p95": round(float(p95), 1), "p99": round(float(p99), 1)}


def _rate(n: int, of: int) -> float | None:
    return n / of if of else None


def summarize(queries: list[dict], feedback: list[dict], *, min_score: float, min_score_en: float | None = None,
              top: int = 10) -> dict:
    """The report dict of query-log rows `queries` and feedback rows
    `feedback` (dicts with the columns of `rag_cli.store.query_log`). A
    query's best cosine is low below `min_score` when the query has Chinese
    characters, else below `min_score_en` (None: `min_score`), the rule of
    `rag_cli.generate.gate.min_score_key`."""
    from rag_cli.generate.gate import min_score_key
    from rag_cli.loaders.normalize import has_cjk

    thresholds = {"min_score": min_score, "min_score_en": min_score if min_score_en is None else min_score_en}
    ok = [r for r in queries if r["status"] == 200]
    asks = [r for r in ok if r["endpoint"] == "ask"]
    ratings = {f["answer_id"]: f["rating"] for f in sorted(feedback, key=lambda f: f["time"])}
    answered_ids = {r["answer_id"] for r in ok}
    rated = {a: v for a, v in ratings.items() if a in answered_ids}
    down = sum(v == "down" for v in rated.values())
    groups: dict[str, dict] = defaultdict(lambda: {"count": 0, "forms": Counter(), **{k: 0 for k in REASONS}})
    n_bad = 0
    for r in ok:
        why = [k for k, bad in (("no_hits", not r["hit_ids"]), ("refused", bool(r["refused"])),
                                ("low_cosine", r["best_cosine"] is not None
                                 and r["best_cosine"] < thresholds[min_score_key(has_cjk(r["query"] or ""))]),
                                ("thumbs_down", rated.get(r["answer_id"]) == "down")) if bad]
        if not why:
            continue
        n_bad += 1
        g = groups[normalized(r["query"])]
        g["count"] += 1
        g["forms"][r["query"]] += 1
        for k in why:
            g[k] += 1
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1]["count"], kv[0]))[:top]
    times = [r["time"] for r in queries]
    latency = {e: percentiles([r["latency_ms"] for r in ok if r["endpoint"] == e]) for e in ("search", "ask")}
    latency["all"] = percentiles([r["latency_ms"] for r in ok])
    errors = Counter(str(r["status"]) for r in queries if r["status"] != 200)
    metrics = {"error_rate": _rate(len(queries) - len(ok), len(queries)),
               "refusal_rate": _rate(sum(bool(r["refused"]) for r in asks), len(asks)),
               "thumbs_down_rate": _rate(down, len(rated)),
               "no_good_hit_rate": _rate(n_bad, len(ok)),
               "latency_p50_ms": latency["all"]["p50"], "latency_p95_ms": latency["all"]["p95"],
               "latency_p99_ms": latency["all"]["p99"]}
    return {
        "kind": "online", "from": min(times).isoformat() if times else None,
        "to": max(times).isoformat() if times else None, **thresholds,
        "n_requests": len(queries), "n_ok": len(ok), "n_search": sum(r["endpoint"] == "search" for r in ok),
        "n_ask": len(asks), "n_refused": sum(bool(r["refused"]) for r in asks), "errors_by_status": dict(errors),
        "by_via": dict(Counter(r["via"] for r in queries)),
        "by_generation": dict(sorted(Counter(r["generation"] for r in queries).items())),
        "feedback": {"n_rated": len(rated), "up": len(rated) - down, "down": down,
                     "rated_share": _rate(len(rated), len(ok)),
                     "n_unknown_answer_ids": len(set(ratings) - answered_ids)},
        "metrics": metrics, "latency_ms": latency,
        "without_good_hit": {"n": n_bad, "top": [
            {"query": g["forms"].most_common(1)[0][0], "count": g["count"], **{k: g[k] for k in REASONS}}
            for _, g in ranked]},
    }


class OnlineReport(Report):
    """Refusal, thumbs-down and error rates, latency percentiles, and the queries without a good hit."""

    kind = "online"

    def _messages(self) -> list[tuple[str, str]]:
        d = self.data
        out = []
        if d["n_requests"] == 0:
            out.append(("warning", "the query log holds no request in this period"))
        if d["feedback"]["n_unknown_answer_ids"]:
            out.append(("note", f"{d['feedback']['n_unknown_answer_ids']} rated answer id(s) are not in the "
                                "requests of this period (rated earlier or later, or not logged)"))
        return out

    def print_tables(self, console) -> None:
        from rich.table import Table

        from rag_cli.safe_text import plain_text

        d, m = self.data, self.data["metrics"]
        pct = lambda v: "n/a" if v is None else f"{v:.1%}"  # noqa: E731
        t = Table(title=f"online metrics ({d['n_requests']} requests, {d['from'] or '-'} to {d['to'] or '-'})")
        t.add_column("metric")
        t.add_column("value", justify="right")
        for label, value in (("searches answered", str(d["n_search"])), ("questions answered", str(d["n_ask"])),
                             ("error rate", pct(m["error_rate"])), ("refusal rate", pct(m["refusal_rate"])),
                             ("thumbs-down rate", f"{pct(m['thumbs_down_rate'])} of {d['feedback']['n_rated']} rated"),
                             ("without a good hit", pct(m["no_good_hit_rate"]))):
            t.add_row(label, value)
        console.print(t)
        lat = Table(title="latency, ms (successful requests)")
        for col in ("endpoint", "n", "p50", "p95", "p99"):
            lat.add_column(col, justify="left" if col == "endpoint" else "right")
        for endpoint, v in d["latency_ms"].items():
            lat.add_row(endpoint, str(v["n"]), *("-" if v[k] is None else f"{v[k]:.1f}" for k in ("p50", "p95", "p99")))
        console.print(lat)
        if d["without_good_hit"]["top"]:
            q = Table(title=f"most frequent queries without a good hit (cosine < {_thresholds(d)}, no hits, "
                            "refused or rated down)")
            for col in ("query", "count", *REASONS):
                q.add_column(col, justify="left" if col == "query" else "right")
            for row in d["without_good_hit"]["top"]:
                q.add_row(plain_text(row["query"]), *(str(row[k]) for k in ("count", *REASONS)))
            console.print(q)

    def markdown(self) -> str:
        from rag_cli.evaluate.markdown import _table

        d = self.data
        lines = [f"# Online metrics: {d['n_requests']} requests, {d['from'] or '-'} to {d['to'] or '-'}", ""]
        lines += _table(["metric", "value"], [[k, v] for k, v in d["metrics"].items()])
        lines += _table(["endpoint", "n", "p50 ms", "p95 ms", "p99 ms"],
                        [[e, v["n"], v["p50"], v["p95"], v["p99"]] for e, v in d["latency_ms"].items()])
        lines += [f"A good hit has a cosine of at least {_thresholds(d)}.", ""]
        lines += _table(["query without a good hit", "count", *REASONS],
                        [[r["query"], r["count"], *(r[k] for k in REASONS)] for r in d["without_good_hit"]["top"]])
        return "\n".join(lines)


def _thresholds(d: dict) -> str:
    """The report's cosine thresholds in words: "0.82", or "0.82 (Chinese) / 0.81 (others)"."""
    zh, en = d["min_score"], d.get("min_score_en", d["min_score"])
    return f"{zh:g}" if zh == en else f"{zh:g} (queries with Chinese characters) / {en:g} (others)"
