"""`rag eval tune refusal`: the refusal gate's thresholds chosen on
recorded signals.

Input: two answers files recorded with the gate off (`rag ask --queries Q
--gate off`): one of answerable questions, one of made-unanswerable ones
(asked in a project built from `rag eval make-unanswerable`'s corpus).
Each row holds the gate's signals (`rag_cli.store.answers`) and the
generator's own refusal. The decision for a setting is simulated with the
gate's own function: refused = `gate_reason(signals, setting) != ""` or the
generator refused (`simulate`).

Learned refusal (`fit_learned`): after the rules, a logistic regression
of "answerable" on the gate's `FEATURES` (the evidence's cosine, coverage
and entity coverage; of the sentence that would be quoted: its share of the
question's terms, whether it lacks the number or date asked for, its score;
the cross-encoder score and the reader's no-answer margin when recorded),
fitted on the train questions that the tuned rules and the generator let
through (answerable = 1, unanswerable = 0; features standardised, L2
penalty 1, Newton's method), its threshold then moved so that false
refusals, rules included, stay within `max_false_refusal` on train. It is
kept (written as `ask.refusal_weights`, bias first, and `ask.refusal_scope`,
the language of the train questions) only when it refuses more train
unanswerable questions than the rules alone within the target.

Grid (`gate_grid`): min_score, min_score_en, min_coverage,
min_entity_coverage and strong_score, plus min_rerank_score when the rows
have cross-encoder scores; cosine thresholds from quantiles of the recorded
best cosines (per model), shares on fixed steps, each with its current
value; and the entity rule's scope (entity_scope "zh" or "all": the entity
coverage is recorded for every question). The cosine threshold is per
language (`rag_cli.generate.gate.min_score_for`), so min_score's values
come from the answerable rows with Chinese characters and min_score_en's
from the others; a threshold that judges no train row keeps its current
value (the report's `judged_by` counts the rows each one judges). The two
are searched jointly (the false-refusal target is over all the answerable
rows) but each simulated on its own rows only (`_language_counts`). The chosen setting
refuses the most made-unanswerable questions with a false-refusal rate on
the answerable ones at most `max_false_refusal`; ties go to the setting
closest to the current one (sum over the thresholds of |value - current|
over the span of that threshold's grid, plus 1 for another entity_scope). When no setting meets the target,
the one with the fewest false refusals (then the most refusals) is chosen
and `target_met` is false.

The generator's refusal is taken as recorded. With the gate off the
generator read all the evidence; with the gate on it reads the evidence at
or above the question's threshold (`min_score` or `min_score_en`), which
always holds the best piece once the gate lets a question through. The extractive generator refuses only when that evidence
has no sentence, so for it the simulation is exact; an LLM generator may
answer differently from fewer sources.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.evaluate.answers import refusal_rates
from rag_cli.generate.gate import GateSignals, gate_reason, min_score_key
from rag_cli.loaders.normalize import has_cjk

SIGNAL_COLUMNS = ("question", "contexts", "best_score", "coverage", "entity_coverage", "rerank_score",
                  "generator_refused")
TUNED = ("min_score", "min_score_en", "min_coverage", "min_entity_coverage", "strong_score", "min_rerank_score",
         "entity_scope")
#: The cosine thresholds of `TUNED`, one per question language (`min_score_key`).
THRESHOLDS = ("min_score", "min_score_en")
#: What `tune_refusal` writes besides the rules' thresholds: the learned refusal.
LEARNED = ("refusal_weights", "refusal_scope")


def check_recorded(rows: Sequence[Mapping], source: str) -> None:
    """Raise BadInput naming `source` unless every row has the gate's signals
    and, when it had evidence, the generator's own refusal (a file recorded
    with `rag ask --queries ... --gate off`)."""
    if not rows:
        raise BadInput(f"{source}: no answers")
    missing = [c for c in SIGNAL_COLUMNS if c not in rows[0]]
    if missing:
        raise BadInput(f"{source}: no {', '.join(missing)} column(s): an answers file written before the gate's "
                       f"signals were recorded; answer the questions again with `rag ask --queries ... --gate off`")
    gated = [str(r["query_id"]) for r in rows if r["contexts"] and r["generator_refused"] is None]
    if gated:
        raise BadInput(f"{source}: {len(gated)} question(s) were refused by the gate before the generator ran "
                       f"(e.g. {gated[0]}); record the answers with `rag ask --queries ... --gate off`")


def looks_gate_off(rows: Sequence[Mapping], cfg) -> bool:
    """Whether answers rows look recorded with `rag ask --gate off`: they have
    the gate's signals, the gate refused none of them before the generator
    (as `check_recorded` tells), yet the gate of the `[ask]` config `cfg`,
    switched on, refuses at least one. False for files without the signals."""
    if not rows or any(c not in rows[0] for c in SIGNAL_COLUMNS):
        return False
    if any(r["generator_refused"] is None for r in rows):
        return False
    on = replace(cfg, gate="on")
    return any(gate_reason(row_signals(r), on) for r in rows)


def row_signals(row: Mapping) -> GateSignals:
    """The `GateSignals` of one answers row."""
    return GateSignals(n_evidence=len(row["contexts"] or []), best_score=float(row["best_score"]),
                       coverage=float(row["coverage"]), entity_coverage=float(row["entity_coverage"]),
                       cjk=has_cjk(row["question"] or ""), rerank_score=row["rerank_score"],
                       **{k: row.get(k) for k in ("answer_terms", "answer_type", "sentence_score", "reader_null")})


def simulate(rows: Sequence[Mapping], cfg) -> list[bool]:
    """Whether `rag ask` with the `[ask]` config `cfg` refuses each row's question."""
    return _decide(_prepared(rows), cfg)


