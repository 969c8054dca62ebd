"""Robustness to changed queries (`rag eval perturb`): search the queries
as given and changed each way (upper, lower, typo, punct; see
`rag_cli.evaluate.perturb`), score every run against the qrels and report
per kind the metrics, the loss against the original (changed - original)
and its paired tests (`rag_cli.evaluate.compare.compare_reports`)."""

from __future__ import annotations

import os
from typing import Sequence

from rag_cli.errors import BadInput
from rag_cli.lab.common import cutoffs, file_stem, prepare, read_judged
from rag_cli.lab.report import Report, ids
from rag_cli.progress import Progress


def run(p, qrels: str | os.PathLike, queries: str | os.PathLike, kinds: Sequence[str], *, mode: str | None = None,
        ks: str | list[int] | None = None, seed: int = 0, permutations: int = 10000, name: str | None = None,
        output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
        plots: str | os.PathLike | None = None, progress: Progress | None = None) -> "PerturbReport":
    """Search `queries` in project `p` (`mode`; None: search.mode) as given
    and changed each way of `kinds` (`--perturb` values: case = upper and
    lower, upper, lower, typo (seeded `seed`), punct; repeated or
    comma-separated; run in that order, each once), down to max(ks)
    distinct documents, score each against `qrels` at `ks` (default
    1,5,10,20,100) and compare it with the original (`permutations` random
    sign flips). Writes `output`, else eval/NAME.json (NAME: `name`, else
    perturb-QUERIES). The report counts the judged queries asked
    ("n_queries_asked") apart from those the qrels judge ("n_queries", the
    mean's denominator) and lists the qrels queries not in `queries`
    ("qrels_queries_not_asked"; they score 0 in every run, and a warning says so).
    Raises BadInput for bad --ks, no or unknown kinds, a missing project,
    qrels that judge nothing here, or a bad file."""
    from rag_cli.evaluate.compare import compare_reports
    from rag_cli.evaluate.perturb import expand_kinds, perturb_queries
    from rag_cli.evaluate.report import evaluate_rows
    from rag_cli.stages.search import search_rows

    ks = cutoffs(ks)
    if not kinds:
        raise BadInput("--perturb: name one or more of case, upper, lower, typo, punct")
    try:
        kinds = expand_kinds(kinds)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    path = prepare(p, {"--queries": queries, "--qrels": qrels}, name=name, default=f"perturb-{file_stem(queries)}",
                   output=output, md=md, plots=plots)
    original, gold = read_judged(p, queries, qrels)
    config, s, mask = p.engines.search_setup({"mode": mode, "k": max(ks)})
    base = evaluate_rows(search_rows(s, original, config.search, mask, progress=progress), gold, ks)
    asked = {q for q, _ in original}
    data = {"queries": str(queries), "qrels": str(qrels), "mode": config.search.mode, "seed": seed,
            "n_queries": base["n_queries"], "n_queries_asked": sum(q in gold for q in asked),
            "qrels_queries_not_asked": sorted(q for q in gold if q not in asked),
            "original": base["metrics"], "perturbations": {}}
    for kind in kinds:
        changed = perturb_queries(original, kind, seed)
        rep = evaluate_rows(search_rows(s, changed, config.search, mask, progress=progress), gold, ks)
        comp = compare_reports([base, rep], ["original", kind], permutations=permutations)["comparisons"][0]
        data["perturbations"][kind] = {
            "n_changed": sum(a != b for (_, a), (_, b) in zip(original, changed)),
            "metrics": rep["metrics"],
            "loss": {m: r["mean_diff"] for m, r in comp["metrics"].items()},
            "comparison": comp["metrics"],
            "examples": [t for (_, o), (_, t) in zip(original, changed) if o != t][:3],
        }
    report = PerturbReport(data, path)
    report.save()
    return report


class PerturbReport(Report):
    """The original metrics and, per kind of change, its loss."""

    kind = "perturb"

    def _messages(self) -> list[tuple[str, str]]:
        r = self.data
        missing = r.get("qrels_queries_not_asked") or []
        if not missing:
            return []
        return [("warning", f"{len(missing)} of {r['n_queries']} qrels queries are not in --queries {r['queries']} "
                            f"and score 0 in every run (is it the queries and qrels of the same set?): {ids(missing)}")]

    def print_tables(self, console) -> None:
        """One row per metric (every metric at every cutoff), one column per
        kind of change with its loss: the table stays narrow."""
        from rich.table import Table

        r = self.data
        kinds = r["perturbations"]
        table = Table(title=f"perturbed queries ({r.get('n_queries_asked', r['n_queries'])} asked of "
                            f"{r['n_queries']} judged, mode {r['mode']}): changed - original")
        table.add_column("metric")
        table.add_column("original", justify="right")
        for kind in kinds:
            table.add_column(kind, justify="right")
        table.add_row("queries changed", "", *(str(k["n_changed"]) for k in kinds.values()), end_section=True)
        for m, v in r["original"].items():
            table.add_row(m, f"{v:.4f}", *(f"{k['loss'][m]:+.4f}" for k in kinds.values()))
        console.print(table)
