"""Dense retrieval: an HNSW graph (Malkov & Yashunin, 2018) built with hnswlib.

Space is cosine: hnswlib returns the distance 1 - cos, which we turn back
into the cosine similarity. Parameters: M (graph degree), ef_construction
(build-time beam), ef (query-time beam; raised to at least k).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class DenseIndex:
    index: "object"
    params: dict

    @classmethod
    def build(cls, vectors: np.ndarray, *, m: int = 32, ef_construction: int = 200, ef: int = 128,
              threads: int = 0, seed: int = 100) -> "DenseIndex":
        """Index `vectors` (n, d) float32; label i is row i of `chunks.parquet`."""
        import hnswlib

        n, d = vectors.shape
        index = hnswlib.Index(space="cosine", dim=d)
        index.init_index(max_elements=max(n, 1), M=m, ef_construction=ef_construction, random_seed=seed)
        if n:
            index.add_items(vectors, np.arange(n), num_threads=threads or -1)
        index.set_ef(ef)
        return cls(index, {"space": "cosine", "dim": d, "n": n, "M": m, "ef_construction": ef_construction, "ef": ef})

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.index.save_index(str(folder / "hnsw.bin"))
        (folder / "rag_dense.json").write_text(json.dumps(self.params), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> "DenseIndex":
        """Load `folder` (hnsw.bin + rag_dense.json).

        Raises:
            ValueError: rag_dense.json records a space other than cosine (the
                scores would not be cosines), or no dim/n.
        """
        import hnswlib

        params = json.loads((folder / "rag_dense.json").read_text(encoding="utf-8"))
        if params.get("space") != "cosine":
            raise ValueError(f"{folder / 'rag_dense.json'} records space {params.get('space')!r}; "
                             "rag-cli searches by cosine and needs space 'cosine'")
        index = hnswlib.Index(space="cosine", dim=params["dim"])
        index.load_index(str(folder / "hnsw.bin"), max_elements=max(params["n"], 1))
        index.set_ef(params["ef"])
        return cls(index, params)

    def vectors(self, rows) -> np.ndarray:
        """(len(rows), d) float32: the stored vectors of `rows` (labels)."""
        return np.asarray(self.index.get_items(list(rows)), dtype=np.float32).reshape(len(rows), self.params["dim"])

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None,
               ef: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-`k` neighbours of each query (q, d) float32.

        Returns per query (rows (m,) int64, cosines (m,) float32), best first,
        m = min(k, number of allowed rows). `mask` (n,) bool restricts the rows.

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
        self.index.set_ef(max(ef or self.params["ef"], k))
        flt = None if mask is None else (lambda label: bool(mask[label]))
        labels, dist = self.index.knn_query(query_vectors, k=k, filter=flt, num_threads=1 if flt else -1)
        return [(labels[i].astype(np.int64), (1.0 - dist[i]).astype(np.float32)) for i in range(len(query_vectors))]