def _prepared(rows: Sequence[Mapping]) -> list[tuple[GateSignals, bool]]:
    return [(row_signals(r), bool(r["generator_refused"])) for r in rows]


def _decide(prepared: list[tuple[GateSignals, bool]], cfg) -> list[bool]:
    return [generator_refused or bool(gate_reason(s, cfg)) for s, generator_refused in prepared]


def rates(answerable: Sequence[Mapping], unanswerable: Sequence[Mapping], cfg) -> dict:
    """`refusal_rates` of the simulated decisions under `cfg`."""
    return refusal_rates(simulate(answerable, cfg), simulate(unanswerable, cfg))


def _values(current: float, candidates) -> list[float]:
    return sorted({round(float(v), 4) for v in candidates} | {float(current)})


def judged_by(rows: Sequence[Mapping]) -> dict[str, int]:
    """{threshold key: rows it judges}: "min_score" the rows whose question has
    CJK characters, "min_score_en" the others (`min_score_key`)."""
    keys = [min_score_key(has_cjk(r["question"] or "")) for r in rows]
    return {k: keys.count(k) for k in THRESHOLDS}


def gate_grid(answerable: Sequence[Mapping], unanswerable: Sequence[Mapping], cfg) -> dict[str, list[float]]:
    """{threshold: candidate values} (see the module docstring)."""
    best = np.array([r["best_score"] for r in list(answerable) + list(unanswerable) if r["contexts"]], dtype=float)
    grid = {}
    for key in THRESHOLDS:
        best_a = np.array([r["best_score"] for r in answerable
                           if r["contexts"] and min_score_key(has_cjk(r["question"] or "")) == key], dtype=float)
        grid[key] = (_values(getattr(cfg, key), [-1.0, *np.quantile(best_a, [0.0, 0.02, 0.05, 0.1, 0.2])])
                     if best_a.size else [float(getattr(cfg, key))])
    grid |= {
        "min_coverage": _values(cfg.min_coverage, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
        "min_entity_coverage": _values(cfg.min_entity_coverage, [0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0]),
        "strong_score": _values(cfg.strong_score, [1.0, *np.quantile(best, [0.5, 0.75, 0.9, 0.97])]
                                if best.size else [1.0]),
        "min_rerank_score": [float(cfg.min_rerank_score)],
        "entity_scope": [cfg.entity_scope] + [v for v in ("zh", "all") if v != cfg.entity_scope],
    }
    rr = np.array([r["rerank_score"] for r in answerable if r["rerank_score"] is not None], dtype=float)
    if rr.size:
        grid["min_rerank_score"] = _values(cfg.min_rerank_score, [0.0, *np.quantile(rr, [0.01, 0.02, 0.05, 0.1, 0.2])])
    return grid


def _logistic(X: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 50) -> tuple[float, np.ndarray]:
    """(bias, weights) of an L2-penalised logistic regression of y (0/1) on
    the standardised columns of X, by Newton's method; constant columns get
    weight 0. Weights and bias are returned for the raw (unstandardised) X."""
    mu, sd = X.mean(axis=0), X.std(axis=0)
    live = sd > 1e-9
    Z = np.zeros_like(X)
    Z[:, live] = (X[:, live] - mu[live]) / sd[live]
    A = np.hstack([np.ones((len(Z), 1)), Z[:, live]])
    w = np.zeros(A.shape[1])
    penalty = np.full(A.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(A @ w, -30, 30)))
        grad = A.T @ (p - y) + penalty * w
        hess = (A * (p * (1 - p))[:, None]).T @ A + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = np.zeros(X.shape[1])
    weights[live] = w[1:] / sd[live]
    bias = float(w[0] - (w[1:] * mu[live] / sd[live]).sum())
    return bias, weights


