"""A Markdown summary of any `rag eval` report (metrics, comparison,
funnel, answers with refusal rates, fusion and refusal tuning, perturbation), chosen by the report's keys.

Numbers are printed with 4 decimals (milliseconds with 1); the JSON report
keeps them in full.
"""

from __future__ import annotations


def _f(v, digits: int = 4) -> str:
    return "n/a" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def _text(value) -> str:
    """A name or id from a user's file as one line of plain Markdown text: no
    escape sequences or control characters (`rag_cli.safe_text.plain`), no
    line breaks."""
    from rag_cli.safe_text import plain

    return " ".join(plain(str(value)).split())


def _cell(value) -> str:
    """`_text` for a table cell: `|` escaped so it does not split the cell."""
    return _text(value).replace("|", "\\|")


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(map(_cell, header)) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(_cell(_f(c) if not isinstance(c, str) else c) for c in row) + " |" for row in rows]
    return out + [""]


def _metrics(report: dict) -> list[str]:
    means = report["metrics"]
    ks = sorted({int(m.split("@")[1]) for m in means if "@" in m})
    names = list(dict.fromkeys(m.split("@")[0] for m in means if "@" in m))
    lines = [f"# Evaluation: {_text(report.get('run', ''))}", "",
             f"{report['n_queries']} queries, {report.get('level', 'doc')} level; "
             f"qrels {_text(report.get('qrels', ''))}.", ""]
    lines += _table(["metric", *(f"@{k}" for k in ks)],
                    [[n, *(means.get(f"{n}@{k}") for k in ks)] for n in names])
    whole = [[m, means[m]] for m in ("map", "rprec") if m in means]
    if whole:
        lines += _table(["whole run", "value"], whole)
    return lines


def _comparison(report: dict) -> list[str]:
    lines = [f"# Comparison of runs ({report['n_queries']} queries)", ""]
    for comp in report["comparisons"]:
        lines += [f"## baseline {_text(comp['baseline'])} vs {_text(comp['run'])}", "",
                  "p-values two-sided, Holm-corrected across the metrics.", ""]
        lines += _table(["metric", comp["baseline"], comp["run"], "diff", "p rand", "p t-test", "W/T/L"],
                        [[m, r["baseline"], r["run"], f"{r['mean_diff']:+.4f}", r["p_randomisation_holm"],
                          r["p_t_test_holm"], f"{r['wins']}/{r['ties']}/{r['losses']}"]
                         for m, r in comp["metrics"].items()])
    return lines


def _funnel(report: dict) -> list[str]:
    c, n = report["counts"], report["n_queries"]
    rows = [["not in sparse candidates", c["not_in_sparse"]], ["not in dense candidates", c["not_in_dense"]]]
    rows += [[f"first lost: {layer}", v] for layer, v in c["first_missing"].items()]
    lines = [f"# Funnel: {n} queries with a relevant document", ""]
    lines += _table(["where the gold is missing", "queries", "share"],
                    [[label, str(v), f"{v / n:.1%}" if n else ""] for label, v in rows])
    from rag_cli.index.backends import ann_label

    label = ann_label(report.get("ann_backend"))
    lines += _table([f"ANN recall ({label} vs exact)", "value"], [[k, v] for k, v in report["ann"].items()])
    return lines


def judge_model_line(model: dict) -> str:
    """The judge's model in one line: base_url + model (openai) or the GGUF file and its sha256 prefix."""
    if model.get("generator") == "openai":
        who = f"openai {model['base_url']} model {model['model']} ({model['api']})"
    elif model.get("generator") == "llama-cpp":
        who = f"llama-cpp {model['model']} sha256 {model['sha256']}"
    else:
        who = str(model.get("generator"))
    return f"judge {who}, temperature {model.get('temperature')}, seeds {model.get('seeds')}"


def _judge(judge: dict) -> list[str]:
    c = judge["counts"]
    unparsed = ", ".join(f"{k} {sum(v)}" for k, v in c["unparsed"].items())
    lines = ["## LLM judge (RAGAS faithfulness and answer relevancy)", "",
             f"{judge_model_line(judge['model'])}. {c['n_judged']} answers judged, {c['n_refused']} refused "
             f"(not judged), {c['n_repeats']} repeat(s); mean ± sd over the repeats. Unparsed judge outputs: "
             f"{unparsed}; question generations {sum(c['question_generations_unparsed'])}.", ""]
    return lines + _table(["metric", "mean", "sd", "repeats"],
                          [[m, r["mean"], r["sd"], " ".join(_f(v) for v in r["repeats"])]
                           for m, r in judge["metrics"].items()])


