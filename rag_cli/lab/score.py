"""Score a run against qrels (`rag eval run --qrels Q --run R`, or
`rag eval --qrels Q --run R`), or search a
query file first (`--queries`): Recall@k, Hit@k, MRR@k, nDCG@k, P@k,
MAP@k, MAP and R-precision as trec_eval computes them (see
`rag_cli.evaluate.report`: document level by the best chunk, MaxP, unless
the qrels judge chunk ids)."""

from __future__ import annotations

import os
from pathlib import Path

from rag_cli.lab.common import cutoffs, file_stem, one_of, prepare, read_judged
from rag_cli.lab.report import Report, count, ids
from rag_cli.progress import Progress


def score_run(run_path: Path, qrels_path: Path, ks: list[int]) -> dict:
    """The report of the run at `run_path` against `qrels_path` at cutoffs
    `ks`: {"run", "qrels", **`evaluate_rows`} (level, n_queries, metrics,
    per_query, the checks: run_depth, duplicates, ties, queries missing...).
    Raises BadInput for a missing or malformed run or qrels file."""
    from rag_cli.evaluate.datasets import read_qrels
    from rag_cli.evaluate.report import evaluate_rows
    from rag_cli.store.runs import read_run

    qrels = read_qrels(qrels_path)
    rows = read_run(run_path)
    return {"run": str(run_path), "qrels": str(qrels_path), **evaluate_rows(rows, qrels, ks)}


def run(p, qrels: str | os.PathLike, *, run: str | os.PathLike | None = None,
        queries: str | os.PathLike | None = None, mode: str | None = None, ks: str | list[int] | None = None,
        name: str | None = None, output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
        plots: str | os.PathLike | None = None, progress: Progress | None = None) -> "ScoreReport":
    """Score `run` (Parquet or TREC) against `qrels` of project `p`, or a
    run searched now from `queries` (`p.search_queries` with `mode`, down to
    max(ks) distinct documents per query, into runs/QUERIES-MODE.parquet).

    `ks`: the cutoffs (`rag_cli.lab.common.cutoffs`; default 1,5,10,20,100).
    Writes `output`, else eval/NAME.json (NAME: `name`, else RUN-QRELS, the
    stems, RUN named as `search_queries` names it). Scoring a given run
    needs no project folder: without one and without `output` nothing is
    written (`path` None). With `queries`, the report also has
    n_queries_truncated and max_length. `md` and `plots` (written later by
    `Report.write_summaries`) are checked with the other files first.

    Raises BadInput for bad --ks, both or neither of run and queries, a
    missing project (with queries), qrels that judge no query of `queries`
    or no document of the project, or a bad input or output file.
    """
    ks = cutoffs(ks)
    one_of("--run FILE (a run to score)", run, "--queries FILE (to search first)", queries)

    def default() -> str:  # RUN-QRELS
        stem = file_stem(run) if queries is None else name or f"{file_stem(queries)}-{mode or p.config.search.mode}"
        return f"{stem}-{file_stem(qrels)}"
    path = prepare(p, {"--run": run, "--queries": queries, "--qrels": qrels}, name=name, default=default,
                   output=output, md=md, plots=plots, project=queries is not None)
    searched = None
    if queries is not None:
        read_judged(p, queries, qrels)
        searched = run = p.search_queries(queries, mode=mode, k=max(ks), name=name, progress=progress)
    data = score_run(Path(run), Path(qrels), ks)
    if searched is not None:
        data = {**data, "n_queries_truncated": searched.n_queries_truncated, "max_length": searched.max_length}
    report = ScoreReport(data, path, given_run=searched is None)
    if path is not None:
        report.save()
    return report


