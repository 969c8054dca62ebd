"""Hybrid fusion of a dense and a sparse ranking: one function per method.

* `rrf` — reciprocal rank fusion (Cormack, Clarke & Büttcher, "Reciprocal
  Rank Fusion outperforms Condorcet and individual Rank Learning Methods",
  SIGIR 2009): ``score(d) = sum over runs r of 1 / (k + rank_r(d))`` with
  1-based ranks and k = 60.
* `minmax` — a weighted sum (convex combination) of min-max normalised
  scores, ``score(d) = sum_r w_r * (s_r(d) - min_r) / (max_r - min_r)``
  (Lee, "Analyses of multiple evidence combination", SIGIR 1997; CombSUM of
  Fox & Shaw, TREC-2 1994, with weights; the convex combination that Bruch,
  Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM
  TOIS 2023, find beats RRF once its weight is tuned).
* `zscore` — the same weighted sum of z-score normalised scores,
  ``(s_r(d) - mean_r) / sd_r`` (Montague & Aslam, "Relevance Score
  Normalization for Metasearch", CIKM 2001), mean and population sd over
  the run's retrieved list.

In the weighted sums a document missing from one run's list gets that run's
lowest normalised score (0 for min-max); a run whose scores are all equal
normalises to 1 (min-max) or 0 (z-score). The weights are ``dense_weight``
and ``1 - dense_weight`` for the (dense, sparse) pair `fuse` is given.

Every function returns [(id, fused score)], best first, ties broken by the
best rank the id had in any list, then by id; the inputs are not modified.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: Fusion methods, as `search.fusion` names them.
FUSIONS = ("rrf", "minmax", "zscore")


def _first_ranks(ranking: Sequence[int]) -> dict[int, int]:
    """{id: 1-based position of its first occurrence}; later repeats are ignored."""
    out: dict[int, int] = {}
    for rank, item in enumerate(ranking, start=1):
        out.setdefault(item, rank)
    return out


def _ordered(scores: dict[int, float], best: dict[int, int]) -> list[tuple[int, float]]:
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))


def rrf(rankings: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Fuse ranked lists of ids (best first) into [(id, rrf_score)], best first.

    An id that occurs more than once in one list counts once there, at its
    first (best) rank; the ranks of the items after it are their positions
    in the list as given. Ties are broken by the best rank the id had in any
    list, then by id. The inputs are not modified.

    The reciprocal ranks are summed with `math.fsum` (correctly rounded, so
    independent of the order of the lists): two ids with the same ranks in
    any order get the same float, an exact tie, not one that differs in the
    last bit.
    """
    terms: dict[int, list[float]] = {}
    best: dict[int, int] = {}
    for ranking in rankings:
        for item, rank in _first_ranks(ranking).items():
            terms.setdefault(item, []).append(1.0 / (k + rank))
            best[item] = min(best.get(item, rank), rank)
    return _ordered({item: math.fsum(t) for item, t in terms.items()}, best)


def _minmax_norm(scores: np.ndarray) -> np.ndarray:
    low, high = float(scores.min()), float(scores.max())
    return np.ones_like(scores) if high == low else (scores - low) / (high - low)


def _zscore_norm(scores: np.ndarray) -> np.ndarray:
    sd = float(scores.std())
    return np.zeros_like(scores) if sd == 0 else (scores - float(scores.mean())) / sd


def _weighted_sum(runs: Sequence[tuple[Sequence[int], Sequence[float]]], weights: Sequence[float],
                  normalise: Callable[[np.ndarray], np.ndarray]) -> list[tuple[int, float]]:
    if len(runs) != len(weights):
        raise ValueError(f"{len(runs)} runs but {len(weights)} weights")
    normed: list[tuple[dict[int, float], float]] = []
    best: dict[int, int] = {}
    for ids, scores in runs:
        firsts: dict[int, int] = {}
        kept: list[float] = []
        for pos, item in enumerate(ids):
            if item not in firsts:
                firsts[item] = pos + 1
                kept.append(float(scores[pos]))
        if not firsts:
            normed.append(({}, 0.0))
            continue
        values = normalise(np.asarray(kept, dtype=np.float64))
        normed.append((dict(zip(firsts, values.tolist())), float(values.min())))
        for item, rank in firsts.items():
            best[item] = min(best.get(item, rank), rank)
    fused = {item: sum(w * run.get(item, floor) for (run, floor), w in zip(normed, weights)) for item in best}
    return _ordered(fused, best)


def minmax(runs: Sequence[tuple[Sequence[int], Sequence[float]]], weights: Sequence[float]) -> list[tuple[int, float]]:
    """Weighted sum of min-max normalised scores. `runs`: per run (ids best
    first, their scores), as parallel sequences; `weights`: one per run."""
    return _weighted_sum(runs, weights, _minmax_norm)


def zscore(runs: Sequence[tuple[Sequence[int], Sequence[float]]], weights: Sequence[float]) -> list[tuple[int, float]]:
    """Weighted sum of z-score normalised scores; arguments as `minmax`."""
    return _weighted_sum(runs, weights, _zscore_norm)


def fuse(dense: tuple[Sequence[int], Sequence[float]], sparse: tuple[Sequence[int], Sequence[float]], *,
         fusion: str = "rrf", dense_weight: float = 0.5, rrf_k: int = 60) -> list[tuple[int, float]]:
    """Fuse a dense and a sparse run ((ids best first, scores) each) with
    the method named `fusion` (see FUSIONS); `dense_weight` is the weight of
    the dense run in the weighted sums (the sparse run gets the rest),
    `rrf_k` the RRF constant. Raises ValueError for an unknown method."""
    if fusion == "rrf":
        return rrf([list(dense[0]), list(sparse[0])], k=rrf_k)
    if fusion == "minmax":
        return minmax([dense, sparse], [dense_weight, 1.0 - dense_weight])
    if fusion == "zscore":
        return zscore([dense, sparse], [dense_weight, 1.0 - dense_weight])
    raise ValueError(f"unknown fusion {fusion!r}; known: {', '.join(FUSIONS)}")
