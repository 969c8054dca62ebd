"""Dense retrieval: an HNSW graph (Malkov & Yashunin, 2018) built with hnswlib,
the default backend of `rag_cli.index.backends`.

Space is cosine: hnswlib returns the distance 1 - cos, which we turn back
into the cosine similarity. Parameters: M (graph degree), ef_construction
(build-time beam), ef (query-time beam; raised to at least k).

Labels: a fresh index gives chunk row i the label i. An updated index
(`rag update`) keeps the labels of unchanged chunks, marks those of removed
chunks deleted (`mark_deleted`) and gives new chunks new labels, so labels
and rows differ; `row_labels` ((n,) int64, row -> label) maps between them,
and search results are always rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag_cli.index.backends import Backend
from rag_cli.index.dense_common import EXACT_MAX_ROWS


@dataclass
class DenseIndex(Backend):
    """`index` (hnswlib.Index), `params` (space, dim, n live items, M,
    ef_construction, ef, max_elements, n_deleted, next_label), and
    `row_labels` ((n,) int64 label of each row; None = label i is row i)."""

    index: "object"
    params: dict
    row_labels: np.ndarray | None = None

    name = "hnswlib"
    label = "HNSW"
    structure = {"hnsw_m": "M", "hnsw_ef_construction": "ef_construction"}
    search_keys = {"hnsw_ef": "ef"}

    @classmethod
    def rebuild_reason(cls, params: dict, settings) -> str | None:
        return "the HNSW parameters M / ef_construction changed" if super().rebuild_reason(params, settings) else None

    @classmethod
    def build(cls, vectors: np.ndarray, settings, threads: int = 0, seed: int = 100) -> "DenseIndex":
        """Index `vectors` (n, d) float32 with [index] `settings` (hnsw_m, hnsw_ef_construction, hnsw_ef);
        label i is row i of `chunks.parquet`."""
        import hnswlib

        m, ef_construction, ef = settings.hnsw_m, settings.hnsw_ef_construction, settings.hnsw_ef
        n, d = vectors.shape
        index = hnswlib.Index(space="cosine", dim=d)
        index.init_index(max_elements=max(n, 1), M=m, ef_construction=ef_construction, random_seed=seed)
        if n:
            index.add_items(vectors, np.arange(n), num_threads=threads or -1)
        index.set_ef(ef)
        return cls(index, {"backend": cls.name, "space": "cosine", "dim": d, "n": n, "M": m,
                           "ef_construction": ef_construction, "ef": ef, "max_elements": max(n, 1), "n_deleted": 0,
                           "next_label": n})

    def update(self, row_labels: np.ndarray, deleted: list[int], add_vectors: np.ndarray, add_labels: np.ndarray,
               *, ef: int | None = None, threads: int = 0, vectors: np.ndarray | None = None,
               settings=None) -> None:
        """Change the graph in place: mark the labels `deleted` deleted, add
        `add_vectors` ((a, d) float32) under `add_labels` ((a,) int64),
        growing max_elements as needed; `row_labels` ((n,) int64) is the new
        row -> label map. `settings` (the [index] config) gives the new ef;
        `vectors` (every row's) are not needed: the graph keeps its own."""
        if settings is not None:
            ef = settings.hnsw_ef
        for label in deleted:
            self.index.mark_deleted(int(label))
        count = self.index.get_current_count()
        if count + len(add_labels) > self.index.get_max_elements():
            self.index.resize_index(max(count + len(add_labels), int(self.index.get_max_elements() * 1.25)))
        if len(add_labels):
            self.index.add_items(add_vectors, add_labels, num_threads=threads or -1)
        if ef is not None:
            self.params["ef"] = ef
        self.index.set_ef(self.params["ef"])
        self.row_labels = np.asarray(row_labels, dtype=np.int64)
        self.params.update(n=len(row_labels), max_elements=int(self.index.get_max_elements()),
                           n_deleted=self.params.get("n_deleted", 0) + len(deleted),
                           next_label=int(max(self.params.get("next_label", 0),
                                              int(add_labels.max()) + 1 if len(add_labels) else 0)))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.index.save_index(str(folder / "hnsw.bin"))
        (folder / "rag_dense.json").write_text(json.dumps(self.params), encoding="utf-8")

    @classmethod
    def open(cls, folder: Path, params: dict, row_labels: np.ndarray | None = None) -> "DenseIndex":
        """Load `folder` (hnsw.bin; `params` its rag_dense.json); `row_labels` as in the class doc.
        ValueError, KeyError: no dim/n."""
        import hnswlib

        index = hnswlib.Index(space="cosine", dim=params["dim"])
        index.load_index(str(folder / "hnsw.bin"), max_elements=max(params.get("max_elements", params["n"]), 1))
        index.set_ef(params["ef"])
        labels = None
        if row_labels is not None and not np.array_equal(row_labels, np.arange(len(row_labels))):
            labels = np.asarray(row_labels, dtype=np.int64)
        return cls(index, params, labels)

    def _label_rows(self) -> np.ndarray:
        """(max label + 1,) int64: the row of each label, -1 for deleted ones."""
        if not hasattr(self, "_rows"):
            rows = np.full(int(self.row_labels.max()) + 1 if len(self.row_labels) else 0, -1, dtype=np.int64)
            rows[self.row_labels] = np.arange(len(self.row_labels))
            self._rows = rows
        return self._rows

    def vectors(self, rows) -> np.ndarray:
        """(len(rows), d) float32: the stored vectors of `rows`."""
        labels = list(rows) if self.row_labels is None else [int(self.row_labels[r]) for r in rows]
        return np.asarray(self.index.get_items(labels), dtype=np.float32).reshape(len(labels), self.params["dim"])

    def _exact(self, query_vectors: np.ndarray, k: int, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Exact top-`k` by cosine over the stored vectors of `rows` ((m,) int64), as `search` returns."""
        vecs = self.vectors(rows)
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        q = query_vectors / np.maximum(np.linalg.norm(query_vectors, axis=1, keepdims=True), 1e-12)
        sims = (q @ vecs.T).astype(np.float32)
        out = []
        for row in sims:
            order = np.lexsort((rows, -row))[:k]
            out.append((rows[order].astype(np.int64), row[order]))
        return out

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None,
               ef: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-`k` neighbours of each query (q, d) float32.

        Returns per query (rows (m,) int64, cosines (m,) float32), best first,
        m = min(k, number of allowed rows). `mask` (n,) bool restricts the
        rows inside the graph search (hnswlib's filter function); when it
        allows at most EXACT_MAX_ROWS rows, or hnswlib finds fewer than k, the
        allowed rows are ranked exactly instead, so m is always
        min(k, allowed). Exact ties are ordered by lower row; which rows of
        a tie at the k-th place are found is the approximate graph search's
        choice (the exact searches keep the lowest rows).

        Raises:
            ValueError: the vectors are not (q, d) with the index's d (hnswlib
                would read past them).
        """
        if query_vectors.ndim != 2 or query_vectors.shape[1] != self.params["dim"]:
            raise ValueError(f"query vectors of shape {query_vectors.shape}; the index holds "
                             f"{self.params['dim']}-dimension vectors")
        n = self.params["n"]
        if n == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(query_vectors))]
        allowed = n if mask is None else int(mask.sum())
        k = min(k, allowed)
        if k == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(query_vectors))]
        if mask is not None and allowed <= EXACT_MAX_ROWS:
            return self._exact(query_vectors, k, np.flatnonzero(mask))
        self.index.set_ef(max(ef or self.params["ef"], k))
        label_rows = None if self.row_labels is None else self._label_rows()
        if mask is None:
            flt = None
        elif label_rows is None:
            flt = lambda label: bool(mask[label])  # noqa: E731
        else:
            flt = lambda label: bool(mask[label_rows[label]])  # noqa: E731
        try:
            labels, dist = self.index.knn_query(query_vectors, k=k, filter=flt, num_threads=1 if flt else -1)
        except RuntimeError:  # hnswlib found fewer than k allowed items (a selective filter)
            if mask is None:
                raise
            return self._exact(query_vectors, k, np.flatnonzero(mask))
        labels = labels.astype(np.int64)
        if label_rows is not None:
            labels = label_rows[labels]
        out = []
        for rows, cosines in zip(labels, (1.0 - dist).astype(np.float32)):
            order = np.lexsort((rows, -cosines))  # exact ties by lower row (hnswlib's order among them is its own)
            out.append((rows[order], cosines[order]))
        return out
