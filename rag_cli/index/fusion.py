"""Reciprocal rank fusion.

RRF (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms
Condorcet and individual Rank Learning Methods", SIGIR 2009):
``score(d) = sum over runs r of 1 / (k + rank_r(d))`` with 1-based ranks and
k = 60.
"""

from __future__ import annotations

from collections.abc import Sequence


def rrf(rankings: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Fuse ranked lists of ids (best first) into [(id, rrf_score)], best first.

    An id that occurs more than once in one list counts once there, at its
    first (best) rank; the ranks of the items after it are their positions
    in the list as given. Ties are broken by the best rank the id had in any
    list, then by id. The inputs are not modified.
    """
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking in rankings:
        seen: set[int] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
