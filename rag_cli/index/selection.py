"""Top-k selection with deterministic ties, shared by BM25 (`sparse.top_k`) and the exact dense search
(`dense_common.top_k_blocks`)."""

from __future__ import annotations

import numpy as np


def best_k(values: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Positions of the `k` largest `values` ((n,) float), in no particular order; among equal values the
    lower `ids` ((n,) int) win, also when the tie straddles the k-th place (`np.argpartition` alone keeps an
    arbitrary subset of such a tie). All positions when n <= k."""
    if len(values) <= k:
        return np.arange(len(values))
    if k <= 0:
        return np.zeros(0, np.int64)
    kth = values[np.argpartition(-values, k - 1)[k - 1]]  # the k-th largest value
    above = np.flatnonzero(values > kth)
    tied = np.flatnonzero(values == kth)
    tied = tied[np.argsort(ids[tied], kind="stable")][: k - len(above)]
    return np.concatenate([above, tied])
