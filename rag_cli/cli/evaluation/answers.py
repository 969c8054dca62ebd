"""`rag eval answers | tune refusal | make-unanswerable`: the experiments on
answers (`rag_cli.lab.answers`, `judge`, `tune_refusal`, `unanswerable`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli.common import given, progress
from rag_cli.cli.evaluation.app import REPORT, SEED, QrelsOpt, QueriesOpt, eval_app, show, tune_app
from rag_cli.cli.options import OUTPUT, PROJECT, options

AnswersOpt = Annotated[Optional[Path], typer.Option(
    "--answers", help="answers/NAME.parquet (from `rag ask --queries`) to score: EM, F1, has-answer, citation "
                      "precision/recall, refusals, latency")]
GoldOpt = Annotated[Optional[Path], typer.Option(
    "--gold", help="Gold answers: JSONL {\"_id\": query id, \"answers\": [...]}")]
CutOpt = Annotated[Optional[Path], typer.Option(
    "--unanswerable", help="Answers to made-unanswerable questions (`rag eval make-unanswerable`): adds refusal, "
                           "false-answer and false-refusal rates")]
JudgeOpt = Annotated[bool, typer.Option(
    "--judge", help="Also RAGAS faithfulness and answer relevancy, judged by an LLM (--gold then optional)")]
JudgeGeneratorOpt = Annotated[Optional[str], typer.Option(
    "--judge-generator", help="--judge: openai | llama-cpp, set up by \\[generator] (default: ask.generator)")]
JudgeRepeatsOpt = Annotated[Optional[int], typer.Option(
    "--judge-repeats", help="--judge: times the whole judging is repeated (mean ± sd over them; default 3)")]
JudgeTemperatureOpt = Annotated[Optional[float], typer.Option(
    "--judge-temperature", help="--judge: sampling temperature, repeat r seeded r (0: identical repeats; "
                                "default 0.3)")]
JudgeBaseUrlOpt = Annotated[Optional[str], typer.Option(
    "--judge-base-url", help="--judge with openai: the server's API root (config: generator.base_url)")]
JudgeModelOpt = Annotated[Optional[str], typer.Option(
    "--judge-model", help="--judge: openai model name, or llama-cpp .gguf path (config: generator.model)")]
JudgeApiOpt = Annotated[Optional[str], typer.Option(
    "--judge-api", help="--judge with openai: chat | completions (config: generator.api)")]

TrainAnswersOpt = Annotated[Path, typer.Option(
    "--answers", help="The train split's answers to answerable questions (recorded with `rag ask --gate off`)")]
TrainCutOpt = Annotated[Path, typer.Option(
    "--unanswerable", help="The train split's answers to made-unanswerable questions (recorded with --gate off)")]
MaxFalseRefusalOpt = Annotated[Optional[float], typer.Option(
    "--max-false-refusal", help="The largest false-refusal rate allowed on the answerable questions (default 0.05)")]
TestAnswersOpt = Annotated[Optional[Path], typer.Option(
    "--test-answers", help="The test split's answerable answers (recorded with --gate off)")]
TestCutOpt = Annotated[Optional[Path], typer.Option(
    "--test-unanswerable", help="The test split's made-unanswerable answers")]

NoLearnOpt = Annotated[bool, typer.Option(
    "--no-learn", help="Grid-search the rules only: fit no learned refusal (ask.refusal_weights is set to [])")]

NArg = Annotated[int, typer.Argument(help="How many questions to make unanswerable (at least)")]
CorpusOpt = Annotated[Path, typer.Option("--corpus", help="The corpus, BEIR JSONL (.gz too)")]
FolderOpt = Annotated[Path, typer.Option(
    "-o", "--output", help="The folder to write: corpus.jsonl, queries.jsonl, removed.json")]


def _judge_check(answers: Path | None, gold: Path | None, judge: bool, judge_flags: dict) -> None:
    """Raise BadInput, before anything is read, for `rag eval answers` without --answers or with a
    --judge-* flag but no --judge."""
    from rag_cli.errors import BadInput

    if answers is None:
        said = [f for f, v in (("--gold", gold), ("--judge", judge)) if v]
        lead = f"{' and '.join(said)} score{'s' if len(said) == 1 else ''} answers: give" if said else "give"
        raise BadInput(f"{lead} --answers FILE too (answers/NAME.parquet, written by `rag ask --queries`)")
    extra = [flag for flag, value in judge_flags.items() if value is not None]
    if extra and not judge:
        raise BadInput(f"{', '.join(extra)}: the --judge-* flags need --judge (an LLM judge); give --judge or "
                       f"leave out {', '.join(extra)}")


@eval_app.command("answers")
@options(REPORT, PROJECT, OUTPUT)
def answers(answers: AnswersOpt = None, gold: GoldOpt = None, unanswerable: CutOpt = None, judge: JudgeOpt = False,
            judge_generator: JudgeGeneratorOpt = None, judge_repeats: JudgeRepeatsOpt = None,
            judge_temperature: JudgeTemperatureOpt = None, judge_base_url: JudgeBaseUrlOpt = None,
            judge_model: JudgeModelOpt = None, judge_api: JudgeApiOpt = None, *, name, output, md, project, json_out,
            quiet):
    r"""Score answers against gold answers: EM, F1, has-answer, citations, refusals, latency; or judge them by an LLM.

    `rag eval answers --answers answers/NAME.parquet --gold answers.jsonl` scores `rag ask
    --queries` output: exact match and F1 as the SQuAD v1.1 script defines them
    (character tokens for Chinese), has-answer, citation precision and recall
    (from the chunk texts), refusal rate, latency p50/p95; `eval/answers-NAME.json`.
    `--unanswerable U.parquet` (the answers to the made-unanswerable questions)
    adds the refusal rate on made-unanswerable questions and the false-answer
    rate (1 − it), and from `--answers` the false-refusal rate on answerable ones
    (the rows with a gold answer; a row without one is neither answerable nor
    unanswerable, is not counted, and stderr and `refusal.n_neither` say how many).
    `rag eval answers --answers answers/NAME.parquet --judge \[--gold answers.jsonl]`
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
    """
    from rag_cli import lab
    from rag_cli.project import Project

    _judge_check(answers, gold, judge, {"--judge-generator": judge_generator, "--judge-repeats": judge_repeats,
                                        "--judge-temperature": judge_temperature, "--judge-base-url": judge_base_url,
                                        "--judge-model": judge_model, "--judge-api": judge_api})
    p = Project.open(project)
    if not judge:
        report = lab.answers.run(p, answers, gold, name=name, output=output, unanswerable=unanswerable, md=md)
        return show(report, json_out=json_out, quiet=quiet, md=md)
    llm = {"base_url": judge_base_url, "model": judge_model, "api": judge_api}
    with progress(quiet or json_out) as bar:
        report = lab.judge.run(p, answers, gold, judge_generator=judge_generator, llm=llm, name=name, output=output,
                               unanswerable=unanswerable, md=md, progress=bar,
                               **given(dict(judge_repeats=judge_repeats, judge_temperature=judge_temperature)))
    show(report, json_out=json_out, quiet=quiet, md=md)


@tune_app.command("refusal")
@options(REPORT, PROJECT, OUTPUT)
def tune_refusal(answers: TrainAnswersOpt, unanswerable: TrainCutOpt, max_false_refusal: MaxFalseRefusalOpt = None,
                 test_answers: TestAnswersOpt = None, test_unanswerable: TestCutOpt = None,
                 no_learn: NoLearnOpt = False, *, name, output, md, project, json_out, quiet):
    r"""Grid-search the refusal gate's thresholds on answers recorded with the gate off; write them to rag.toml.

    `rag eval tune refusal --answers A.parquet --unanswerable U.parquet
    \[--max-false-refusal 0.05] \[--test-answers A2 --test-unanswerable U2]`, on
    answers recorded with `rag ask --queries ... --gate off`, grid-searches
    `ask.min_score` (on the questions with Chinese characters), `min_score_en`
    (on the others; a threshold with no such question keeps its value; the
    report names both and the questions each judged), `min_coverage`,
    `min_entity_coverage`, `strong_score` (and
    `min_rerank_score` when the answers have cross-encoder scores) and `entity_scope` (zh | all) by simulating
    the gate's own decision on the recorded signals (refused = the gate refuses
    or the generator refused), keeps the setting refusing the most
    made-unanswerable questions with at most that false-refusal rate (ties: the
    one closest to the current setting), writes it to `rag.toml` `\[ask]`, and
    reports the current and tuned rates on train and test;
    `eval/tune-refusal-A.json`. Then it fits the learned refusal (a logistic
    regression over the per-sentence signals) on top and keeps it
    (`ask.refusal_weights`) only when it refuses more train unanswerable
    questions within the target; the report shows its weights, kept or not.
    `--no-learn` searches the rules only.
    """
    from rag_cli import lab
    from rag_cli.project import Project

    report = lab.tune_refusal.run(Project.open(project), answers, unanswerable, test_answers=test_answers,
                                  test_unanswerable=test_unanswerable, name=name, output=output, md=md,
                                  learn=not no_learn, **given(dict(max_false_refusal=max_false_refusal)))
    show(report, json_out=json_out, quiet=quiet, md=md)


@eval_app.command("make-unanswerable")
@options(SEED, OUTPUT)
def make_unanswerable(n: NArg, corpus: CorpusOpt, queries: QueriesOpt, qrels: QrelsOpt, output: FolderOpt, *, seed,
                      json_out, quiet):
    r"""Write a corpus with the gold documents of N questions removed, for measuring refusals (no project needed).

    `rag eval make-unanswerable N --corpus CORPUS.jsonl --queries Q --qrels QRELS
    -o DIR \[--seed S]` writes the made-unanswerable variant of a BEIR corpus:
    the relevant documents of at least N questions (sampled with `--seed`)
    removed, whole documents at a time (every question of a removed passage
    counts), into `DIR/corpus.jsonl`, `DIR/queries.jsonl` (those questions)
    and `DIR/removed.json` (the question and document ids). N above the
    questions that can be made unanswerable with one document of the corpus
    kept is an error (exit 2). Build a project from `DIR/corpus.jsonl` and
    ask `DIR/queries.jsonl` there; ask the same questions in the project of
    the full corpus, and score both with `rag eval answers --unanswerable`.
    """
    from rag_cli import lab

    report = lab.unanswerable.run(n, corpus=corpus, queries=queries, qrels=qrels, output=output,
                                  **given(dict(seed=seed)))
    show(report, json_out=json_out, quiet=quiet)
