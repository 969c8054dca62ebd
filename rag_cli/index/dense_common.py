"""What the dense backends share (`rag_cli.index.backends` is the interface): unit vectors, exact
top-k over rows or blocks of a (memory-mapped) matrix, the label -> row map, .npy vector files, and
importing faiss (the optional extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.index.selection import best_k

#: A filter that allows at most this many rows is searched exactly (brute force over their vectors).
EXACT_MAX_ROWS = 2048

#: What a missing faiss says (exit 2).
FAISS_MISSING = ("index.backend 'faiss' needs the faiss extra: pip install 'rag-cli[faiss]' (the faiss-cpu "
                 "package); or choose --backend hnswlib or exact")

Result = list[tuple[np.ndarray, np.ndarray]]


def import_faiss(missing: str = FAISS_MISSING):
    """The faiss module, or BadInput (exit 2) with `missing` (naming the extra).

    OpenMP's threads are set to wait passively (`OMP_WAIT_POLICY=PASSIVE`,
    unless the environment says otherwise) before faiss loads libgomp: on a
    machine whose cores are shared, spinning threads made a 50,000-vector
    IVF-PQ training 5x slower on 2 threads (73 s against 14 s passive, and
    30 s on one thread) at a load average of 13."""
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import faiss
    except ImportError as exc:
        raise BadInput(f"{missing} ({exc})") from None
    return faiss


def unit(vectors: np.ndarray) -> np.ndarray:
    """`vectors` ((n, d)) as float32 rows of unit length (a zero row stays zero); `vectors` itself
    (no copy) when it is a float32 array whose rows have unit length already, as e5's have."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if vectors.ndim == 2 and np.all(np.abs(norms - 1) < 1e-5):
        return vectors
    return vectors / np.maximum(norms, 1e-12)


def check_queries(query_vectors: np.ndarray, dim: int) -> None:
    """ValueError unless `query_vectors` is (q, dim)."""
    if query_vectors.ndim != 2 or query_vectors.shape[1] != dim:
        raise ValueError(f"query vectors of shape {query_vectors.shape}; the index holds "
                         f"{dim}-dimension vectors")


def empty(q: int) -> Result:
    return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(q)]


def exact_rows(vectors_of, query_vectors: np.ndarray, k: int, rows: np.ndarray) -> Result:
    """Exact top-`k` by cosine among `rows` ((m,) int64, ascending), `vectors_of(rows)` giving their stored
    vectors; ties by lower row. The same result form as `VectorIndex.search`."""
    vecs = unit(vectors_of(rows))
    sims = (unit(query_vectors) @ vecs.T).astype(np.float32)
    out = []
    for row in sims:
        order = np.lexsort((rows, -row))[:k]
        out.append((rows[order].astype(np.int64), row[order]))
    return out


def top_k_blocks(vectors: np.ndarray, queries: np.ndarray, k: int, rows: np.ndarray | None = None,
                 block: int = 65536) -> Result:
    """Exact top-`k` cosines of each query over `vectors` ((n, d), unit rows; may be memory-mapped), or over
    only `rows` of it; brute force in blocks of rows, so memory stays bounded. Ties by lower row."""
    q = unit(queries)
    n = len(vectors) if rows is None else len(rows)
    k = min(k, n)
    if k == 0:
        return empty(len(q))
    best_rows = np.zeros((len(q), 0), np.int64)
    best_sims = np.zeros((len(q), 0), np.float32)
    for start in range(0, n, block):
        ids = np.arange(start, min(start + block, n)) if rows is None else rows[start:start + block]
        v = vectors[start:start + block] if rows is None else vectors[ids]
        sims = np.concatenate([best_sims, (q @ np.asarray(v, dtype=np.float32).T)], axis=1)
        cand = np.concatenate([best_rows, np.broadcast_to(ids, (len(q), len(ids)))], axis=1)
        if sims.shape[1] > k:  # ties by lower row, also across the k-th place
            keep = np.stack([best_k(s, c, k) for s, c in zip(sims, cand)])
            sims, cand = np.take_along_axis(sims, keep, axis=1), np.take_along_axis(cand, keep, axis=1)
        best_sims, best_rows = sims, cand
    out = []
    for r, s in zip(best_rows, best_sims):
        order = np.lexsort((r, -s))
        out.append((r[order].astype(np.int64), s[order].astype(np.float32)))
    return out


def label_rows(row_labels: np.ndarray | None, n_labels: int) -> np.ndarray | None:
    """(n_labels,) int64: the row of each label, -1 for a deleted one; None when labels are rows."""
    if row_labels is None:
        return None
    rows = np.full(max(n_labels, int(row_labels.max()) + 1 if len(row_labels) else 0), -1, dtype=np.int64)
    rows[row_labels] = np.arange(len(row_labels))
    return rows


def save_vectors(path: Path, vectors: np.ndarray) -> None:
    """Write (n, d) float32 unit vectors as a .npy file, in blocks (a memory-mapped source is never read whole)."""
    from numpy.lib.format import open_memmap

    n, d = vectors.shape
    out = open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for start in range(0, n, 65536):
        out[start:start + 65536] = unit(vectors[start:start + 65536])
    out.flush()
    del out


def load_vectors(path: Path) -> np.ndarray:
    """The (n, d) float32 vectors of a .npy file, memory-mapped (read only; pages are read as rows are used)."""
    return np.load(path, mmap_mode="r")
