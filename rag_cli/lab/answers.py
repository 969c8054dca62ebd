"""Score answers (`rag eval answers --answers A --gold G`): exact match, F1,
has-answer, citation precision/recall, refusal rate and latency p50/p95 of
answers/NAME.parquet (from `rag ask --queries`) against gold answers
(see `rag_cli.evaluate.answers`), and with answers to made-unanswerable
questions the refusal, false-answer and false-refusal rates. The LLM judge
of `rag_cli.lab.judge` adds its metrics to the same report."""

from __future__ import annotations

import os
from pathlib import Path

from rag_cli.errors import BadInput
from rag_cli.lab.common import file_stem, prepare
from rag_cli.lab.report import Report, ids


def chunks_not_in_project(wanted: set[str], found, answers_path: Path, chunks_path: Path) -> int:
    """How many of the chunk ids `wanted` (cited or given as evidence in
    `answers_path`) are not among `found` (those of `chunks_path`). Raises
    BadInput when none is found: the answers were recorded in another
    project."""
    unknown = len(wanted) - sum(1 for c in wanted if c in found)
    if wanted and unknown == len(wanted):
        raise BadInput(f"the answers in {answers_path} cite chunks that are not in project {chunks_path.parent} "
                       f"(none of their {len(wanted)} evidence chunk ids is in {chunks_path}): were they recorded "
                       "in another project? use -p PROJECT of `rag ask --queries`")
    return unknown


def score_answers(answers_path: Path, gold_path: Path | None, chunks_path: Path,
                  unanswerable: Path | None = None, ask_config=None) -> dict:
    """Score answers/NAME.parquet against gold answers (`answers.jsonl`,
    see `rag_cli.evaluate.datasets.read_gold_answers`) with the chunk texts
    of `chunks_path` (`rag_cli.evaluate.answers.answer_metrics`), plus
    n_chunks_not_in_project and evidence_changed (None: the answers file
    keeps no fingerprint of its evidence; else whether this project's texts
    of the chunks the scored rows, those with a gold answer, cite or were
    given differ). With `unanswerable` (answers to
    made-unanswerable questions), "refusal" holds `refusal_rates` of the
    refused flags of the answerable rows (those with a gold answer; every
    row when `gold_path` is None) and of every row of `unanswerable`, and
    `n_neither`, the rows of `answers_path` that are neither (no gold
    answer: not counted); "recorded_gate_off" the
    files of the two that look recorded with `rag ask --gate off` under the
    `[ask]` config `ask_config` (`gate_tuning.looks_gate_off`). Returns the
    report ({"answers": path} and "refusal" only when `gold_path` is None).
    Raises BadInput for a missing or malformed answers, gold or chunks file,
    or answers that cite no chunk of this project."""
    from rag_cli.evaluate.answers import answer_metrics, refusal_rates
    from rag_cli.evaluate.datasets import read_gold_answers
    from rag_cli.store.answers import evidence_changed, read_answers
    from rag_cli.store.chunks import read_chunks

    answers = read_answers(answers_path)  # checked first: a bad file fails before a judge loads
    rows = answers.to_pylist()
    report: dict = {"answers": str(answers_path)}
    if gold_path is not None:
        gold = read_gold_answers(gold_path)
        wanted = {c for r in rows for c in (r.get("citations") or []) + (r.get("contexts") or [])}
        table = read_chunks(chunks_path, columns=["chunk_id", "text"], required=["chunk_id", "text"])
        texts = {c: t for c, t in zip(table.column("chunk_id").to_pylist(), table.column("text").to_pylist())
                 if c in wanted}
        unknown = chunks_not_in_project(wanted, texts, answers_path, chunks_path)
        report.update({"gold": str(gold_path), **answer_metrics(rows, gold, texts)})
        report["n_chunks_not_in_project"] = unknown
        scored = {c for r in rows if str(r["query_id"]) in gold for c in (r.get("citations") or []) +
                  (r.get("contexts") or [])}  # the rows with a gold answer: those the metrics score
        report["evidence_changed"] = evidence_changed(answers, {c: texts.get(c, "") for c in wanted}, scored)
    if unanswerable is not None:
        from rag_cli.evaluate.gate_tuning import looks_gate_off

        cut = read_answers(unanswerable).to_pylist()
        report["unanswerable"] = str(unanswerable)
        # answerable: the rows with a gold answer (every row when no gold is given); unanswerable: the rows of
        # `unanswerable`; a row of `answers_path` without gold is neither and is not counted
        answerable = rows if gold_path is None else [r for r in rows if str(r["query_id"]) in gold]
        report["refusal"] = {**refusal_rates([r["refused"] for r in answerable], [r["refused"] for r in cut]),
                             "n_neither": len(rows) - len(answerable)}
        if ask_config is not None:
            report["recorded_gate_off"] = [str(f) for f, rs in ((answers_path, rows), (unanswerable, cut))
                                           if looks_gate_off(rs, ask_config)]
    return report


def prepare_answers(p, answers, gold, unanswerable, *, name, output, md, plots) -> Path:
    """The preamble of `run` and of `rag_cli.lab.judge.run`: the project and
    its chunks.parquet must exist; the report's path: `output`, else
    eval/NAME.json (NAME: `name`, else answers-ANSWERS); files checked."""
    return prepare(p, {"--answers": answers, "--gold": gold, "--unanswerable": unanswerable}, name=name,
                   default=f"answers-{file_stem(answers)}", output=output, md=md, plots=plots,
                   needs=[(p.chunks_path, "chunk")])


