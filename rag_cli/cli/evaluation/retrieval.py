"""`rag eval run | compare | funnel | perturb | tune fusion`: the
experiments on retrieval (`rag_cli.lab.score`, `compare`, `funnel`,
`perturb`, `tune_fusion`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli.common import given, progress
from rag_cli.cli.evaluation.app import (KS, METRICS, PERMUTATIONS, PLOTS, REPORT, SEED, ModeOpt, QrelsOpt, QueriesOpt,
                                        eval_app, show, tune_app)
from rag_cli.cli.options import OUTPUT, PROJECT, options

RunOpt = Annotated[Optional[Path], typer.Option(
    "--run", help="A run (Parquet or TREC) to score; or give --queries to search now")]
SearchQueriesOpt = Annotated[Optional[Path], typer.Option(
    "--queries", help="Query file: search it first (with --mode, down to max(--ks) distinct documents per query: 100 "
                      "by default) into runs/QUERIES-MODE.parquet")]
RunsArg = Annotated[list[Path], typer.Argument(metavar="RUNS", help="Run files (Parquet or TREC), the baseline first")]
PerturbOpt = Annotated[list[str], typer.Option(
    "--perturb", help="How to change the queries: case (= upper and lower), upper, lower, typo, punct; repeat or "
                      "comma-separate")]
TestQueriesOpt = Annotated[Optional[Path], typer.Option(
    "--test-queries", help="The test split's queries, scored apart from the tuning")]
TestQrelsOpt = Annotated[Optional[Path], typer.Option("--test-qrels", help="The test split's qrels")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Write the winner to rag.toml even when the test split "
                                                        "disagrees")]


@eval_app.command("run")
@options(KS, REPORT, PLOTS, PROJECT, OUTPUT)
def run_(qrels: QrelsOpt, run: RunOpt = None, queries: SearchQueriesOpt = None, mode: ModeOpt = None, *, ks, name,
         output, md, plots, project, json_out, quiet):
    r"""Score a run against qrels as trec_eval does (Recall, Hit, MRR, nDCG, P, MAP at k; MAP, R-precision).

    Scores `--run`, or searches `--queries` first (down to max(--ks)
    distinct documents per query) and scores that run. Writes
    `eval/NAME.json`; stderr names queries missing or ignored.

    Examples: `rag eval --qrels qrels.tsv --run runs/q-hybrid.parquet`;
    `rag eval run --qrels qrels.tsv --queries q.jsonl --mode dense`.

    Details: docs/evaluation.md (Retrieval metrics).
    """
    from rag_cli import lab
    from rag_cli.project import Project

    with progress(quiet or json_out) as bar:
        report = lab.score.run(Project.open(project), qrels, run=run, queries=queries, mode=mode, ks=ks, name=name,
                               output=output, md=md, plots=plots, progress=bar)
    show(report, json_out=json_out, quiet=quiet, md=md, plots=plots)


@eval_app.command("compare")
@options(KS, METRICS, PERMUTATIONS, SEED, REPORT, PLOTS, PROJECT, OUTPUT)
def compare(runs: RunsArg, qrels: QrelsOpt, *, ks, metrics, permutations, seed, name, output, md, plots, project,
            json_out, quiet):
    r"""Compare runs with the first: mean difference, randomisation and t-test p-values (Holm), win/tie/loss.

    `rag eval compare --qrels FILE RUN_A RUN_B \[...]` compares each run with the
    first: per metric the mean difference, a paired randomisation test
    (sign flips, `--permutations`, default 10000, seeded `--seed`) and a
    paired t-test, both Holm-corrected across the metrics, and win/tie/loss
    counts; per-query differences in the JSON, written to
    `eval/compare-RUN_A-QRELS.json` when the project folder exists (no project
    is needed). The table's title (and the `--md` section heading) names
    the baseline first, in the order of the columns (each named by its run
    file's stem, folded rather than cut on a narrow terminal), and says which
    way diff points (diff = run − baseline). Run files are paths from the
    working directory, not from the project folder (`.rag/runs/NAME.parquet`).
    Stderr names, per run, what `rag eval run` would say of it.
    """
    from rag_cli import lab
    from rag_cli.project import Project

    report = lab.compare.run(Project.open(project), qrels, runs, ks=ks, name=name, output=output, md=md, plots=plots,
                             metrics=metrics, **given(dict(permutations=permutations, seed=seed)))
    show(report, json_out=json_out, quiet=quiet, md=md, plots=plots)


@eval_app.command("funnel")
@options(REPORT, PLOTS, PROJECT, OUTPUT)
def funnel(queries: QueriesOpt, qrels: QrelsOpt, *, name, output, md, plots, project, json_out, quiet):
    r"""Per query, the layer where the gold first goes missing, and ANN recall (needs the project index).

    `rag eval funnel --queries FILE --qrels FILE` says per query where the gold
    first goes missing: not in BM25's or HNSW's top `candidates`, lost in fusion
    (hybrid top k), dropped by the reranker (when `model.reranker` is set), cut
    from the evidence `rag ask` gives the generator, not cited; a table of counts
    and per-query rows in `eval/funnel-QUERIES.json`, with ANN recall@k (HNSW
    against exact search over the same stored vectors). k, candidates and the
    RRF k are the project's `\[search]` settings.
    """
    from rag_cli import lab
    from rag_cli.project import Project

    with progress(quiet or json_out) as bar:
        report = lab.funnel.run(Project.open(project), qrels, queries, name=name, output=output, md=md, plots=plots,
                                progress=bar)
    show(report, json_out=json_out, quiet=quiet, md=md, plots=plots)


@eval_app.command("perturb")
@options(KS, SEED, PERMUTATIONS, REPORT, PLOTS, PROJECT, OUTPUT)
def perturb(perturb_: PerturbOpt, queries: QueriesOpt, qrels: QrelsOpt, mode: ModeOpt = None, *, ks, seed,
            permutations, name, output, md, plots, project, json_out, quiet):
    r"""Re-run the queries changed (case, typo, punct) and report the loss.

    `rag eval perturb --perturb case|upper|lower|typo|punct --queries FILE
    --qrels FILE` searches the queries (with `--mode`, down to max(`--ks`)
    distinct documents) as given and changed each way (case = upper and
    lower; typo seeded `--seed`), scores each run and reports per kind of
    change the loss against the original (changed − original) with a paired
    randomisation test (`--permutations`); `eval/perturb-QUERIES.json`.
    """
    from rag_cli import lab
    from rag_cli.project import Project

    with progress(quiet or json_out) as bar:
        report = lab.perturb.run(Project.open(project), qrels, queries, perturb_, mode=mode, ks=ks, name=name,
                                 output=output, md=md, plots=plots, progress=bar,
                                 **given(dict(seed=seed, permutations=permutations)))
    show(report, json_out=json_out, quiet=quiet, md=md, plots=plots)


@tune_app.command("fusion")
@options(PERMUTATIONS, REPORT, PLOTS, PROJECT, OUTPUT)
def tune_fusion(queries: QueriesOpt, qrels: QrelsOpt, test_queries: TestQueriesOpt = None,
                test_qrels: TestQrelsOpt = None, force: ForceOpt = False, *, permutations, name, output, md, plots,
                project, json_out, quiet):
    r"""Grid-search the hybrid fusion on a train split for nDCG@10 and write the winner to rag.toml.

    `rag eval tune fusion --queries TRAIN --qrels TRAIN_QRELS
    \[--test-queries T --test-qrels TQ]` grid-searches the hybrid fusion
    (`search.fusion`: `rrf` with its k, or the `minmax`/`zscore` weighted
    sums with `search.dense_weight`) on the train split, scores the winner
    against RRF k = 60 on the test split apart (paired randomisation test,
    `--permutations`) and writes it to `rag.toml` unless it scores below
    RRF k = 60 there (`--force` writes it anyway); `eval/tune-fusion-TRAIN.json`.
    """
    from rag_cli import lab
    from rag_cli.project import Project

    with progress(quiet or json_out) as bar:
        report = lab.tune_fusion.run(Project.open(project), queries, qrels, test_queries=test_queries,
                                     test_qrels=test_qrels, name=name, output=output, md=md, plots=plots,
                                     progress=bar, force=force, **given(dict(permutations=permutations)))
    show(report, json_out=json_out, quiet=quiet, md=md, plots=plots)
