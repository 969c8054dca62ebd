"""Tune the hybrid fusion (`rag eval tune fusion`): grid-search RRF k and
the min-max or z-score weighted sums with their dense weight for nDCG@10 on
a train split, score it against RRF k = 60 on a test split with paired
tests (see `rag_cli.evaluate.tuning`), and write the winner to rag.toml
[search] unless the test split disagrees (the winner scores below RRF k =
60 there; `force` writes it anyway)."""

from __future__ import annotations

import os

from rag_cli.errors import BadInput
from rag_cli.lab.common import file_stem, prepare, read_judged
from rag_cli.lab.report import Report
from rag_cli.progress import Progress


def run(p, queries: str | os.PathLike, qrels: str | os.PathLike, *, test_queries: str | os.PathLike | None = None,
        test_qrels: str | os.PathLike | None = None, candidates: int | None = None, permutations: int = 10000,
        name: str | None = None, output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
        plots: str | os.PathLike | None = None, progress: Progress | None = None,
        force: bool = False) -> "TuneFusionReport":
    """Grid-search the fusion of project `p` on the train split (`queries`,
    `qrels`) over the top `candidates` of each retriever (None: the
    config's search.candidates), score it against RRF k = 60 on the test
    split when given (`permutations` random sign flips), and write it to
    rag.toml (search.fusion, and search.rrf_k or search.dense_weight) when
    there is no test split or the winner's nDCG@10 on it is not below RRF k
    = 60's (or with `force`). Writes `output`, else eval/NAME.json (NAME:
    `name`, else tune-fusion-QUERIES); the report adds the input paths,
    "written_to" (rag.toml, or None when not written) and "not_written" (why,
    or None).
    Raises BadInput for one file of the test split without the other, a
    missing project, qrels that judge nothing here, or a bad file; rag.toml
    is not changed then."""
    if (test_queries is None) != (test_qrels is None):
        raise BadInput("--test-queries and --test-qrels go together: give both (the test split) or neither")
    path = prepare(p, {"--queries": queries, "--qrels": qrels, "--test-queries": test_queries,
                       "--test-qrels": test_qrels, "rag.toml": p.config_path}, name=name,
                   default=f"tune-fusion-{file_stem(queries)}", output=output, md=md, plots=plots)
    from rag_cli.evaluate.tuning import tune_fusion

    config = p.folder.with_options("search", {"candidates": candidates})
    train = read_judged(p, queries, qrels)
    test = (read_judged(p, test_queries, test_qrels, "--test-queries", "--test-qrels")
            if test_queries is not None else None)
    s = p.engines.searcher(config, with_embedder=True)
    data = tune_fusion(s, train, test, candidates=config.search.candidates, permutations=permutations,
                       progress=progress)
    best = data["best"]
    why_not = None if force else disagreement(data)
    if why_not is None:
        with p.folder.writing("eval tune fusion"):
            p.folder.save(("search", {"fusion": best["fusion"],
                                      **{key: best[key] for key in ("rrf_k", "dense_weight") if key in best}}))
    data = {"queries": str(queries), "qrels": str(qrels), "test_queries": str(test_queries or ""),
            "test_qrels": str(test_qrels or ""), "written_to": str(p.config_path) if why_not is None else None,
            "not_written": why_not, "forced": force, **data}
    report = TuneFusionReport(data, path)
    report.save()
    return report


def disagreement(data: dict) -> str | None:
    """Why the winner of `tune_fusion`'s `data` must not be written: its test score is below RRF k = 60's
    (None when there is no test split or it is not below)."""
    if not data["test"]:
        return None
    row = data["test"]["comparison"]["metrics"][data["metric"]]
    if row["mean_diff"] >= 0:
        return None
    return (f"rag.toml is not changed: the setting tuned on train scores {row['run']:.4f} {data['metric']} on the "
            f"test split against {row['baseline']:.4f} for RRF k = 60 ({row['mean_diff']:+.4f}); --force writes "
            "it anyway")


class TuneFusionReport(Report):
    """The fusion tuned on train: the default (RRF k = 60) and the winner, on train and test."""

    kind = "tune-fusion"

    def _messages(self) -> list[tuple[str, str]]:
        d = self.data
        if d.get("not_written"):
            return [("warning", d["not_written"])]
        if not d.get("test"):
            return [("note", "written to rag.toml without a test split to check it on: give --test-queries and "
                             "--test-qrels to check the setting on other queries first")]
        if d.get("forced") and disagreement(d):
            return [("warning", "written with --force although the test split disagrees")]
        return []

    def written_line(self) -> str:
        if self.data.get("written_to") is None:
            return f"written: {self.path} (rag.toml unchanged)"
        return f"written: {self.data['written_to']} (search.fusion) and {self.path}"

    def print_tables(self, console) -> None:
        """split x (RRF k=60, tuned, diff, p rand (Holm)); the title names the winning setting."""
        from rich.table import Table

        r = self.data
        setting = ", ".join(f"{k} {v}" for k, v in r["best"].items())
        metric = r["metric"]
        table = Table(title=f"fusion tuned on train ({r['train']['n_queries']} queries) for {metric}: {setting}")
        for col in ("split", "RRF k=60", "tuned", "diff", "p rand (Holm)"):
            table.add_column(col, justify="left" if col == "split" else "right")
        t = r["train"]
        table.add_row("train", f"{t['default']:.4f}", f"{t['best']:.4f}", f"{t['best'] - t['default']:+.4f}", "")
        if r["test"]:
            row = r["test"]["comparison"]["metrics"][metric]
            table.add_row(f"test ({r['test']['n_queries']})", f"{row['baseline']:.4f}", f"{row['run']:.4f}",
                          f"{row['mean_diff']:+.4f}", f"{row['p_randomisation_holm']:.4f}")
        console.print(table)
