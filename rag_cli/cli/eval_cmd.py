"""`rag eval`: one command of many modes (score a run, compare runs, score
answers, judge, funnel, perturb, tune fusion or refusal, make-unanswerable),
picked by `_EVAL_MODES`, with a printer per report.

Moved here unchanged from the one-module CLI. It is exempt from the CLI's
size limits (tests/test_structure.py) while the evaluation lab, which turns
`rag eval` into a sub-app of one subcommand per experiment, is pending.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli.common import count, emit_json, given, note, progress, stdout, warn
from rag_cli.cli.options import OUTPUT, PROJECT, options
from rag_cli.cli.render_query import queries_truncated
from rag_cli.cli.root import app


@app.command("eval")
@options(PROJECT, OUTPUT)
def eval_(
    qrels: Annotated[Optional[Path], typer.Option("--qrels", help="Qrels: BEIR TSV (query-id corpus-id score) or TREC 4-column")] = None,
    run: Annotated[Optional[Path], typer.Option("--run", help="A run (Parquet or TREC); or give --queries to search now")] = None,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Query file: search it first (with --mode, down to max(--ks) distinct documents per query: 100 by default) into runs/QUERIES-MODE.parquet")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Retrieval mode with --queries (config: search.mode)")] = None,
    ks: Annotated[Optional[str], typer.Option("--ks", help="Cutoffs, comma-separated (default 1,5,10,20,100)")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Report name: eval/NAME.json (default: RUN-QRELS, the two files' stems)")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the JSON report here (with --run no project folder is needed)")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="Compare the RUNS given as arguments (the first is the baseline): mean difference, randomisation and t-test p-values (Holm), win/tie/loss")] = False,
    runs: Annotated[Optional[list[Path]], typer.Argument(help="Run files for --compare")] = None,
    permutations: Annotated[Optional[int], typer.Option("--permutations", help="Random sign flips of the randomisation test (--compare, --perturb, --tune fusion; default 10000)")] = None,
    funnel: Annotated[bool, typer.Option("--funnel", help="With --queries: per query, the layer where the gold first goes missing, and ANN recall (needs the project index)")] = False,
    answers: Annotated[Optional[Path], typer.Option("--answers", help="Score answers/NAME.parquet (from `rag ask --queries`) against --gold: EM, F1, has-answer, citation precision/recall, refusals, latency")] = None,
    gold: Annotated[Optional[Path], typer.Option("--gold", help="Gold answers for --answers: JSONL {\"_id\": query id, \"answers\": [...]}")] = None,
    judge: Annotated[bool, typer.Option("--judge", help="With --answers: also RAGAS faithfulness and answer relevancy, judged by an LLM (--gold then optional)")] = False,
    judge_generator: Annotated[Optional[str], typer.Option("--judge-generator", help="--judge: openai | llama-cpp, set up by \\[generator] (default: ask.generator)")] = None,
    judge_repeats: Annotated[Optional[int], typer.Option("--judge-repeats", help="--judge: times the whole judging is repeated (mean ± sd over them; default 3)")] = None,
    judge_temperature: Annotated[Optional[float], typer.Option("--judge-temperature", help="--judge: sampling temperature, repeat r seeded r (0: identical repeats; default 0.3)")] = None,
    judge_base_url: Annotated[Optional[str], typer.Option("--judge-base-url", help="--judge with openai: the server's API root (config: generator.base_url)")] = None,
    judge_model: Annotated[Optional[str], typer.Option("--judge-model", help="--judge: openai model name, or llama-cpp .gguf path (config: generator.model)")] = None,
    judge_api: Annotated[Optional[str], typer.Option("--judge-api", help="--judge with openai: chat | completions (config: generator.api)")] = None,
    tune: Annotated[Optional[str], typer.Option("--tune", help="fusion: grid-search the hybrid fusion on --queries/--qrels (the train split) for nDCG@10 and write the winner to rag.toml; refusal: grid-search the refusal gate's thresholds on --answers/--unanswerable (recorded with `rag ask --gate off`) and write them to rag.toml \\[ask]")] = None,
    unanswerable: Annotated[Optional[Path], typer.Option("--unanswerable", help="Answers to made-unanswerable questions (see --make-unanswerable): with --answers/--gold, adds refusal and false-answer rates on them and the false-refusal rate on --answers; with --tune refusal, the train split's")] = None,
    max_false_refusal: Annotated[Optional[float], typer.Option("--max-false-refusal", help="--tune refusal: the largest false-refusal rate allowed on the answerable questions (default 0.05)")] = None,
    test_answers: Annotated[Optional[Path], typer.Option("--test-answers", help="--tune refusal: the test split's answerable answers (recorded with --gate off)")] = None,
    test_unanswerable: Annotated[Optional[Path], typer.Option("--test-unanswerable", help="--tune refusal: the test split's made-unanswerable answers")] = None,
    test_queries: Annotated[Optional[Path], typer.Option("--test-queries", help="--tune: the test split's queries, scored apart from the tuning")] = None,
    test_qrels: Annotated[Optional[Path], typer.Option("--test-qrels", help="--tune: the test split's qrels")] = None,
    perturb: Annotated[Optional[list[str]], typer.Option("--perturb", help="With --queries: re-run the queries changed (case = upper and lower, upper, lower, typo, punct) and report the loss")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed of --perturb typo, of the randomisation tests (--compare, --perturb) and of --make-unanswerable (default 0)")] = None,
    make_unanswerable: Annotated[Optional[int], typer.Option("--make-unanswerable", help="N: write the made-unanswerable variant of --corpus into -o DIR: the gold documents (--qrels) of N questions of --queries removed (corpus.jsonl, queries.jsonl, removed.json; --seed)")] = None,
    corpus: Annotated[Optional[Path], typer.Option("--corpus", help="--make-unanswerable: the corpus, BEIR JSONL (.gz too)")] = None,
    md: Annotated[Optional[Path], typer.Option("--md", help="Also write a Markdown summary of the report to this file")] = None,
    plots: Annotated[Optional[Path], typer.Option("--plots", help="Also draw PNG plots of the report into this folder (needs matplotlib: the plot extra)")] = None,
    *,
    project,
    json_out,
    quiet,
):
    r"""Recall@k, Hit@k, MRR@k, nDCG@k, P@k, MAP and R-precision of a run against qrels, as trec_eval
    computes them (document level by best chunk, MaxP).

    Recall@k, Hit@k, MRR@k, nDCG@k (graded gains), P@k, MAP@k, and over the whole
    run MAP and R-precision, as trec_eval defines them (`recall.k`, `success.k`,
    `recip_rank`, `ndcg_cut.k`, `P.k`, `map_cut.k`, `map`, `Rprec`; checked
    against pytrec_eval by a hypothesis property test). A run is read as
    trec_eval reads it: ordered by score descending, ties by id descending; the
    rank column is output only, so ranks that start at 0 or are all 1 are fine.
    A repeated (query, id) row counts once (its best score). Every qrels query
    counts (0 if missing from the run). A chunk run is scored at document level
    by MaxP (a document's score is its best chunk's score), unless the qrels
    judge chunk ids. Prints a table or `--json` and writes `eval/NAME.json`
    (default NAME: `RUN-QRELS`) or `-o FILE`, with per-query values; `--run`
    needs no project folder. Stderr names the qrels queries missing from the run
    or without a relevant document, the run queries not in the qrels, and counts
    repeated rows and ties.

    `rag search --queries` and `rag eval --queries` retrieve until each query's
    run holds k distinct documents, so document-level Recall@k and MAP are at the
    depth asked for. On a SciFact subset (600 documents, 128-token chunks, the 300
    test queries), 100 chunks held a median of 45–54 distinct documents, and
    document-level Recall@100 went from 0.956 / 0.975 / 0.973 (sparse / dense /
    hybrid, 100 chunks) to 0.970 / 0.997 / 0.983 (100 documents; 192–252 chunks a
    query) (`bench/eval_depth.py`, `bench/results/eval-depth-scifact.json`).
    `rag eval --queries FILE` searches with `--mode` (default `search.mode`) down
    to k = the largest `--ks` cutoff distinct documents per query (default 100),
    writes that run as `runs/QUERIES-MODE.parquet` (or `runs/NAME.parquet` with
    `--name`) and scores it. `--level doc` (one row per document) and `--format
    trec` are flags of `rag search --queries`, not of `rag eval`: write such a
    run with `rag search` and score it with `--run`.

    Before any work, every eval mode checks its outputs (exit 2 naming the
    flags): `-o`, `--md` and the `--plots` folder must not be an input file
    (`--run`, the `--compare` runs, `--qrels`, `--queries`, `--answers`, `--gold`,
    `--corpus`, ...) or one another, `-o`/`--md` must not be a folder and their
    folder must exist or be creatable and writable, `--plots` must be a folder
    that can be created and written, must not hold an input, and needs
    matplotlib; inside the project folder, outputs go under `eval/` only (the
    project's own files are never overwritten); and `--make-unanswerable`'s
    `-o DIR` must not be the folder of an input. Modes that search the project
    (`--queries`, `--tune fusion`, `--perturb`, `--funnel`) also refuse, before
    searching, qrels that judge none of the queries (another query set) or
    whose relevant documents (or chunks) are none of the project's (another
    collection).

    `rag eval --qrels FILE --compare RUN_A RUN_B \[...]` compares each run with the
    first: per metric the mean difference, a paired randomisation test (sign
    flips, `--permutations`, default 10000) and a paired t-test, both
    Holm-corrected across the metrics, and win/tie/loss counts; per-query
    differences in the JSON. The table's title (and the `--md` section heading)
    names the baseline first, in the
    order of the columns (each named by its run file's stem, folded rather than
    cut on a narrow terminal), and says which way diff points (diff = run −
    baseline). Run files are paths from the working directory, not from the
    project folder (`.rag/runs/NAME.parquet`).

    `rag eval --funnel --queries FILE --qrels FILE` says per query where the gold
    first goes missing: not in BM25's or HNSW's top `candidates`, lost in fusion
    (hybrid top k), dropped by the reranker (when `model.reranker` is set), cut
    from the evidence `rag ask` gives the generator, not cited; a table of counts
    and per-query rows in `eval/funnel-QUERIES.json`, with ANN recall@k (HNSW
    against exact search over the same stored vectors).

    `rag eval --answers answers/NAME.parquet --gold answers.jsonl` scores `rag ask
    --queries` output: exact match and F1 as the SQuAD v1.1 script defines them
    (character tokens for Chinese), has-answer, citation precision and recall
    (from the chunk texts), refusal rate, latency p50/p95.
    `rag eval --answers answers/NAME.parquet --judge \[--gold answers.jsonl]`
    adds RAGAS faithfulness and answer relevancy, judged by an LLM (without
    `--gold`, only those): `--judge-generator openai|llama-cpp` (default
    `ask.generator`; the extractive generator cannot judge), set up by the
    `\[generator]` config, with `--judge-base-url`, `--judge-model` (openai: the
    model name; llama-cpp: a .gguf path, empty = Gemma 3 270M) and `--judge-api
    chat|completions` overriding it for this run; `--judge-repeats N` (default 3)
    judges everything N times, repeat r sampled at `--judge-temperature`
    (default 0.3, as ragas samples its n > 1 generations) with seed r, and the
    report gives mean ± sd over the repeats (at temperature 0 the repeats are
    identical on a deterministic server: sd 0). Refused answers are not judged;
    judge outputs that cannot be parsed are counted (stderr, and `unparsed` in
    the JSON). The report names the judge's model (base URL and model name, or
    the GGUF file and its sha256 prefix) and shows a progress bar per repeat.
    `rag eval --tune fusion --queries TRAIN --qrels TRAIN_QRELS
    \[--test-queries T --test-qrels TQ]` grid-searches the hybrid fusion (`search.fusion`: `rrf`,
    or the `minmax`/`zscore` weighted sums with `search.dense_weight`) on the
    train split, writes the winner to `rag.toml` and scores test apart.
    `rag eval --make-unanswerable N --corpus CORPUS.jsonl --queries Q --qrels QRELS
    -o DIR \[--seed S]` writes the made-unanswerable variant of a BEIR corpus (no
    project needed): the relevant documents of at least N questions removed,
    whole documents at a time (every question of a removed passage counts),
    into `DIR/corpus.jsonl`, `DIR/queries.jsonl` (those questions) and
    `DIR/removed.json` (the question and document ids). Build a project from
    `DIR/corpus.jsonl` and ask `DIR/queries.jsonl` there; ask the same questions
    in the project of the full corpus.
    `rag eval --answers A.parquet --gold G --unanswerable U.parquet` adds, from U
    (the answers to the made-unanswerable questions), the refusal rate on
    made-unanswerable questions and the false-answer rate (1 − it), and from A the
    false-refusal rate on answerable ones.
    `rag eval --tune refusal --answers A.parquet --unanswerable U.parquet
    \[--max-false-refusal 0.05] \[--test-answers A2 --test-unanswerable U2]`, on
    answers recorded with `rag ask --queries ... --gate off`, grid-searches
    `ask.min_score`, `min_coverage`, `min_entity_coverage`, `strong_score` (and
    `min_rerank_score` when the answers have cross-encoder scores) and `entity_scope` (zh | all) by simulating
    the gate's own decision on the recorded signals (refused = the gate refuses
    or the generator refused), keeps the setting refusing the most
    made-unanswerable questions with at most that false-refusal rate (ties: the
    one closest to the current setting), writes it to `rag.toml` `\[ask]`, and
    reports the current and tuned rates on train and test.
    `rag eval --perturb case|typo|punct --queries FILE --qrels FILE` re-runs the
    queries changed and reports the loss. Every eval mode that writes a report
    takes `--md FILE` (a Markdown summary); all but `--answers` and `--tune
    refusal` take `--plots DIR` (PNGs; `pip install 'rag-cli\[plot]'`). A flag that
    the mode does not take is an error (exit 2) naming the flag and the mode.
    Definitions, sources and measured tables: \[evaluation.md](evaluation.md).
    """
    from rag_cli.errors import BadInput
    from rag_cli.evaluate.report import parse_cutoffs
    from rag_cli.project import Project

    _check_eval_mode({"--qrels": qrels, "--run": run, "--queries": queries, "--mode": mode, "--ks": ks,
                      "--name": name, "-o": output, "--compare": compare, "RUNS (arguments)": runs,
                      "--permutations": permutations, "--funnel": funnel, "--answers": answers, "--gold": gold,
                      "--judge": judge, "--judge-generator": judge_generator, "--judge-repeats": judge_repeats,
                      "--judge-temperature": judge_temperature, "--judge-base-url": judge_base_url,
                      "--judge-model": judge_model, "--judge-api": judge_api, "--tune": tune,
                      "--unanswerable": unanswerable, "--max-false-refusal": max_false_refusal,
                      "--test-answers": test_answers, "--test-unanswerable": test_unanswerable,
                      "--test-queries": test_queries, "--test-qrels": test_qrels, "--perturb": perturb,
                      "--seed": seed, "--make-unanswerable": make_unanswerable, "--corpus": corpus, "--md": md,
                      "--plots": plots})
    ks = "1,5,10,20,100" if ks is None else ks
    permutations = 10000 if permutations is None else permutations
    seed = 0 if seed is None else seed
    cutoffs = parse_cutoffs(ks)
    if make_unanswerable is not None or corpus is not None:
        out = Project.make_unanswerable(make_unanswerable, corpus=corpus, queries=queries, qrels=qrels,
                                        output=output, seed=seed)
        if json_out:
            emit_json(out)
        elif not quiet:
            note(f"{count(out['n_questions'], 'question')} made unanswerable: "
                 f"{count(len(out['removed_docs']), 'document')} removed, {out['n_docs_kept']} kept -> {output}")
        return
    p = Project.open(project)
    if tune == "refusal":
        chosen = given(dict(max_false_refusal=max_false_refusal))  # else the library's default
        report, path = p.tune_refusal(answers, unanswerable, test_answers=test_answers,
                                      test_unanswerable=test_unanswerable, name=name, output=output, md=md,
                                      plots=plots, **chosen)
        return _show_report(p, report, path, _print_refusal_tuning, json_out, quiet, md, plots)
    if answers is not None or gold is not None or judge:
        llm = {"base_url": judge_base_url, "model": judge_model, "api": judge_api}
        with progress(quiet or json_out) as bar:
            chosen = given(dict(judge_repeats=judge_repeats, judge_temperature=judge_temperature))
            report, path = p.evaluate_answers(answers, gold, judge=judge, judge_generator=judge_generator, llm=llm,
                                              name=name, output=output, unanswerable=unanswerable, md=md,
                                              plots=plots, progress=bar, **chosen)
        if report.get("n_chunks_not_in_project") and not quiet:
            warn(f"{report['n_chunks_not_in_project']} chunk id(s) cited or given as evidence in {answers} are not "
                 f"in this project's chunks ({p.chunks_path}): their citations and has-answer count as missing. "
                 "Recorded before the project was rebuilt, or in another project (-p)?")
        if report.get("evidence_changed") and not quiet:
            warn(f"the chunks cited or given as evidence in {answers} had other texts when they were answered than "
                 f"this project's ({p.chunks_path}) now: recorded in another project (-p), or before the documents "
                 "changed? has-answer and citation precision are measured on the current texts")
        if report.get("recorded_gate_off") and not quiet:
            warn(f"{' and '.join(report['recorded_gate_off'])}: no question was refused by the refusal gate, "
                 "though the gate of this project's [ask] settings refuses some: recorded with `rag ask --gate "
                 "off`? The refusal rates are then the generator's alone, not those of `rag ask`")
        if json_out and not quiet:
            _warn_answer_checks(report)
        return _show_report(p, report, path, _print_answer_metrics, json_out, quiet, md, plots)
    if tune is not None:
        with progress(quiet or json_out) as bar:
            report, path = p.tune_fusion(queries, qrels, test_queries=test_queries, test_qrels=test_qrels,
                                         permutations=permutations, name=name, output=output, md=md, plots=plots,
                                         progress=bar)
        return _show_report(p, report, path, _print_tuning, json_out, quiet, md, plots)
    if perturb:
        from rag_cli.evaluate.perturb import expand_kinds

        try:
            kinds = expand_kinds(perturb)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        with progress(quiet or json_out) as bar:
            report, path = p.perturb(qrels, queries, kinds, mode=mode, ks=cutoffs, seed=seed,
                                     permutations=permutations, name=name, output=output, md=md, plots=plots,
                                     progress=bar)
        return _show_report(p, report, path, _print_perturb, json_out, quiet, md, plots)
    if compare:
        report, path = p.compare(qrels, runs or [], ks=cutoffs, permutations=permutations, seed=seed, name=name,
                                 output=output, md=md, plots=plots)
        if not quiet:
            for check in report["run_checks"]:
                _warn_run_checks(check, run=check["run"])
        return _show_report(p, report, path, _print_comparison, json_out, quiet, md, plots)
    if funnel:
        with progress(quiet or json_out) as bar:
            report, path = p.funnel(qrels, queries, name=name, output=output, md=md, plots=plots,
                                    progress=bar)
        return _show_report(p, report, path, _print_funnel, json_out, quiet, md, plots)
    with progress(quiet or json_out) as bar:
        report, path = p.evaluate(qrels, run=run, queries=queries, mode=mode, ks=cutoffs, name=name, output=output,
                                  md=md, plots=plots, progress=bar)
    if queries is not None:
        queries_truncated(report["n_queries_truncated"], report["max_length"], quiet)
    if json_out:
        if not quiet:
            _warn_run_checks(report, given_run=run is not None)
        emit_json(report)
    else:
        _print_report(report, path, quiet, given_run=run is not None)
    _eval_extras(p, report, path, md, plots, quiet)


# Each mode of `rag eval`: (label, the flags it needs and what it says when one is missing, the flags it takes
# besides -p, --json and -q). `_check_eval_mode` rejects a missing flag or one the mode does not take.
_EVAL_OUTPUT = ("--name", "-o", "--md", "--plots")
_EVAL_MODES: dict[str, tuple[str, tuple[str, ...], str, tuple[str, ...]]] = {
    "make-unanswerable": (
        "--make-unanswerable N (write a made-unanswerable corpus into -o DIR)",
        ("--make-unanswerable", "--corpus", "--queries", "--qrels", "-o"),
        "--make-unanswerable N needs --corpus FILE, --queries FILE, --qrels FILE and -o DIR",
        ("--make-unanswerable", "--corpus", "--queries", "--qrels", "-o", "--seed")),
    "tune-refusal": (
        "--tune refusal", ("--answers", "--unanswerable"),
        "--tune refusal needs --answers FILE and --unanswerable FILE (answers recorded with "
        "`rag ask --queries ... --gate off`)",
        ("--tune", "--answers", "--unanswerable", "--max-false-refusal", "--test-answers", "--test-unanswerable",
         "--name", "-o", "--md")),
    "tune-fusion": (
        "--tune fusion", ("--queries", "--qrels"),
        "--tune fusion needs --queries FILE and --qrels FILE (the train split)",
        ("--tune", "--queries", "--qrels", "--test-queries", "--test-qrels", "--permutations", *_EVAL_OUTPUT)),
    "judge": (
        "--answers with --judge", ("--answers",), "--judge needs --answers FILE (from `rag ask --queries`)",
        ("--answers", "--gold", "--judge", "--judge-generator", "--judge-repeats", "--judge-temperature",
         "--judge-base-url", "--judge-model", "--judge-api", "--unanswerable", "--name", "-o", "--md")),
    "answers": (
        "--answers (scoring answers)", ("--answers", "--gold"),
        "--answers FILE needs --gold FILE (gold answers) and/or --judge (an LLM judge)",
        ("--answers", "--gold", "--unanswerable", "--name", "-o", "--md")),
    "perturb": (
        "--perturb", ("--queries", "--qrels"), "--perturb needs --queries FILE (searched as given and changed) "
        "and --qrels FILE",
        ("--perturb", "--queries", "--qrels", "--mode", "--ks", "--seed", "--permutations", *_EVAL_OUTPUT)),
    "compare": (
        "--compare", ("--qrels",), "--compare needs --qrels FILE (relevance judgements) and the run files as "
        "arguments",
        ("--compare", "RUNS (arguments)", "--qrels", "--ks", "--permutations", "--seed", *_EVAL_OUTPUT)),
    "funnel": (
        "--funnel", ("--queries", "--qrels"), "--funnel needs --queries FILE (the funnel searches them now) and "
        "--qrels FILE",
        ("--funnel", "--queries", "--qrels", *_EVAL_OUTPUT)),
    "run": (
        "--qrels with --run or --queries (scoring a run)", ("--qrels",),
        "--qrels FILE is needed (relevance judgements), unless you score answers with --answers/--gold",
        ("--qrels", "--run", "--queries", "--mode", "--ks", *_EVAL_OUTPUT)),
}
_EVAL_ONLY_SOME = {"--md": "writes no Markdown summary", "--plots": "draws no plots"}



def _check_eval_mode(flags: dict) -> str:
    """The mode of `rag eval` that `flags` ({flag: value; None or False when
    not given}) select, in order: make-unanswerable, tune (after its value is
    checked), answers/judge, perturb, compare, funnel, run. Raises BadInput
    naming the flags that mode needs and lacks, and the given flags it does
    not take (`_EVAL_MODES`), before anything is read or written."""
    from rag_cli.errors import BadInput

    given = [f for f, v in flags.items() if v is not None and v is not False and v != []]
    tune = flags["--tune"]
    if tune is not None and tune not in ("fusion", "refusal"):
        raise BadInput(f"--tune {tune!r}: 'fusion' or 'refusal' can be tuned")
    if "--make-unanswerable" in given or "--corpus" in given:
        mode = "make-unanswerable"
    elif tune is not None:
        mode = f"tune-{tune}"
    elif any(f in given for f in ("--answers", "--gold", "--judge")):
        mode = "judge" if flags["--judge"] else "answers"
    elif "--perturb" in given:
        mode = "perturb"
    elif "--compare" in given or "RUNS (arguments)" in given:
        if not flags["--compare"]:
            raise BadInput(f"unexpected argument(s) {' '.join(map(str, flags['RUNS (arguments)']))}: run files as "
                           "arguments need --compare")
        mode = "compare"
    elif "--funnel" in given:
        mode = "funnel"
    else:
        mode = "run"
    label, needed, needs, accepted = _EVAL_MODES[mode]
    missing = [f for f in needed if f not in given]
    wrong = [f for f in given if f not in accepted]
    if not missing and not wrong:
        return mode
    if mode in ("answers", "judge") and missing == ["--answers"] and not wrong:
        selected = [f for f in ("--gold", "--judge") if f in given]
        raise BadInput(f"{' and '.join(selected)} score{'s' if len(selected) == 1 else ''} answers: give --answers "
                       f"FILE too (answers/NAME.parquet, "
                       f"written by `rag ask --queries`)")
    if mode in ("answers", "judge") and "--answers" in missing and wrong:
        selected = [f for f in ("--gold", "--judge") if f in given]
        raise BadInput(f"{' and '.join(selected)} belong{'s' if len(selected) == 1 else ''} to rag eval --answers "
                       f"(scoring answers), which needs --answers FILE (from `rag ask --queries`); {', '.join(wrong)} "
                       f"select{'s' if len(wrong) == 1 else ''} another mode (--qrels with --run or --queries: "
                       f"scoring a run). Leave out {' and '.join(selected)}, or give --answers FILE and leave out "
                       f"{', '.join(wrong)}")
    if len(wrong) == 1 and wrong[0] in _EVAL_ONLY_SOME:
        what = f"rag eval {label} {_EVAL_ONLY_SOME[wrong[0]]} ({wrong[0]})"
    else:
        what = f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not belong to rag eval {label}"
    if mode == "answers" and any(f.startswith("--judge-") for f in wrong):
        what += " (the --judge-* flags need --judge)"
    what += f"; that mode takes {', '.join(accepted)} (and -p, --json, -q). Leave out {', '.join(wrong)}"
    raise BadInput(needs + (f"; and {what}" if wrong else "") if missing else what)


def _show_report(p, report: dict, path: Path | None, printer, json_out: bool, quiet: bool, md: Path | None,
               plots: Path | None) -> None:
    """Print a report (`printer`, or its JSON), then write its Markdown summary and plots when asked for."""
    if json_out:
        emit_json(report)
    else:
        printer(report, path, quiet)
    _eval_extras(p, report, path, md, plots, quiet)


def _eval_extras(p, report: dict, path: Path | None, md: Path | None, plots: Path | None, quiet: bool) -> None:
    """The Markdown summary and the PNG plots of an eval report, when asked for."""
    if md is None and plots is None:
        return
    written = p.eval_summaries(report, md=md, plots=plots, name=path.stem if path is not None else "eval")
    if not quiet:
        for f in written:
            note(f"written: {f}")


def _print_report(report: dict, path: Path, quiet: bool, *, given_run: bool = True) -> None:
    from rich.table import Table

    from rag_cli.safe_text import plain_text

    means = report["metrics"]
    table = Table(title=plain_text(f"{report['run']}: {count(report['n_queries'], 'query')} ({report['level']} level)"))
    table.add_column("metric")
    ks = sorted({int(m.split("@")[1]) for m in means if "@" in m})
    labels = {"recall": "Recall", "hit": "Hit", "mrr": "MRR", "ndcg": "nDCG", "precision": "P", "map": "MAP"}
    names = [n for n in labels if any(m.startswith(n + "@") for m in means)]
    for kk in ks:
        table.add_column(f"@{kk}", justify="right")
    for n in names:
        table.add_row(labels[n], *(f"{means[f'{n}@{kk}']:.4f}" if f"{n}@{kk}" in means else "" for kk in ks))
    stdout().print(table)
    whole = {"map": "MAP", "rprec": "R-precision"}
    line = ", ".join(f"{label} {means[n]:.4f}" for n, label in whole.items() if n in means)
    if line:
        stdout().print(f"whole run: {line}", highlight=False)
    if quiet:
        return
    _warn_run_checks(report, given_run=given_run)
    if path is not None:
        note(f"written: {path}")
    else:
        note("no project folder: the report was not written (give -o FILE to keep it)")


def _print_comparison(report: dict, path: Path | None, quiet: bool) -> None:
    from rich.table import Table

    from rag_cli.safe_text import plain_text

    def short(name: str) -> str:  # the file stem: the columns stay apart and narrow
        return name.rsplit(".", 1)[0] if name.endswith((".parquet", ".trec")) else name

    for comp in report["comparisons"]:
        base, run = short(comp["baseline"]), short(comp["run"])
        table = Table(title=plain_text(f"baseline {base} vs {run}: {count(report['n_queries'], 'query')}; diff = {run} − "
                                       f"{base} (p: two-sided, Holm-corrected across {len(comp['metrics'])} metrics)"))
        table.add_column("metric", no_wrap=True)
        for col in (base, run, "diff", "p rand", "p t-test", "W/T/L"):
            table.add_column(plain_text(col), justify="right", overflow="fold")
        for m, r in comp["metrics"].items():
            table.add_row(m, f"{r['baseline']:.4f}", f"{r['run']:.4f}", f"{r['mean_diff']:+.4f}",
                          f"{r['p_randomisation_holm']:.4f}", f"{r['p_t_test_holm']:.4f}",
                          f"{r['wins']}/{r['ties']}/{r['losses']}")
        stdout().print(table)
    if path is not None and not quiet:
        note(f"written: {path}")


def _print_answer_metrics(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    if "counts" in report:
        c = report["counts"]
        table = Table(title=f"answers: {c['n_questions']} questions with gold answers ({c['n_refused']} refused)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for m, v in report["metrics"].items():
            table.add_row(m, "n/a" if v is None else (f"{v:.1f}" if m.endswith("_ms") else f"{v:.4f}"))
        for m in ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate"):
            if "refusal" in report:
                v = report["refusal"][m]
                table.add_row(m, "n/a" if v is None else f"{v:.4f}")
        stdout().print(table)
    if "judge" in report:
        _print_judge(report["judge"])
    if quiet:
        return
    _warn_answer_checks(report)
    note(f"written: {path}")


def _warn_answer_checks(report: dict) -> None:
    """On stderr (with or without --json): questions without an answer row,
    rows without gold, and judge outputs that could not be parsed."""
    if report.get("missing_answers"):
        warn(f"{len(report['missing_answers'])} question(s) of the gold file have no answer row: "
             + _ids(report["missing_answers"]))
    if report.get("no_gold"):
        warn(f"{len(report['no_gold'])} answer row(s) have no gold answer and were not scored: "
             + _ids(report["no_gold"]))
    if "judge" not in report:
        return
    c = report["judge"]["counts"]
    bad = {k: sum(v) for k, v in c["unparsed"].items() if sum(v)}
    if bad or sum(c["question_generations_unparsed"]):
        warn("judge outputs that could not be parsed (all repeats): "
             + ", ".join(f"{k} {v}" for k, v in bad.items())
             + f"; question generations {sum(c['question_generations_unparsed'])}")
    if c["missing_contexts"]:
        warn(f"{len(c['missing_contexts'])} evidence chunk(s) are not in chunks.parquet and were left out of "
             "the judge's context: " + _ids(c["missing_contexts"]))


def _print_judge(judge: dict) -> None:
    """The judge's table (mean ± sd over repeats)."""
    from rich.table import Table

    from rag_cli.evaluate.markdown import judge_model_line
    from rag_cli.safe_text import plain_text

    c = judge["counts"]
    table = Table(title=plain_text(f"LLM judge: {c['n_judged']} answers judged ({c['n_refused']} refused, not "
                                   f"judged), {c['n_repeats']} repeat(s); {judge_model_line(judge['model'])}"))
    for col in ("metric", "mean", "sd", "repeats"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for m, r in judge["metrics"].items():
        table.add_row(m, "n/a" if r["mean"] is None else f"{r['mean']:.4f}",
                      "n/a" if r["sd"] is None else f"{r['sd']:.4f}",
                      " ".join("n/a" if v is None else f"{v:.4f}" for v in r["repeats"]))
    stdout().print(table)


def _print_tuning(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    best = report["best"]
    setting = ", ".join(f"{k} {v}" for k, v in best.items())
    metric = report["metric"]
    table = Table(title=f"fusion tuned on train ({report['train']['n_queries']} queries) for {metric}: {setting}")
    for col in ("split", "RRF k=60", "tuned", "diff", "p rand (Holm)"):
        table.add_column(col, justify="left" if col == "split" else "right")
    t = report["train"]
    table.add_row("train", f"{t['default']:.4f}", f"{t['best']:.4f}", f"{t['best'] - t['default']:+.4f}", "")
    if report["test"]:
        row = report["test"]["comparison"]["metrics"][metric]
        table.add_row(f"test ({report['test']['n_queries']})", f"{row['baseline']:.4f}", f"{row['run']:.4f}",
                      f"{row['mean_diff']:+.4f}", f"{row['p_randomisation_holm']:.4f}")
    stdout().print(table)
    if not quiet:
        note(f"written: {report['written_to']} (search.fusion) and {path}")


def _print_refusal_tuning(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    setting = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in report["best"].items())
    table = Table(title=f"refusal gate tuned on train for false refusals <= {report['max_false_refusal']:g}"
                        f"{'' if report['target_met'] else ' (target not met)'}: {setting}")
    for col in ("split", "setting", "refused unanswerable", "false answers", "false refusals"):
        table.add_column(col, justify="left" if col in ("split", "setting") else "right")
    for split in ("train", "test"):
        for which in ("current", "tuned"):
            if report[split] is None:
                continue
            r = report[split][which]
            table.add_row(f"{split} ({r['n_answerable']}+{r['n_unanswerable']})", which,
                          *("n/a" if r[m] is None else f"{r[m]:.4f}"
                            for m in ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate")))
    stdout().print(table)
    if not quiet:
        note(f"written: {report['written_to']} ([ask] thresholds) and {path}")


def _print_perturb(report: dict, path: Path, quiet: bool) -> None:
    """One row per metric (they are many: every metric at every cutoff), one
    column per kind of change with its loss; the table stays narrow."""
    from rich.table import Table

    kinds = report["perturbations"]
    table = Table(title=f"perturbed queries ({report['n_queries']}, mode {report['mode']}): changed - original")
    table.add_column("metric")
    table.add_column("original", justify="right")
    for kind in kinds:
        table.add_column(kind, justify="right")
    table.add_row("queries changed", "", *(str(r["n_changed"]) for r in kinds.values()), end_section=True)
    for m, v in report["original"].items():
        table.add_row(m, f"{v:.4f}", *(f"{r['loss'][m]:+.4f}" for r in kinds.values()))
    stdout().print(table)
    if not quiet:
        note(f"written: {path}")


def _print_funnel(report: dict, path: Path, quiet: bool) -> None:
    from rich.table import Table

    n = report["n_queries"]
    c = report["counts"]
    table = Table(title=f"funnel: {n} queries with a relevant document (k {report['params']['k']}, "
                        f"candidates {report['params']['candidates']})")
    table.add_column("where the gold is missing")
    table.add_column("queries", justify="right")
    table.add_column("share", justify="right")
    rows = [("not in sparse candidates", c["not_in_sparse"]), ("not in dense candidates", c["not_in_dense"])]
    labels = {"retrieval": "first lost: in neither candidate list", "fusion": "first lost: in fusion",
              "rerank": "first lost: dropped by rerank", "evidence": "first lost: cut from the evidence",
              "citation": "first lost: not cited", "none": "reached the last layer measured"}
    measured = set(report["layers_measured"]) | {"retrieval", "none"}
    rows += [(labels[s], v) for s, v in c["first_missing"].items()
             if s in measured or (s == "citation" and "cited" in measured)]
    for label, v in rows:
        table.add_row(label, str(v), f"{v / n:.1%}" if n else "")
    stdout().print(table)
    stdout().print("ANN recall (HNSW vs exact): " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.4f}'}" for k, v in report["ann"].items()),
                    highlight=False)
    if not quiet:
        note(f"written: {path}")


def _ids(ids: list, shown: int = 10) -> str:
    return ", ".join(map(str, ids[:shown])) + (f", ... ({len(ids) - shown} more)" if len(ids) > shown else "")


def _warn_run_checks(report: dict, run: str | None = None, *, given_run: bool = True) -> None:
    """Say on stderr what trec_eval would have done silently: queries scored 0
    or ignored (by id), repeated rows, ties ordered by id, and (for a run file
    the user gave, `given_run`) a run shallower than the largest k; each line
    led by "RUN: " when `run` is given (one run of several)."""
    n = report["n_queries"]
    lead = f"{run}: " if run else ""
    depth, ks = report.get("run_depth", 0), report.get("ks") or [0]
    if given_run and 0 < depth < max(ks):
        warn(f"{lead}the run holds at most {depth} document{'s' if depth != 1 else ''} per query, fewer than "
             f"k = {max(ks)}: metrics at a larger k count only those (P@{max(ks)} <= {depth / max(ks):.3g}); "
             f"search deeper or leave out that k (--ks)")
    if report.get("queries_missing_from_run"):
        ids = report["queries_missing_from_run"]
        warn(f"{lead}{len(ids)} of {n} qrels queries are not in the run and score 0 "
             f"(is it the run and qrels of the same query set?): {_ids(ids)}")
    if report.get("queries_without_relevant"):
        ids = report["queries_without_relevant"]
        warn(f"{len(ids)} qrels quer{'y has' if len(ids) == 1 else 'ies have'} no relevant document "
             f"(relevance >= 1) and score 0: {_ids(ids)}")
    if report.get("run_queries_not_in_qrels"):
        ids = report["run_queries_not_in_qrels"]
        warn(f"{lead}{len(ids)} run quer{'y is' if len(ids) == 1 else 'ies are'} not in the qrels and ignored: {_ids(ids)}")
    dups = report.get("duplicates") or {}
    if dups.get("n"):
        ex = ", ".join(f"{q}/{c}" for q, c in dups["examples"])
        warn(f"{lead}{dups['n']} repeated (query, id) row(s) counted once, at their best score; e.g. {ex}")
    ties = report.get("ties") or {}
    if ties.get("n_groups"):
        note(f"ties: {ties['n_ids']} ids in {ties['n_groups']} groups of equal score "
             f"({ties['n_queries']} queries) ordered by id, descending, as trec_eval orders them")