def fit_learned(train: tuple[Sequence[Mapping], Sequence[Mapping]], cfg, max_false_refusal: float) -> dict | None:
    """The learned refusal fitted on `train` (answerable rows, unanswerable
    rows) under the rules of the `AskConfig` `cfg`: a logistic regression of
    "answerable" on the `FEATURES` of the questions that the rules and the
    generator let through (`_logistic`), its decision threshold then moved
    (folded into the bias) to refuse the most unanswerable questions with
    false refusals, rules included, at most `max_false_refusal`. Returns
    {"refusal_weights": [bias, w...], "refusal_scope": en | zh | all (the
    languages of the rows)}, or None when the rows leave nothing to learn
    (one class only)."""
    from rag_cli.generate.gate import features, learned_score

    base = replace(cfg, refusal_weights=[])
    prepared = [_prepared(rows) for rows in train]
    cjk = {s.cjk for rows in prepared for s, _ in rows}
    scope = "all" if len(cjk) > 1 else ("zh" if cjk == {True} else "en")
    X, y = [], []
    for label, rows in zip((1.0, 0.0), prepared):
        for s, generator_refused in rows:
            if not generator_refused and not gate_reason(s, base):
                X.append(features(s))
                y.append(label)
    if len(set(y)) < 2:
        return None
    bias, weights = _logistic(np.array(X, dtype=float), np.array(y, dtype=float))
    raw = [bias, *weights.tolist()]
    # the threshold: the largest shift whose false refusals, with the rules', stay within the target
    refused_by_rules = sum(g or bool(gate_reason(s, base)) for s, g in prepared[0])
    n_a = max(1, len(prepared[0]))
    budget = int(np.floor(max_false_refusal * n_a + 1e-9)) - refused_by_rules
    z = sorted(learned_score(s, raw) for s, g in prepared[0] if not g and not gate_reason(s, base))
    if not z:
        shift = 0.0
    elif budget <= 0:
        shift = z[0]
    elif budget >= len(z):
        shift = z[-1] + 1e-6
    else:
        shift = z[budget]
    raw[0] -= shift  # refuse when the score < shift: at most `budget` of these answerable questions
    return {"refusal_weights": [float(v) for v in raw], "refusal_scope": scope}


def learned_weights(weights: Sequence[float]) -> dict[str, float]:
    """`ask.refusal_weights` ([bias, w per `FEATURES`]) named: {"bias": b, feature: w, ...}."""
    from rag_cli.generate.gate import FEATURES

    return {"bias": float(weights[0]), **{f: float(w) for f, w in zip(FEATURES, weights[1:])}}


def _language_counts(prepared: list[list[tuple[GateSignals, bool]]], cfg,
                     grid: Mapping[str, Sequence[float]]) -> dict[str, dict[float, tuple[int, int]]]:
    """{threshold key: {value: (refused answerable, refused unanswerable)}}:
    the simulated refusals (`_decide`) under the `AskConfig` `cfg` with that
    threshold at each of its `grid` values, counted over the rows that
    threshold judges (`min_score_key` of the row's `cjk`); `prepared` is
    (answerable rows, unanswerable rows) as `_prepared` gives them. A row's
    decision depends on its own language's threshold only, so the refusals of
    a (min_score, min_score_en) pair are the sums of its two entries."""
    out: dict[str, dict[float, tuple[int, int]]] = {}
    for key in THRESHOLDS:
        own = [[row for row in rows if min_score_key(row[0].cjk) == key] for rows in prepared]
        out[key] = {v: tuple(sum(_decide(rows, replace(cfg, **{key: v}))) for rows in own) for v in grid[key]}
    return out


def threshold_notes(report: Mapping) -> list[str]:
    """One sentence per cosine threshold of a `tune_refusal` report: its tuned
    value and the train questions it judged, e.g. "min_score_en 0.81 (questions
    without Chinese characters): 305 answerable + 628 unanswerable train
    questions"; a threshold that judged none says it was kept. [] for a report
    without `judged_by` (written before the per-language threshold)."""
    out = []
    for key, n in (report.get("judged_by") or {}).items():
        who = "with" if key == "min_score" else "without"
        value = report["best"][key]
        if n["answerable"] + n["unanswerable"]:
            out.append(f"{key} {value:g} (questions {who} Chinese characters): {n['answerable']} answerable + "
                       f"{n['unanswerable']} unanswerable train questions")
        else:
            out.append(f"{key} {value:g} (questions {who} Chinese characters): no train question, kept as it was")
    return out


