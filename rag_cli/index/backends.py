"""The dense index behind one interface, with three backends.

`index.backend` (rag.toml, `rag index --backend`) chooses:

* `hnswlib` (the default): an HNSW graph over the float32 vectors
  (`rag_cli.index.dense.DenseIndex`), all in RAM.
* `faiss` (the optional `faiss` extra, `pip install 'rag-cli[faiss]'`),
  `index.index_type`:
  - `hnsw-sq8`: an HNSW graph over 8-bit scalar-quantised codes (a quarter
    of float32's memory);
  - `sq8`: the same codes scanned flat (no graph);
  - `ivf-pq`: inverted lists (`nlist` k-means cells, `nprobe` searched) of
    product-quantised codes (`pq_m` bytes per vector).
  Candidates are re-scored with the exact vectors (`index.rerank` of them)
  from `dense/vectors.npy`, memory-mapped, so only the candidates' rows
  are read (`rag_cli.index.faiss_index.FaissIndex`).
* `exact`: brute force over the float32 vectors, memory-mapped from
  `dense/vectors.npy` (`rag_cli.index.exact.ExactIndex`): exact results,
  for small corpora and as the ground truth of recall (`rag eval --funnel`).

Every backend is a `VectorIndex`: `build(vectors, settings)`, `search`
(cosines, best first, a `mask` applied inside the search: hnswlib's filter
function, faiss's `IDSelectorBitmap`, a row subset for exact), `update`
(labels marked deleted and vectors added, or for `exact` the vector file
rewritten), `save` / `load` (a folder, `dense/` of a generation) and
`vectors(rows)` (the stored vectors: re-ranking, evidence cosines, ANN
recall). The backend and its parameters are written to
`dense/rag_dense.json` and meta.json's `dense`; a generation written before
backends existed is hnswlib.

Labels: row i of a freshly built index has label i; `rag update` keeps the
labels of unchanged chunks, so rows and labels differ after an update
(`row_labels`, the `label` column of the generation's chunks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import numpy as np

from rag_cli.errors import BadInput

BACKENDS = ("hnswlib", "faiss", "exact")
FAISS_TYPES = ("hnsw-sq8", "sq8", "ivf-pq")

#: A filter that allows at most this many rows is searched exactly (brute force over their vectors).
EXACT_MAX_ROWS = 2048

#: What a missing faiss says (exit 2).
FAISS_MISSING = ("index.backend 'faiss' needs the faiss extra: pip install 'rag-cli[faiss]' (the faiss-cpu "
                 "package); or choose --backend hnswlib or exact")

Result = list[tuple[np.ndarray, np.ndarray]]


class VectorIndex(Protocol):
    """What every dense backend offers (see the module doc)."""

    params: dict  # rag_dense.json: backend, space, dim, n, next_label, n_deleted and the backend's own
    row_labels: np.ndarray | None  # (n,) int64 label of each row; None = label i is row i

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None) -> Result:
        """Top-`k` rows per query ((q, d) float32): [(rows (m,) int64, cosines (m,) float32)], best first,
        m = min(k, rows allowed by `mask`)."""

    def update(self, row_labels: np.ndarray, deleted: list[int], add_vectors: np.ndarray, add_labels: np.ndarray,
               *, vectors: np.ndarray, settings, threads: int = 0) -> None:
        """Delete the labels `deleted`, add `add_vectors` under `add_labels`; `row_labels` is the new row ->
        label map and `vectors` ((n, d) float32) every row's vector in the new row order."""

    def save(self, folder: Path) -> None: ...

    def vectors(self, rows) -> np.ndarray:
        """(len(rows), d) float32: the stored vectors of `rows` (unit length)."""


def backend_of(params: dict) -> str:
    """The backend recorded in rag_dense.json / meta.json's `dense` (hnswlib when absent: older generations)."""
    return params.get("backend", "hnswlib")


def describe(params: dict) -> str:
    """`hnswlib`, `exact` or `faiss ivf-pq`: the backend (and faiss index type) of a generation."""
    b = backend_of(params)
    return f"faiss {params.get('index_type')}" if b == "faiss" else b


def check_backend(settings) -> None:
    """BadInput unless `settings.backend` can be used here: faiss must import."""
    if settings.backend == "faiss":
        import_faiss()


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


