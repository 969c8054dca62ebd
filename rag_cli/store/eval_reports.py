"""eval/NAME.json: the report of one evaluation.

Keys: run, qrels (the paths evaluated), level ("doc" or "chunk"),
n_queries, metrics ({"ndcg@10": mean, ...}), per_query ({query_id: {metric:
value}}), plus counts such as n_queries_missing_from_run.
"""

from __future__ import annotations

import json
from pathlib import Path

from rag_cli import atomic
from rag_cli.errors import BadInput


def write_report(path: Path, report: dict) -> None:
    """Write a report as indented UTF-8 JSON, atomically."""
    atomic.write_json(path, report)


def read_report(path: Path) -> dict:
    """Read a report. Raises BadInput naming the file if it is not a JSON object with `metrics`."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: not a readable eval report ({exc})") from exc
    if not isinstance(report, dict) or "metrics" not in report:
        raise BadInput(f"{path}: not an eval report of rag-cli (no 'metrics')")
    return report
