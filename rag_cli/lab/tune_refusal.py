"""Tune the refusal gate (`rag eval tune refusal`): grid-search the
gate's thresholds (ask.min_score on the questions with Chinese characters,
ask.min_score_en on the others, min_coverage, min_entity_coverage,
strong_score, min_rerank_score) on answers recorded with the gate off, for
the most refusals of made-unanswerable questions with false refusals of
answerable ones at most a target, then fit the learned refusal (a logistic
regression over the per-sentence signals, ask.refusal_weights) on top, and
write the winner to rag.toml [ask] (see `rag_cli.evaluate.gate_tuning`)."""

from __future__ import annotations

import os
from pathlib import Path

from rag_cli.config import check_flag
from rag_cli.errors import BadInput
from rag_cli.lab.common import file_stem, prepare
from rag_cli.lab.report import Report

PER_WEIGHT = 10
"""Train questions wanted per weight of the learned refusal (bias and one per
feature): the rule of thumb of ten events per variable for a logistic
regression (Peduzzi et al. 1996, J Clin Epidemiol 49(12):1373-1379)."""


def few_questions(data: dict) -> str | None:
    """Why the learned refusal of `tune_refusal`'s `data` (with the input
    paths) may fit noise: fewer train questions than PER_WEIGHT per weight
    (None when not fitted or enough)."""
    from rag_cli.generate.gate import FEATURES

    if not data.get("learn"):
        return None
    n = data["train"]["current"]["n_answerable"] + data["train"]["current"]["n_unanswerable"]
    n_weights = 1 + len(FEATURES)
    if n >= PER_WEIGHT * n_weights:
        return None
    check = ("" if data.get("test_answers") else
             "; give --test-answers and --test-unanswerable to check it on other questions")
    return (f"the learned refusal fits {n_weights} weights on {n} train questions, fewer than "
            f"{PER_WEIGHT * n_weights} ({PER_WEIGHT} per weight): it may fit noise{check}, or --no-learn to "
            "tune the rules only")


def _recorded_pair(answers, unanswerable, flags: tuple[str, str]) -> tuple[list[dict], list[dict]]:
    """The rows of two answers files, each checked to be recorded with the
    gate off (`check_recorded`; `flags` name them in errors)."""
    from rag_cli.evaluate.gate_tuning import check_recorded
    from rag_cli.store.answers import read_answers

    rows = []
    for f, flag in zip((answers, unanswerable), flags):
        rows.append(read_answers(Path(f)).to_pylist())
        check_recorded(rows[-1], f"{flag} {f}")
    return rows[0], rows[1]


def run(p, answers: str | os.PathLike, unanswerable: str | os.PathLike, *, max_false_refusal: float = 0.05,
        test_answers: str | os.PathLike | None = None, test_unanswerable: str | os.PathLike | None = None,
        name: str | None = None, output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
        plots: str | os.PathLike | None = None, learn: bool = True) -> "TuneRefusalReport":
    """Tune the gate of project `p` on `answers` (answerable questions) and
    `unanswerable` (made-unanswerable ones), both recorded with
    `ask_queries(..., gate="off")`, for false refusals at most
    `max_false_refusal` (a rate, 0-1), then (with `learn`) the learned
    refusal on top (`fit_learned`; kept only when it refuses more within the
    target); write the winner to rag.toml [ask];
    score the current and the tuned setting on the test pair when given.
    Writes `output`, else eval/NAME.json (NAME: `name`, else
    tune-refusal-ANSWERS); the report adds the input paths and "written_to",
    and warns when the learned refusal is fitted on fewer than PER_WEIGHT
    train questions per weight (`few_questions`).
    Raises BadInput for a rate out of range, one test file without the
    other, a missing project, or files not recorded with the gate off;
    rag.toml is not changed then."""
    from rag_cli.evaluate.gate_tuning import LEARNED, TUNED, tune_refusal

    check_flag("--max-false-refusal", max_false_refusal, (0, 1))
    if (test_answers is None) != (test_unanswerable is None):
        raise BadInput("--test-answers and --test-unanswerable go together: give both (the test split) or neither")
    path = prepare(p, {"--answers": answers, "--unanswerable": unanswerable, "--test-answers": test_answers,
                       "--test-unanswerable": test_unanswerable, "rag.toml": p.config_path}, name=name,
                   default=f"tune-refusal-{file_stem(answers)}", output=output, md=md, plots=plots)
    train = _recorded_pair(answers, unanswerable, ("--answers", "--unanswerable"))
    test = (_recorded_pair(test_answers, test_unanswerable, ("--test-answers", "--test-unanswerable"))
            if test_answers is not None else None)
    data = tune_refusal(train, test, p.config.ask, max_false_refusal=max_false_refusal, learn=learn)
    with p.folder.writing("eval tune refusal"):
        p.folder.save(("ask", {k: data["best"][k] for k in TUNED + LEARNED}))
    data = {"answers": str(answers), "unanswerable": str(unanswerable), "test_answers": str(test_answers or ""),
            "test_unanswerable": str(test_unanswerable or ""), "written_to": str(p.config_path), **data}
    report = TuneRefusalReport(data, path)
    report.save()
    return report


class TuneRefusalReport(Report):
    """The gate tuned on train: the current and the tuned setting, on train and test."""

    kind = "tune-refusal"

    def _messages(self) -> list[tuple[str, str]]:
        why = few_questions(self.data)
        return [("warning", why)] if why else []

    def written_line(self) -> str:
        return f"written: {self.data['written_to']} ([ask] thresholds) and {self.path}"

    def print_tables(self, console) -> None:
        """(split, setting) x (refused unanswerable, false answers, false refusals)."""
        from rich.table import Table

        from rag_cli.evaluate.gate_tuning import threshold_notes

        r = self.data
        setting = ", ".join(f"{k} {v:g}" if isinstance(v, float) else
                            f"{k} [{', '.join(f'{w:.3g}' for w in v)}]" if isinstance(v, list) else f"{k} {v}"
                            for k, v in r["best"].items())
        table = Table(title=f"refusal gate tuned on train for false refusals <= {r['max_false_refusal']:g}"
                            f"{'' if r['target_met'] else ' (target not met)'}: {setting}")
        for col in ("split", "setting", "refused unanswerable", "false answers", "false refusals"):
            table.add_column(col, justify="left" if col in ("split", "setting") else "right")
        for split in ("train", "test"):
            for which in ("current", "tuned"):
                if r[split] is None:
                    continue
                row = r[split][which]
                table.add_row(f"{split} ({row['n_answerable']}+{row['n_unanswerable']})", which,
                              *("n/a" if row[m] is None else f"{row[m]:.4f}"
                                for m in ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate")))
        console.print(table)
        for note in threshold_notes(r):
            console.print(f"cosine threshold {note}", highlight=False)
        fitted = r.get("learned_weights")
        if fitted:
            kept = "kept: written to ask.refusal_weights" if r.get("learned") else \
                "not kept: it refused no more train unanswerable questions within the target than the rules"
            weights = Table(title=f"learned refusal (log-odds of answerable, refused below 0; {kept})")
            weights.add_column("feature")
            weights.add_column("weight", justify="right")
            for feature, w in fitted.items():
                weights.add_row(feature, f"{w:.4g}")
            console.print(weights)