def build_dense(vectors: np.ndarray, settings, threads: int = 0) -> VectorIndex:
    """A fresh dense index of `settings.backend` over `vectors` ((n, d) float32; label i = row i).
    `settings` is the [index] config (`IndexConfig`). Raises BadInput for settings the data cannot
    take (e.g. a `pq_m` that does not divide the dimension) or a missing faiss."""
    import time

    t0 = time.perf_counter()
    backend = getattr(settings, "backend", "hnswlib")
    if backend == "exact":
        from rag_cli.index.exact import ExactIndex

        dense = ExactIndex.build(vectors)
    elif backend == "faiss":
        import_faiss()
        from rag_cli.index.faiss_index import FaissIndex

        dense = FaissIndex.build(vectors, settings, threads=threads)
    else:
        from rag_cli.index.dense import DenseIndex

        dense = DenseIndex.build(vectors, m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction,
                                 ef=settings.hnsw_ef, threads=threads)
    dense.params["build_seconds"] = round(time.perf_counter() - t0, 3)  # of the last full build
    return dense


def load_dense(folder: Path, row_labels: np.ndarray | None = None) -> VectorIndex:
    """The dense index saved in `folder` (`dense/` of a generation), of the backend its rag_dense.json
    names; vectors and codes are memory-mapped where the backend allows. Raises BadInput for a faiss
    index without faiss installed, ValueError for an unreadable one."""
    params = json.loads((folder / "rag_dense.json").read_text(encoding="utf-8"))
    if params.get("space", "cosine") != "cosine":
        raise ValueError(f"{folder / 'rag_dense.json'} records space {params.get('space')!r}; "
                         "rag-cli searches by cosine and needs space 'cosine'")
    backend = backend_of(params)
    if backend == "exact":
        from rag_cli.index.exact import ExactIndex

        return ExactIndex.load(folder, params)
    if backend == "faiss":
        import_faiss(f"{folder} is a faiss index ({params.get('index_type')}); {FAISS_MISSING}")
        from rag_cli.index.faiss_index import FaissIndex

        return FaissIndex.load(folder, params, row_labels)
    if backend != "hnswlib":
        raise ValueError(f"{folder / 'rag_dense.json'} names the backend {backend!r}; known: {', '.join(BACKENDS)}")
    from rag_cli.index.dense import DenseIndex

    return DenseIndex.load(folder, row_labels)


#: [index] keys whose change needs a new index structure, per backend (the rest are read at search time).
_STRUCTURE = {"hnswlib": ("hnsw_m", "hnsw_ef_construction"), "exact": (),
              "faiss": ("index_type", "hnsw_m", "hnsw_ef_construction", "nlist", "pq_m")}
#: [index] key -> the rag_dense.json key that records it.
_RECORDED = {"hnsw_m": "M", "hnsw_ef_construction": "ef_construction", "hnsw_ef": "ef", "index_type": "index_type",
             "nlist": "nlist_setting", "pq_m": "pq_m_setting", "nprobe": "nprobe", "rerank": "rerank"}
#: [index] keys read at search time, per backend.
_SEARCH = {"hnswlib": ("hnsw_ef",), "exact": (),
           "faiss": ("hnsw_ef", "nprobe", "rerank")}


def rebuild_reason(params: dict, settings) -> str | None:
    """Why `rag update` must build the dense index afresh rather than change it (`params`: the current
    generation's rag_dense.json / meta `dense`; `settings`: the [index] config), or None."""
    backend = backend_of(params)
    want = getattr(settings, "backend", "hnswlib")
    if backend != want:
        return f"the dense backend changed ({describe(params)} -> {want})"
    changed = [k for k in _STRUCTURE[backend]
               if params.get(_RECORDED[k]) != getattr(settings, k)]
    if changed:
        return (f"the {describe(params)} parameters {' / '.join(changed)} changed"
                if backend != "hnswlib" else "the HNSW parameters M / ef_construction changed")
    return None


def same_search_params(params: dict, settings) -> bool:
    """Whether the dense index's search-time parameters (ef; faiss nprobe, rerank) equal `settings`'."""
    return all(params.get(_RECORDED[k]) == getattr(settings, k) for k in _SEARCH[backend_of(params)])


# --------------------------------------------------------------------------- shared by the backends
def unit(vectors: np.ndarray) -> np.ndarray:
    """`vectors` ((n, d)) as float32 rows of unit length (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


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
        if sims.shape[1] > k:
            keep = np.argpartition(-sims, k - 1, axis=1)[:, :k]
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
