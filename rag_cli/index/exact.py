"""The `exact` dense backend: brute-force cosine over the stored vectors.

`dense/vectors.npy` holds every chunk's vector (unit length, float32, row i =
row i of the generation's chunks) and is memory-mapped on load, so opening
costs nothing and a search streams the file in blocks of 65,536 rows. Its
results are exact (ties by lower row), which makes it the ground truth of
recall (`rag eval funnel`'s ANN recall, `bench/scale.py`); on a small corpus
it is also fast enough to be the index (a query costs n x d multiply-adds:
about 1 ms per 10,000 chunks of 384 dimensions on one core).

Update: there is no structure to change, so `rag update` writes the new
generation's vectors.npy from the new vectors in the new row order (the
labels kept by `rag update` are not used: rows are the vectors' order).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rag_cli.index.backends import Backend
from rag_cli.index.dense_common import (EXACT_MAX_ROWS, Result, check_queries, empty, exact_rows, load_vectors,
                                    save_vectors, top_k_blocks, unit)


class ExactIndex(Backend):
    """`vecs` ((n, d) float32 unit rows, in memory or memory-mapped) and `params` (rag_dense.json)."""

    name = "exact"
    row_labels = None  # rows are the vectors' order

    def __init__(self, vecs: np.ndarray, params: dict):
        self.vecs = vecs
        self.params = params

    @classmethod
    def build(cls, vectors: np.ndarray, settings=None, threads: int = 0) -> "ExactIndex":
        n, d = vectors.shape
        return cls(unit(vectors), {"backend": cls.name, "space": "cosine", "dim": int(d), "n": int(n),
                                   "n_deleted": 0, "next_label": int(n)})

    def update(self, row_labels: np.ndarray, deleted: list[int], add_vectors: np.ndarray, add_labels: np.ndarray,
               *, vectors: np.ndarray, settings=None, threads: int = 0) -> None:
        """The new vectors, whole (see the module doc); `n_deleted` stays 0 (nothing is left behind)."""
        self.vecs = unit(vectors)
        self.params.update(n=int(len(vectors)), n_deleted=0,
                           next_label=int(max(self.params.get("next_label", 0),
                                              int(add_labels.max()) + 1 if len(add_labels) else 0)))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save_vectors(folder / "vectors.npy", self.vecs)
        (folder / "rag_dense.json").write_text(json.dumps(self.params), encoding="utf-8")

    @classmethod
    def open(cls, folder: Path, params: dict, row_labels: np.ndarray | None = None) -> "ExactIndex":
        """`folder`'s vectors.npy, memory-mapped. ValueError when its shape is not rag_dense.json's."""
        vecs = load_vectors(folder / "vectors.npy")
        if vecs.shape != (params["n"], params["dim"]):
            raise ValueError(f"{folder / 'vectors.npy'} holds {vecs.shape} vectors where rag_dense.json says "
                             f"({params['n']}, {params['dim']})")
        return cls(vecs, params)

    def vectors(self, rows) -> np.ndarray:
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
        return np.asarray(self.vecs[rows], dtype=np.float32).reshape(len(rows), self.params["dim"])

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None, ef: int | None = None
               ) -> Result:
        """Exact top-`k` per query over all rows, or over the rows `mask` allows."""
        check_queries(query_vectors, self.params["dim"])
        if self.params["n"] == 0 or k < 1:
            return empty(len(query_vectors))
        if mask is None:
            return top_k_blocks(self.vecs, query_vectors, k)
        rows = np.flatnonzero(mask)
        if len(rows) <= EXACT_MAX_ROWS:
            return exact_rows(self.vectors, query_vectors, min(k, len(rows)), rows)
        return top_k_blocks(self.vecs, query_vectors, k, rows=rows)


def exact_of(dense) -> ExactIndex:
    """The exact backend over the vectors stored in `dense` (any backend; `dense` itself when it is
    exact), rows as in `dense`: the ground truth of its recall. A faiss index lends its memory-mapped
    vectors.npy; an hnswlib graph's vectors are copied out of it."""
    if type(dense) is ExactIndex:  # not a subclass: milvus searches its server
        return dense
    n, d = int(dense.params["n"]), int(dense.params["dim"])
    vecs = getattr(dense, "vecs", None)
    if vecs is None:
        vecs = unit(dense.vectors(range(n))) if n else np.zeros((0, d), np.float32)
    return ExactIndex(vecs, {"backend": "exact", "space": "cosine", "dim": d, "n": n, "n_deleted": 0,
                             "next_label": n})
