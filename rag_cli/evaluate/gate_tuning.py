"""`rag eval --tune refusal`: the refusal gate's thresholds chosen on
recorded signals.

Input: two answers files recorded with the gate off (`rag ask --queries Q
--gate off`): one of answerable questions, one of made-unanswerable ones
(asked in a project built from `rag eval --make-unanswerable`'s corpus).
Each row holds the gate's signals (`rag_cli.store.answers`) and the
generator's own refusal. The decision for a setting is simulated with the
gate's own function: refused = `gate_reason(signals, setting) != ""` or the
generator refused (`simulate`).

Grid (`gate_grid`): min_score, min_coverage, min_entity_coverage and
strong_score, plus min_rerank_score when the rows have cross-encoder scores;
cosine thresholds from quantiles of the recorded best cosines (per model),
shares on fixed steps, each with its current value; and the entity rule's
scope (entity_scope "zh" or "all": the entity coverage is recorded for
every question). The chosen setting
refuses the most made-unanswerable questions with a false-refusal rate on
the answerable ones at most `max_false_refusal`; ties go to the setting
closest to the current one (sum over the thresholds of |value - current|
over the span of that threshold's grid, plus 1 for another entity_scope). When no setting meets the target,
the one with the fewest false refusals (then the most refusals) is chosen
and `target_met` is false.

The generator's refusal is taken as recorded. With the gate off the
generator read all the evidence; with the gate on it reads the evidence at
or above `min_score`, which always holds the best piece once the gate lets a
question through. The extractive generator refuses only when that evidence
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
from rag_cli.generate.gate import GateSignals, gate_reason
from rag_cli.loaders.normalize import has_cjk

SIGNAL_COLUMNS = ("question", "contexts", "best_score", "coverage", "entity_coverage", "rerank_score",
                  "generator_refused")
TUNED = ("min_score", "min_coverage", "min_entity_coverage", "strong_score", "min_rerank_score", "entity_scope")


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


def gate_grid(answerable: Sequence[Mapping], unanswerable: Sequence[Mapping], cfg) -> dict[str, list[float]]:
    """{threshold: candidate values} (see the module docstring)."""
    best = np.array([r["best_score"] for r in list(answerable) + list(unanswerable) if r["contexts"]], dtype=float)
    best_a = np.array([r["best_score"] for r in answerable if r["contexts"]], dtype=float)
    grid = {
        "min_score": _values(cfg.min_score, [-1.0, *np.quantile(best_a, [0.0, 0.02, 0.05, 0.1, 0.2])]
                             if best_a.size else [-1.0]),
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


def tune_refusal(train: tuple[Sequence[Mapping], Sequence[Mapping]],
                 test: tuple[Sequence[Mapping], Sequence[Mapping]] | None, cfg, *,
                 max_false_refusal: float = 0.05) -> dict:
    """Choose the gate's thresholds on `train` (answerable rows,
    made-unanswerable rows), starting from the `AskConfig` `cfg`, and score
    the current and the chosen setting on train and on `test` (same shape,
    or None). Returns {"tuned_for": "refusal", "max_false_refusal", "target_met",
    "current": {threshold: value}, "best": {threshold: value}, "n_settings",
    "grid": {threshold: [values]}, "train": {"current": rates, "tuned": rates},
    "test": {...} or None}."""
    cfg = replace(cfg, gate="on")
    grid = gate_grid(*train, cfg)
    current = {k: getattr(cfg, k) for k in TUNED}
    span = {k: (max(v) - min(v)) or 1.0 for k, v in grid.items() if k != "entity_scope"}
    best_key, best_setting = None, None
    n = 0
    prepared = [_prepared(rows) for rows in train]
    for values in itertools.product(*(grid[k] for k in TUNED)):
        setting = dict(zip(TUNED, values))
        trial = replace(cfg, **setting)
        r = refusal_rates(_decide(prepared[0], trial), _decide(prepared[1], trial))
        n += 1
        fr = r["false_refusal_rate"] or 0.0
        refused = r["refusal_unanswerable"] or 0.0
        met = fr <= max_false_refusal + 1e-12
        distance = sum(abs(setting[k] - current[k]) / span[k] for k in span) + (setting["entity_scope"]
                                                                                  != current["entity_scope"])
        key = (met, refused if met else -fr, refused, -distance)
        if best_key is None or key > best_key:
            best_key, best_setting = key, setting
    tuned = replace(cfg, **best_setting)
    out = {"tuned_for": "refusal", "max_false_refusal": max_false_refusal, "target_met": bool(best_key[0]),
           "current": current, "best": best_setting, "n_settings": n, "grid": grid,
           "train": {"current": rates(*train, cfg), "tuned": rates(*train, tuned)}, "test": None}
    if test is not None:
        out["test"] = {"current": rates(*test, cfg), "tuned": rates(*test, tuned)}
    return out
