"""`rag eval`: a run + qrels -> metrics, written to eval/NAME.json."""

from __future__ import annotations

from pathlib import Path

from rag_cli.evaluate.datasets import read_qrels
from rag_cli.evaluate.report import evaluate_rows
from rag_cli.store.eval_reports import write_report
from rag_cli.store.runs import read_run


def evaluate(run_path: Path, qrels_path: Path, ks: list[int], path: Path | None) -> dict:
    """Evaluate the run at `run_path` against `qrels_path` at cutoffs `ks`
    and write the report to `path` (eval/NAME.json; None: not written).

    Document level by the best-ranked chunk per document (MaxP) unless the
    qrels judge chunk ids. Returns the report.
    Raises BadInput for a missing or malformed run or qrels file.
    """
    qrels = read_qrels(qrels_path)
    rows = read_run(run_path)
    report = {"run": str(run_path), "qrels": str(qrels_path), **evaluate_rows(rows, qrels, ks)}
    if path is not None:
        write_report(path, report)
    return report
