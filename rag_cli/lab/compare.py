"""Compare runs (`rag eval compare`): each scored against the qrels as
`rag_cli.lab.score` scores one, and each compared with the first (the
baseline) per metric: the mean difference, paired randomisation and t-test
p-values, Holm-corrected across the metrics, and win/tie/loss counts (see
`rag_cli.evaluate.compare`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rag_cli.errors import BadInput
from rag_cli.lab.common import cutoffs, file_stem, prepare
from rag_cli.lab.report import Report, count
from rag_cli.lab.score import qrels_repeat_messages, run_check_messages

#: what a comparison keeps of each run's report under "run_checks" (see `rag_cli.evaluate.report.evaluate_run`)
RUN_CHECKS = ("n_queries", "queries_missing_from_run", "run_queries_not_in_qrels", "duplicates", "run_depth", "ks")


def compare_runs(run_paths: list[Path], qrels_path: Path, ks: list[int], *, permutations: int = 10000,
                 seed: int = 0, metrics: list[str] | None = None) -> dict:
    """Score each run against `qrels_path` at `ks` and compare every run
    with the first (`rag_cli.evaluate.compare.compare_reports`, `permutations`
    random sign flips seeded `seed`); "run_checks" holds per run its name
    (the file name, or the path when two names are equal) and the
    RUN_CHECKS of its report. `metrics` (e.g. ["ndcg@10", "recall@100"];
    None: all) are the metrics compared and Holm-corrected across.
    Returns the report.
    Raises BadInput for fewer than two runs, permutations < 1, a metric
    not scored, a run that shares no query of the qrels with the baseline
    (every paired difference would be against a missing run's 0), or a
    missing or malformed file."""
    from rag_cli.evaluate.compare import compare_reports
    from rag_cli.evaluate.datasets import read_qrels
    from rag_cli.evaluate.report import evaluate_rows, qrels_repeated
    from rag_cli.store.runs import read_run

    if len(run_paths) < 2:
        raise BadInput(f"rag eval compare needs two or more run files (the first is the baseline), "
                       f"got {len(run_paths)}")
    if permutations < 1:
        raise BadInput(f"--permutations {permutations}: must be at least 1")
    qrels = read_qrels(qrels_path)
    stems = [Path(p).name for p in run_paths]
    names = stems if len(set(stems)) == len(stems) else [str(p) for p in run_paths]
    reports = [evaluate_rows(read_run(p), qrels, ks) for p in run_paths]
    answered = [set(r["per_query"]) - set(r["queries_missing_from_run"]) for r in reports]
    for path, got in zip(run_paths[1:], answered[1:]):
        if not got & answered[0]:
            raise BadInput(f"{path} and {run_paths[0]} share no query of {qrels_path}: there is nothing to "
                           "compare (each query would compare a score with a missing run's 0); compare runs of "
                           "the same queries")
    checks = [{"run": n, **{key: r[key] for key in RUN_CHECKS}} for n, r in zip(names, reports)]
    try:
        compared = compare_reports(reports, names, permutations=permutations, seed=seed, metrics=metrics)
    except ValueError as exc:
        raise BadInput(f"--metrics: {exc}") from None
    return {"qrels": str(qrels_path), "run_files": [str(p) for p in run_paths], **compared, "run_checks": checks,
            "qrels_duplicates": qrels_repeated(qrels)}


def run(p, qrels: str | os.PathLike, runs: Sequence[str | os.PathLike], *, ks: str | list[int] | None = None,
        permutations: int = 10000, seed: int = 0, name: str | None = None, output: str | os.PathLike | None = None,
        md: str | os.PathLike | None = None, plots: str | os.PathLike | None = None,
        metrics: str | Sequence[str] | None = None) -> "CompareReport":
    """Compare `runs` (the first is the baseline) against `qrels`; see
    `compare_runs`; `metrics` "ndcg@10,recall@100" (or a list) restricts
    the comparison and Holm's correction to those. Needs no project folder. Writes `output`, else
    eval/NAME.json of project `p` (NAME: `name`, else compare-FIRST-QRELS)
    when its folder exists, else nothing (`path` None).
    Raises BadInput for bad --ks, fewer than two runs, permutations < 1, or
    a bad input or output file."""
    ks = cutoffs(ks)
    if isinstance(metrics, str):
        metrics = [m.strip().lower() for m in metrics.split(",") if m.strip()]
    default = f"compare-{file_stem(runs[0])}-{file_stem(qrels)}" if runs else None
    path = prepare(p, {"RUNS": list(runs), "--qrels": qrels}, name=name, default=default, output=output, md=md,
                   plots=plots, project=False)
    report = CompareReport(compare_runs([Path(r) for r in runs], Path(qrels), ks, permutations=permutations,
                                        seed=seed, metrics=list(metrics) if metrics is not None else None), path)
    if path is not None:
        report.save()
    return report


class CompareReport(Report):
    """A comparison of runs with the first: one table per run."""

    kind = "compare"

    def _messages(self) -> list[tuple[str, str]]:
        """The qrels' repeated rows, then the checks of each run (`run_check_messages`), each led by the run's
        name."""
        return ([("warning", m) for m in qrels_repeat_messages(self.data)]
                + [m for check in self.data["run_checks"] for m in run_check_messages(check, run=check["run"])])

    def print_tables(self, console) -> None:
        """Per run: metric x (baseline, run, diff, p rand, p t-test, W/T/L), the runs named by their stems."""
        from rich.table import Table

        from rag_cli.safe_text import plain_text

        def short(name: str) -> str:  # the file stem: the columns stay apart and narrow
            return name.rsplit(".", 1)[0] if name.endswith((".parquet", ".trec")) else name

        n = self.data["n_queries"]
        for comp in self.data["comparisons"]:
            base, run_ = short(comp["baseline"]), short(comp["run"])
            table = Table(title=plain_text(f"baseline {base} vs {run_}: {count(n, 'query')}; diff = {run_} − "
                                           f"{base} (p: two-sided, Holm-corrected across {len(comp['metrics'])} "
                                           "metrics)"))
            table.add_column("metric", no_wrap=True)
            for col in (base, run_, "diff", "p rand", "p t-test", "W/T/L"):
                table.add_column(plain_text(col), justify="right", overflow="fold")
            for m, r in comp["metrics"].items():
                table.add_row(m, f"{r['baseline']:.4f}", f"{r['run']:.4f}", f"{r['mean_diff']:+.4f}",
                              f"{r['p_randomisation_holm']:.4f}", f"{r['p_t_test_holm']:.4f}",
                              f"{r['wins']}/{r['ties']}/{r['losses']}")
            console.print(table)
