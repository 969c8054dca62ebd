"""`rag eval`: a run + qrels -> metrics, printed and written to eval/NAME.json."""

from __future__ import annotations

from pathlib import Path

from rag_cli import atomic
from rag_cli.evaluate.datasets import read_qrels
from rag_cli.evaluate.report import evaluate_rows
from rag_cli.project import Project, file_stem
from rag_cli.runs import read_run


def evaluate(project: Project, run_path: Path, qrels_path: Path, ks: list[int], name: str | None = None
             ) -> tuple[dict, Path]:
    """Evaluate the run at `run_path` against `qrels_path` at cutoffs `ks`.

    Document level by the best-ranked chunk per document (MaxP) unless the
    qrels judge chunk ids. Returns (report, path of eval/NAME.json); NAME
    defaults to RUN-QRELS (the stems of the two files).
    Raises BadInput for a missing or malformed run or qrels file.
    """
    qrels = read_qrels(qrels_path)
    rows = read_run(run_path)
    report = evaluate_rows(rows, qrels, ks)
    report = {"run": str(run_path), "qrels": str(qrels_path), **report}
    path = project.eval_path(name or f"{file_stem(run_path)}-{file_stem(qrels_path)}")
    atomic.write_json(path, report)
    return report, path