def run_check_messages(report: dict, run: str | None = None, *, given_run: bool = True) -> list[tuple[str, str]]:
    """What trec_eval would have done silently, as `Report.messages()`:
    queries scored 0 or ignored (by id), repeated rows, ties ordered by id
    (a note), and, for a run file the user gave (`given_run`), a run
    shallower than the largest k; each led by "RUN: " when `run` is given
    (one run of several)."""
    out = []
    n = report["n_queries"]
    lead = f"{run}: " if run else ""
    depth, ks = report.get("run_depth", 0), report.get("ks") or [0]
    if given_run and 0 < depth < max(ks):
        out.append(f"{lead}the run holds at most {depth} document{'s' if depth != 1 else ''} per query, fewer than "
                   f"k = {max(ks)}: metrics at a larger k count only those (P@{max(ks)} <= {depth / max(ks):.3g}); "
                   f"search deeper or leave out that k (--ks)")
    if report.get("queries_missing_from_run"):
        missing = report["queries_missing_from_run"]
        out.append(f"{lead}{len(missing)} of {n} qrels queries are not in the run and score 0 "
                   f"(is it the run and qrels of the same query set?): {ids(missing)}")
    if report.get("queries_without_relevant"):
        none = report["queries_without_relevant"]
        out.append(f"{len(none)} qrels quer{'y has' if len(none) == 1 else 'ies have'} no relevant document "
                   f"(relevance >= 1) and score 0: {ids(none)}")
    if report.get("run_queries_not_in_qrels"):
        extra = report["run_queries_not_in_qrels"]
        out.append(f"{lead}{len(extra)} run quer{'y is' if len(extra) == 1 else 'ies are'} not in the qrels and "
                   f"ignored: {ids(extra)}")
    dups = report.get("duplicates") or {}
    if dups.get("n"):
        ex = ", ".join(f"{q}/{c}" for q, c in dups["examples"])
        out.append(f"{lead}{dups['n']} repeated (query, id) row(s) counted once, at their best score; e.g. {ex}")
    if run is None:  # one run: the qrels' own repeats too (a comparison says them once, not per run)
        out += qrels_repeat_messages(report)
    messages = [("warning", text) for text in out]
    ties = report.get("ties") or {}
    if ties.get("n_groups"):
        messages.append(("note", f"ties: {ties['n_ids']} ids in {ties['n_groups']} groups of equal score "
                                 f"({ties['n_queries']} queries) ordered by id, descending, as trec_eval orders them"))
    return messages


def qrels_repeat_messages(report: dict) -> list[str]:
    """The warning for qrels rows that judged a (query, document) pair again
    with the same relevance (`report["qrels_duplicates"]`), or none."""
    rep = report.get("qrels_duplicates") or {}
    if not rep.get("n"):
        return []
    ex = ", ".join(f"{q}/{d} (lines {a} and {b})" for q, d, a, b in rep["examples"][:5])
    more = ", ..." if rep["n"] > min(5, len(rep["examples"])) else ""
    return [f"the qrels judge {rep['n']} (query, document) pair(s) again with the same relevance; each counts "
            f"once: {ex}{more}"]


class ScoreReport(Report):
    """The metrics of one run. `given_run`: the run was a file given (not
    searched now), so a run shallower than max(ks) is worth a warning."""

    kind = "score"

    def __init__(self, data: dict, path: str | os.PathLike | None = None, *, given_run: bool = True):
        super().__init__(data, path)
        self.given_run = given_run

    def _messages(self) -> list[tuple[str, str]]:
        out = []
        n = self.data.get("n_queries_truncated")
        if n:
            out.append(("warning", f"{n} quer{'y was' if n == 1 else 'ies were'} longer than the bi-encoder's "
                                   f"max_length ({self.data['max_length']} tokens) and cut before encoding; only "
                                   "the first tokens were searched"))
        return out + run_check_messages(self.data, given_run=self.given_run)

    def written_line(self) -> str:
        if self.path is None:
            return "no project folder: the report was not written (give -o FILE to keep it)"
        return f"written: {self.path}"

    def print_tables(self, console) -> None:
        """A table of metric x cutoff, then the whole-run metrics (MAP, R-precision) on one line."""
        from rich.table import Table

        from rag_cli.safe_text import plain_text

        r = self.data
        means = r["metrics"]
        table = Table(title=plain_text(f"{r['run']}: {count(r['n_queries'], 'query')} ({r['level']} level)"))
        table.add_column("metric")
        ks = sorted({int(m.split("@")[1]) for m in means if "@" in m})
        labels = {"recall": "Recall", "hit": "Hit", "mrr": "MRR", "ndcg": "nDCG", "precision": "P", "map": "MAP"}
        names = [n for n in labels if any(m.startswith(n + "@") for m in means)]
        for k in ks:
            table.add_column(f"@{k}", justify="right")
        for n in names:
            table.add_row(labels[n], *(f"{means[f'{n}@{k}']:.4f}" if f"{n}@{k}" in means else "" for k in ks))
        console.print(table)
        whole = {"map": "MAP", "rprec": "R-precision"}
        line = ", ".join(f"{label} {means[n]:.4f}" for n, label in whole.items() if n in means)
        if line:
            console.print(f"whole run: {line}", highlight=False)