def tune_refusal(train: tuple[Sequence[Mapping], Sequence[Mapping]],
                 test: tuple[Sequence[Mapping], Sequence[Mapping]] | None, cfg, *,
                 max_false_refusal: float = 0.05, learn: bool = True) -> dict:
    """Choose the gate's thresholds on `train` (answerable rows,
    made-unanswerable rows), starting from the `AskConfig` `cfg`, and score
    the current and the chosen setting on train and on `test` (same shape,
    or None). Returns {"tuned_for": "refusal", "max_false_refusal", "target_met",
    "current": {threshold: value}, "best": {threshold: value}, "n_settings",
    "grid": {threshold: [values]}, "judged_by": {"min_score" | "min_score_en":
    {"answerable": n, "unanswerable": n}} (the train rows each cosine
    threshold judges: with Chinese characters, without), "learn": whether the learned refusal was fitted,
    "learned": whether it was kept, "learned_weights": the fitted weights
    named (`learned_weights`; kept or not, None when not fitted),
    "train": {"current": rates, "tuned": rates}, "test": {...} or None}.
    With `learn` false only the rules are searched (the learned refusal of
    `cfg` is switched off in the tuned setting)."""
    cfg = replace(cfg, gate="on")
    original = cfg
    cfg = replace(cfg, refusal_weights=[])  # the rules are searched alone; the learned refusal is fitted after
    grid = gate_grid(*train, cfg)
    current = {k: getattr(cfg, k) for k in TUNED}
    span = {k: (max(v) - min(v)) or 1.0 for k, v in grid.items() if k != "entity_scope"}
    best_key, best_setting = None, None
    n = 0
    prepared = [_prepared(rows) for rows in train]
    n_a, n_u = len(prepared[0]), len(prepared[1])
    rest_keys = [k for k in TUNED if k not in THRESHOLDS]
    for values in itertools.product(*(grid[k] for k in rest_keys)):
        rest = dict(zip(rest_keys, values))
        counts = _language_counts(prepared, replace(cfg, **rest), grid)
        for thresholds in itertools.product(*(grid[k] for k in THRESHOLDS)):
            given = {**dict(zip(THRESHOLDS, thresholds)), **rest}
            setting = {k: given[k] for k in TUNED}  # in TUNED's order, as written to rag.toml
            r_a, r_u = (sum(counts[k][v][i] for k, v in zip(THRESHOLDS, thresholds)) for i in (0, 1))
            n += 1
            fr = r_a / n_a if n_a else 0.0
            refused = r_u / n_u if n_u else 0.0
            met = fr <= max_false_refusal + 1e-12
            distance = sum(abs(setting[k] - current[k]) / span[k] for k in span) + (setting["entity_scope"]
                                                                                      != current["entity_scope"])
            key = (met, refused if met else -fr, refused, -distance)
            if best_key is None or key > best_key:
                best_key, best_setting = key, setting
    tuned = replace(cfg, **best_setting)
    learned = fit_learned(train, tuned, max_false_refusal) if learn else None
    fitted = learned_weights(learned["refusal_weights"]) if learned is not None else None
    rules_only = rates(*train, tuned)
    if learned is not None:
        with_learned = rates(*train, replace(tuned, **learned))
        fr = with_learned["false_refusal_rate"] or 0.0
        if fr <= max_false_refusal + 1e-12 and (with_learned["refusal_unanswerable"] or 0.0) > \
                (rules_only["refusal_unanswerable"] or 0.0):
            tuned = replace(tuned, **learned)
        else:
            learned = None
    best_setting = {**best_setting, **(learned or {"refusal_weights": [], "refusal_scope": original.refusal_scope})}
    current = {**current, "refusal_weights": list(original.refusal_weights), "refusal_scope": original.refusal_scope}
    by_a, by_u = judged_by(train[0]), judged_by(train[1])
    out = {"tuned_for": "refusal", "max_false_refusal": max_false_refusal, "target_met": bool(best_key[0]),
           "current": current, "best": best_setting, "n_settings": n, "grid": grid,
           "judged_by": {k: {"answerable": by_a[k], "unanswerable": by_u[k]} for k in THRESHOLDS},
           "learned": learned is not None, "learn": learn, "learned_weights": fitted,
           "train": {"current": rates(*train, original), "tuned": rates(*train, tuned)}, "test": None}
    if test is not None:
        out["test"] = {"current": rates(*test, original), "tuned": rates(*test, tuned)}
    return out