def _answers(report: dict) -> list[str]:
    lines = [f"# Answers: {_text(report.get('answers', ''))}", ""]
    if "counts" in report:
        c = report["counts"]
        lines += [f"{c['n_questions']} questions with gold answers, {c['n_refused']} refused.", ""]
        lines += _table(["metric", "value"], [[m, _f(v, 1 if m.endswith("_ms") else 4)]
                                              for m, v in report["metrics"].items()])
    if "refusal" in report:
        r = report["refusal"]
        lines += [f"## Refusal: {r['n_unanswerable']} made-unanswerable questions ({_text(report['unanswerable'])})", ""]
        lines += _table(["rate", "value"], [[m, _f(r[m])] for m in
                                            ("refusal_unanswerable", "false_answer_rate", "false_refusal_rate")])
        if report.get("recorded_gate_off"):
            lines += [f"Recorded with the gate off (no gate refusals): {_text(', '.join(report['recorded_gate_off']))}; "
                      "these refusals are the generator's alone.", ""]
    return lines + (_judge(report["judge"]) if "judge" in report else [])


def _refusal_tuning(report: dict) -> list[str]:
    best = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in report["best"].items())
    lines = [f"# Refusal gate tuned on train: {best}", "",
             f"The most refusals of made-unanswerable questions with false refusals on answerable ones at most "
             f"{report['max_false_refusal']:g} (target {'met' if report['target_met'] else 'not met'}), over "
             f"{report['n_settings']} settings simulated on the recorded signals; the test split was not used "
             f"to choose.", ""]
    rows = []
    for split in ("train", "test"):
        for which in ("current", "tuned"):
            if report.get(split):
                r = report[split][which]
                rows.append([f"{split} ({r['n_answerable']}+{r['n_unanswerable']})", which,
                             r["refusal_unanswerable"], r["false_answer_rate"], r["false_refusal_rate"]])
    lines += _table(["split", "setting", "refused unanswerable", "false answers", "false refusals"], rows)
    from rag_cli.evaluate.gate_tuning import threshold_notes

    notes = threshold_notes(report)
    if notes:
        lines += ["Cosine thresholds, one per question language: " + "; ".join(notes) + ".", ""]
    return lines + _table(["threshold", "current", "tuned"],
                          [[k, _f(report["current"][k]), _f(v)] for k, v in report["best"].items()])


def _tuning(report: dict) -> list[str]:
    best = ", ".join(f"{k} = {v}" for k, v in report["best"].items())
    metric = report["metric"]
    lines = [f"# Fusion tuned on train: {best}", "",
             f"Chosen by {metric} on the train split ({report['train']['n_queries']} queries, "
             f"{report['candidates']} candidates per retriever); the test split was not used to choose.", ""]
    rows = [["train", report["train"]["default"], report["train"]["best"],
             f"{report['train']['best'] - report['train']['default']:+.4f}", ""]]
    if report.get("test"):
        r = report["test"]["comparison"]["metrics"][metric]
        rows.append([f"test ({report['test']['n_queries']})", r["baseline"], r["run"], f"{r['mean_diff']:+.4f}",
                     r["p_randomisation_holm"]])
    lines += _table(["split", "RRF k=60", "tuned", "diff", "p rand (Holm)"], rows)
    lines += ["## Grid (train)", ""]
    lines += _table(["fusion", "rrf_k", "dense_weight", metric],
                    [[g["fusion"], str(g.get("rrf_k", "")), str(g.get("dense_weight", "")), g["train"]]
                     for g in report["grid"]])
    return lines


def _perturb(report: dict) -> list[str]:
    names = list(report["original"])
    lines = [f"# Perturbed queries ({report['n_queries']}, mode {report['mode']})", "",
             "Loss = metric on the changed queries - metric on the originals.", ""]
    rows = [["original", "", *(report["original"][m] for m in names)]]
    rows += [[k, str(r["n_changed"]), *(f"{r['loss'][m]:+.4f}" for m in names)]
             for k, r in report["perturbations"].items()]
    return lines + _table(["queries", "changed", *names], rows)


def to_markdown(report: dict) -> str:
    """The Markdown summary of a report (see the module docstring)."""
    if "comparisons" in report:
        lines = _comparison(report)
    elif report.get("tuned_for") == "refusal":
        lines = _refusal_tuning(report)
    elif "tuned_on" in report:
        lines = _tuning(report)
    elif "perturbations" in report:
        lines = _perturb(report)
    elif "ann" in report:
        lines = _funnel(report)
    elif "answers" in report and ("counts" in report or "judge" in report):
        lines = _answers(report)
    else:
        lines = _metrics(report)
    return "\n".join(lines).rstrip() + "\n"