def run(p, answers: str | os.PathLike, gold: str | os.PathLike | None, *, name: str | None = None,
        output: str | os.PathLike | None = None, unanswerable: str | os.PathLike | None = None,
        md: str | os.PathLike | None = None, plots: str | os.PathLike | None = None) -> "AnswersReport":
    """Score `answers` against `gold` in project `p` (`score_answers`, with
    the project's [ask] config for the gate-off check). Writes `output`,
    else eval/NAME.json (NAME: `name`, else answers-ANSWERS).
    Raises BadInput when `gold` is None (the judge is `rag_cli.lab.judge`),
    the project or its chunks are missing, or for a bad file."""
    if gold is None:
        raise BadInput("--answers FILE needs --gold FILE (gold answers) or --judge (an LLM judge), or both")
    path = prepare_answers(p, answers, gold, unanswerable, name=name, output=output, md=md, plots=plots)
    data = score_answers(Path(answers), Path(gold), p.chunks_path,
                         unanswerable=Path(unanswerable) if unanswerable is not None else None,
                         ask_config=p.config.ask)
    report = AnswersReport(data, path, chunks_path=p.chunks_path)
    report.save()
    return report


class AnswersReport(Report):
    """Answer metrics and/or the LLM judge's ("judge"): one table each.
    `chunks_path`: the project's chunks.parquet (named in the warnings)."""

    kind = "answers"

    def __init__(self, data: dict, path: str | os.PathLike | None = None, *, chunks_path: Path | None = None):
        super().__init__(data, path)
        self.chunks_path = chunks_path

    def _messages(self) -> list[tuple[str, str]]:
        """Evidence chunks not in the project or changed since, answers that
        look recorded with the gate off, questions without an answer row,
        rows without gold, and judge outputs that could not be parsed."""
        r, out = self.data, []
        answers, chunks = r["answers"], self.chunks_path
        if r.get("n_chunks_not_in_project"):
            out.append(f"{r['n_chunks_not_in_project']} chunk id(s) cited or given as evidence in {answers} are not "
                       f"in this project's chunks ({chunks}): their citations and has-answer count as missing. "
                       "Recorded before the project was rebuilt, or in another project (-p)?")
        if r.get("evidence_changed"):
            out.append(f"the chunks cited or given as evidence in {answers} had other texts when they were answered "
                       f"than this project's ({chunks}) now: recorded in another project (-p), or before the "
                       "documents changed? has-answer and citation precision are measured on the current texts")
        if r.get("recorded_gate_off"):
            out.append(f"{' and '.join(r['recorded_gate_off'])}: no question was refused by the refusal gate, "
                       "though the gate of this project's [ask] settings refuses some: recorded with `rag ask --gate "
                       "off`? The refusal rates are then the generator's alone, not those of `rag ask`")
        if r.get("missing_answers"):
            out.append(f"{len(r['missing_answers'])} question(s) of the gold file have no answer row: "
                       + ids(r["missing_answers"]))
        if r.get("no_gold"):
            neither = (f", nor counted in the refusal rates (neither answerable, with a gold answer, nor "
                       f"unanswerable, in {r['unanswerable']})" if r.get("refusal", {}).get("n_neither") else "")
            out.append(f"{len(r['no_gold'])} answer row(s) have no gold answer and were not scored{neither}: "
                       + ids(r["no_gold"]))
        if "judge" in r:
            c = r["judge"]["counts"]
            bad = {k: sum(v) for k, v in c["unparsed"].items() if sum(v)}
            if bad or sum(c["question_generations_unparsed"]):
                out.append("judge outputs that could not be parsed (all repeats): "
                           + ", ".join(f"{k} {v}" for k, v in bad.items())
                           + f"; question generations {sum(c['question_generations_unparsed'])}")
            if c["missing_contexts"]:
                out.append(f"{len(c['missing_contexts'])} evidence chunk(s) are not in chunks.parquet and were left "
                           "out of the judge's context: " + ids(c["missing_contexts"]))
        return [("warning", text) for text in out]

    def print_tables(self, console) -> None:
        """The answer metrics (with the refusal rates), then the judge's table (mean ± sd over repeats)."""
        from rich.table import Table

        from rag_cli.evaluate.markdown import judge_model_line
        from rag_cli.safe_text import plain_text

        r = self.data
        if "counts" in r:
            c = r["counts"]
            table = Table(title=f"answers: {c['n_questions']} questions with gold answers ({c['n_refused']} refused)")
            table.add_column("metric")
            table.add_column("value", justify="right")
            for m, v in r["metrics"].items():
                table.add_row(m, "n/a" if v is None else (f"{v:.1f}" if m.endswith("_ms") else f"{v:.4f}"))
            for m in ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate"):
                if "refusal" in r:
                    v = r["refusal"][m]
                    table.add_row(m, "n/a" if v is None else f"{v:.4f}")
            console.print(table)
        if "judge" in r:
            judge = r["judge"]
            c = judge["counts"]
            table = Table(title=plain_text(f"LLM judge: {c['n_judged']} answers judged ({c['n_refused']} refused, "
                                           f"not judged), {c['n_repeats']} repeat(s); "
                                           f"{judge_model_line(judge['model'])}"))
            for col in ("metric", "mean", "sd", "repeats"):
                table.add_column(col, justify="left" if col == "metric" else "right")
            for m, v in judge["metrics"].items():
                table.add_row(m, "n/a" if v["mean"] is None else f"{v['mean']:.4f}",
                              "n/a" if v["sd"] is None else f"{v['sd']:.4f}",
                              " ".join("n/a" if x is None else f"{x:.4f}" for x in v["repeats"]))
            console.print(table)
