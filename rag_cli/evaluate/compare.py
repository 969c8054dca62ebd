"""Comparing runs query by query: mean difference, a paired randomisation
test, a paired t-test, Holm's correction across metrics, and win/tie/loss.

Inputs are evaluation reports of `rag_cli.evaluate.report.evaluate_rows` on
the **same qrels** (so the same queries, every one scored; a query missing
from a run scores 0 there). Each run after the first is compared with the
first (the baseline); a difference is `run - baseline`.

* Paired randomisation (permutation) test: under the null hypothesis the two
  systems are exchangeable on each query, so each per-query difference keeps
  or flips its sign with probability 1/2; the two-sided p-value is the share
  of `permutations` random sign assignments whose mean difference is at least
  as far from 0 as the observed one, counting the observed assignment
  ((hits + 1) / (permutations + 1), so p > 0). Smucker, Allan & Carterette, "A
  comparison of statistical significance tests for information retrieval
  evaluation", CIKM 2007.
* Paired t-test: `scipy.stats.ttest_1samp` on the differences (the same
  test as `ttest_rel` on the two columns; two-sided); p = 1 when every
  difference is 0 (no variance, nothing to test).
* Holm's step-down correction across the metrics of one comparison (Holm, "A
  simple sequentially rejective multiple test procedure", Scand. J. Statist.
  6(2), 1979): the i-th smallest of m p-values becomes
  max over j <= i of min(1, (m - j + 1) * p_(j)).
* Win / tie / loss: queries where the run scores above / equal to / below the
  baseline (equal within 1e-12).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

TIE_TOLERANCE = 1e-12


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given (see the module docstring)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted


def randomisation_p(diffs: np.ndarray, permutations: int = 10000, seed: int = 0) -> float:
    """Two-sided p-value of the paired randomisation (sign-flip) test on the
    per-query differences `diffs` ((n,) float64); see the module docstring."""
    diffs = np.asarray(diffs, dtype=np.float64)
    n = len(diffs)
    if n == 0 or not np.any(np.abs(diffs) > TIE_TOLERANCE):
        return 1.0
    observed = abs(diffs.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    batch = max(1, min(permutations, 2_000_000 // n))
    done = 0
    while done < permutations:
        size = min(batch, permutations - done)
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1
        means = np.abs(signs @ diffs) / n
        hits += int(np.count_nonzero(means >= observed - 1e-15))
        done += size
    return (hits + 1) / (permutations + 1)


def t_test_p(diffs: np.ndarray) -> float:
    """Two-sided p-value of the paired t-test on the differences (scipy
    `ttest_rel` of run vs baseline is the one-sample test of the differences)."""
    from scipy import stats

    diffs = np.asarray(diffs, dtype=np.float64)
    if len(diffs) < 2 or not np.any(np.abs(diffs - diffs.mean()) > TIE_TOLERANCE):
        return 1.0 if not np.any(np.abs(diffs) > TIE_TOLERANCE) else 0.0
    return float(stats.ttest_1samp(diffs, 0.0).pvalue)


def compare_reports(reports: Sequence[dict], names: Sequence[str], *, permutations: int = 10000,
                    seed: int = 0, metrics: Sequence[str] | None = None) -> dict:
    """Compare every report after the first with the first; a JSON-ready dict::

        {
          "baseline": NAME, "runs": [NAME, ...], "n_queries": n,
          "permutations": ..., "seed": ...,
          "metrics": {NAME: {metric: mean}},
          "comparisons": [{
              "run": NAME, "baseline": NAME,
              "metrics": {metric: {"baseline": mean, "run": mean, "mean_diff": ...,
                                   "p_randomisation": ..., "p_t_test": ...,
                                   "p_randomisation_holm": ..., "p_t_test_holm": ...,
                                   "wins": w, "ties": t, "losses": l}},
              "per_query": {qid: {metric: run - baseline}},
          }, ...],
          "definitions": "...",
        }

    `metrics` (names such as "ndcg@10"; None: every metric of the reports)
    are the ones compared, and Holm's correction runs across those only.

    Raises ValueError when fewer than two reports are given, when they
    were not made on the same queries and metrics, or for a metric the
    reports do not hold.
    """
    if len(reports) < 2:
        raise ValueError("compare needs at least two runs")
    base = reports[0]
    qids = list(base["per_query"])
    metric_names = list(base["metric_names"])
    for name, rep in zip(names[1:], reports[1:]):
        if set(rep["per_query"]) != set(qids):
            raise ValueError(f"{name} was scored on other queries than {names[0]}; compare runs on the same qrels")
        if list(rep["metric_names"]) != metric_names:
            raise ValueError(f"{name} was scored on other metrics than {names[0]}")
    if metrics is not None:
        unknown = [m for m in metrics if m not in metric_names]
        if unknown or not metrics:
            raise ValueError(f"no metric {', '.join(unknown) or '(none given)'}; the reports hold "
                             f"{', '.join(metric_names)}")
        metric_names = list(dict.fromkeys(metrics))
    comparisons = []
    for i, (name, rep) in enumerate(zip(names[1:], reports[1:]), 1):
        rows = {}
        per_query = {q: {} for q in qids}
        for m in metric_names:
            a = np.array([base["per_query"][q][m] for q in qids], dtype=np.float64)
            b = np.array([rep["per_query"][q][m] for q in qids], dtype=np.float64)
            d = b - a
            for q, v in zip(qids, d):
                per_query[q][m] = float(v)
            rows[m] = {
                "baseline": float(a.mean()) if len(a) else 0.0,
                "run": float(b.mean()) if len(b) else 0.0,
                "mean_diff": float(d.mean()) if len(d) else 0.0,
                "p_randomisation": randomisation_p(d, permutations, seed + i),
                "p_t_test": t_test_p(d),
                "wins": int(np.count_nonzero(d > TIE_TOLERANCE)),
                "ties": int(np.count_nonzero(np.abs(d) <= TIE_TOLERANCE)),
                "losses": int(np.count_nonzero(d < -TIE_TOLERANCE)),
            }
        for key in ("p_randomisation", "p_t_test"):
            for m, adj in zip(metric_names, holm([rows[m][key] for m in metric_names])):
                rows[m][f"{key}_holm"] = adj
        comparisons.append({"run": name, "baseline": names[0], "metrics": rows, "per_query": per_query})
    return {
        "baseline": names[0],
        "runs": list(names),
        "n_queries": len(qids),
        "permutations": permutations,
        "seed": seed,
        "metrics": {name: {m: rep["metrics"][m] for m in metric_names} for name, rep in zip(names, reports)},
        "comparisons": comparisons,
        "definitions": (
            "difference = run - baseline per query (every qrels query; 0 where a run lacks it); "
            "paired randomisation test: two-sided, random sign flips, p = (hits + 1) / (permutations + 1) "
            "(Smucker et al., CIKM 2007); paired t-test: scipy ttest_1samp on the differences; "
            "Holm's step-down correction across the metrics of each comparison; "
            f"win/tie/loss: difference > / within / < {TIE_TOLERANCE}"
        ),
    }
