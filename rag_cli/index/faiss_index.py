"""The `faiss` dense backend (the optional `faiss` extra: faiss-cpu).

Index types (`index.index_type`), all by inner product over unit vectors,
i.e. cosine:

* `hnsw-sq8`: `IndexHNSWSQ`, an HNSW graph (M = `index.hnsw_m`,
  efConstruction, efSearch = `index.hnsw_ef`) over 8-bit scalar-quantised
  codes (one byte per dimension, each dimension's range learnt from the
  data): 384 bytes per 384-dimension vector instead of 1,536.
* `sq8`: `IndexScalarQuantizer`, the same codes scanned flat.
* `ivf-pq`: `IndexIVFPQ`, `nlist` k-means cells (0: a power of two near
  4·√n) of which `nprobe` are searched, each vector's residual coded in
  `pq_m` bytes (0: about dim / 6, 64 for 384 dimensions) of 8 bits (fewer
  on a corpus too small to train 256 centroids per sub-quantizer).

Re-scoring: the best `max(k, rescore)` candidates of the codes ([index.faiss]) are
re-scored with the exact vectors, read from `dense/vectors.npy`
(memory-mapped: only the candidates' rows are read), and the best k kept,
so the scores are exact cosines; `rescore` 0 keeps the codes' approximate
scores. A filter (`mask`) becomes an `IDSelectorBitmap` over the labels,
applied inside the search; a filter that allows at most EXACT_MAX_ROWS rows,
or a search that finds fewer than k allowed rows, is answered exactly from
the vectors.

Files (`dense/`): `faiss.index` (`faiss.write_index`; read back with
`IO_FLAG_MMAP_IFC`, so codes and inverted lists are memory-mapped rather
than read), `vectors.npy`, `deleted.npy` (bool per label, when labels are
deleted) and `rag_dense.json`.

Update: `ivf-pq` removes the deleted labels (`remove_ids`) and adds the new
vectors under their labels (`add_with_ids`), with the cells and codebooks
trained at the last full build; `hnsw-sq8` and `sq8` cannot remove a vector,
so a deleted label is marked in `deleted.npy` and left out of every search
by the selector (as hnswlib's `mark_deleted`), and new vectors are appended
(their labels are the next ones); `rag update` rebuilds the index once
deleted labels exceed a fifth of it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.index.backends import Backend
from rag_cli.index.dense_common import (EXACT_MAX_ROWS, FAISS_MISSING, Result, check_queries, empty, exact_rows,
                                        import_faiss, label_rows, load_vectors, save_vectors, top_k_blocks, unit)

#: Training sample: at most this many vectors per IVF cell (k-means) and for the scalar quantiser.
TRAIN_PER_LIST = 64
SQ_TRAIN = 100_000
#: Below this many vectors a build runs on one thread (`_set_threads`).
SMALL_N = 20_000


def auto_nlist(n: int) -> int:
    """IVF cells for n vectors: the power of two nearest 4·√n, at most n / 39 (faiss's minimum of 39
    training vectors per cell), at least 1."""
    want = 2 ** round(math.log2(max(4 * math.sqrt(max(n, 1)), 1)))
    return int(max(1, min(want, n // 39)))


def auto_pq_m(dim: int) -> int:
    """PQ sub-vectors (bytes per vector) for `dim`: the largest divisor of dim up to dim / 6 (64 for
    384 dimensions: 72 bytes per vector with its id, 69 MiB at a million; on 50,000 of the scale
    benchmark's vectors, nprobe 64 and re-ranking 100, recall@10 0.956 against 0.936 with 48)."""
    for m in range(max(dim // 6, 1), 0, -1):
        if dim % m == 0:
            return m
    return 1


def pq_nbits(n: int) -> int:
    """Bits per PQ code: 8, fewer when n cannot train 2^8 centroids (2^bits <= n / 4)."""
    return int(min(8, max(1, math.floor(math.log2(max(n, 2))) - 2)))


def _set_threads(faiss, threads: int, n: int) -> None:
    """faiss's OpenMP threads for a build: `threads` (model.threads), else every core, but one below
    SMALL_N vectors: there the work is too small to share (a 1,500-vector IVF-PQ build took 6.7 s on
    2 threads against 1.5 s on one, 2 cores at load 9)."""
    faiss.omp_set_num_threads(threads or (1 if n < SMALL_N else len(os.sched_getaffinity(0))))


class FaissIndex(Backend):
    """`index` (a faiss index), `vecs` ((n, d) unit float32 in row order, memory-mapped once loaded),
    `params` (rag_dense.json), `row_labels` (None = label i is row i), `deleted` (bool per label, or None)."""

    name = "faiss"
    structure = {"index_type": "index_type", "hnsw_m": "M", "hnsw_ef_construction": "ef_construction",
                 "nlist": "nlist_setting", "pq_m": "pq_m_setting"}
    search_keys = {"hnsw_ef": "ef", "nprobe": "nprobe", "rescore": "rescore"}

    @classmethod
    def check(cls, settings) -> None:
        import_faiss()

    @classmethod
    def describe(cls, params: dict, where: bool = False) -> str:
        return f"faiss {params.get('index_type')}"

    def __init__(self, index, vecs: np.ndarray, params: dict, row_labels: np.ndarray | None = None,
                 deleted: np.ndarray | None = None, folder: Path | None = None):
        self.index = index
        self.vecs = vecs
        self.params = params
        self.row_labels = row_labels
        self.deleted = deleted
        self._folder = folder  # where it was loaded from (memory-mapped, read only), None when built here
        self._rows = None

    # ------------------------------------------------------------------ build / update
    @classmethod
    def build(cls, vectors: np.ndarray, settings, threads: int = 0, seed: int = 100) -> "FaissIndex":
        """A fresh index of `settings.index_type` over `vectors` (label i = row i). Raises BadInput for
        a `pq_m` that does not divide the dimension."""
        faiss = import_faiss()
        n, d = vectors.shape
        _set_threads(faiss, threads, n)
        x = np.ascontiguousarray(unit(vectors))
        rng = np.random.default_rng(seed)
        kind = settings.index_type
        params = {"backend": "faiss", "index_type": kind, "space": "cosine", "dim": int(d), "n": int(n),
                  "M": settings.hnsw_m, "ef_construction": settings.hnsw_ef_construction, "ef": settings.hnsw_ef,
                  "nlist_setting": settings.nlist, "pq_m_setting": settings.pq_m, "nprobe": settings.nprobe,
                  "rescore": settings.rescore, "n_deleted": 0, "next_label": int(n)}

        def sample(size: int) -> np.ndarray:
            return x if n <= size else x[np.sort(rng.choice(n, size, replace=False))]

        if kind == "ivf-pq":
            nlist = min(settings.nlist or auto_nlist(n), max(n, 1))
            m = settings.pq_m or auto_pq_m(d)
            if d % m:
                raise BadInput(f"--pq-m {m} (config index.ivf.pq_m): must divide the vectors' dimension {d}; "
                               f"try {auto_pq_m(d)}")
            nbits = pq_nbits(n)
            index = faiss.index_factory(d, f"IVF{nlist},PQ{m}x{nbits}", faiss.METRIC_INNER_PRODUCT)
            index.do_polysemous_training = False  # minutes of annealing, for a Hamming filter not used here
            index.cp.min_points_per_centroid = 1  # small corpora: no warnings on stderr
            index.pq.cp.min_points_per_centroid = 1
            index.cp.seed = index.pq.cp.seed = seed
            if n:
                index.train(sample(max(nlist * TRAIN_PER_LIST, 256 * 64)))
                index.add_with_ids(x, np.arange(n, dtype=np.int64))
            params.update(nlist=int(nlist), pq_m=int(m), pq_nbits=nbits, code_bytes=int(math.ceil(m * nbits / 8)))
        elif kind in ("hnsw-sq8", "sq8"):
            if kind == "sq8":
                index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            else:
                index = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_8bit, settings.hnsw_m,
                                          faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = settings.hnsw_ef_construction
            if n:
                index.train(sample(SQ_TRAIN))
                for start in range(0, n, 65536):  # in blocks: the HNSW of faiss adds in parallel within each
                    index.add(x[start:start + 65536])
            params["code_bytes"] = int(d)  # one byte per dimension
        else:
            raise BadInput(f"--index-type {kind!r} (config index.faiss.index_type): use hnsw-sq8, sq8 or ivf-pq")
        return cls(index, x, params)

    def _writable(self):
        """The faiss index, read again without memory mapping when it was loaded mapped (read only)."""
        if self._folder is not None:
            faiss = import_faiss()
            self.index = faiss.read_index(str(self._folder / "faiss.index"))
            self._folder = None
        return self.index

    def update(self, row_labels: np.ndarray, deleted: list[int], add_vectors: np.ndarray, add_labels: np.ndarray,
               *, vectors: np.ndarray, settings=None, threads: int = 0) -> None:
        """See the module doc. `vectors` ((n, d)) are every row's vectors in the new row order."""
        faiss = import_faiss()
        _set_threads(faiss, threads, len(vectors))
        index = self._writable()
        add = np.ascontiguousarray(unit(add_vectors)) if len(add_labels) else None
        add_labels = np.asarray(add_labels, dtype=np.int64)
        if self.params["index_type"] == "ivf-pq":
            if deleted:
                index.remove_ids(np.asarray(deleted, dtype=np.int64))
            if add is not None:
                index.add_with_ids(add, add_labels)
            n_deleted = 0
        else:
            total = int(index.ntotal)
            if add is not None and not np.array_equal(add_labels, np.arange(total, total + len(add_labels))):
                raise AssertionError(f"faiss {self.params['index_type']} appends labels {total}.., "
                                     f"got {add_labels[:3].tolist()}..")
            flags = np.zeros(total + len(add_labels), dtype=bool)
            if self.deleted is not None:
                flags[:len(self.deleted)] = self.deleted
            flags[np.asarray(deleted, dtype=np.int64)] = True
            if add is not None:
                index.add(add)
            self.deleted = flags if flags.any() else None
            n_deleted = int(flags.sum())
        self.vecs = np.ascontiguousarray(unit(vectors))
        self.row_labels = np.asarray(row_labels, dtype=np.int64)
        self._rows = None
        if settings is not None:
            self.params.update(ef=settings.hnsw_ef, nprobe=settings.nprobe, rescore=settings.rescore)
        self.params.update(n=int(len(row_labels)), n_deleted=n_deleted,
                           next_label=int(max(self.params.get("next_label", 0),
                                              int(add_labels.max()) + 1 if len(add_labels) else 0)))

    # ------------------------------------------------------------------ files
    def save(self, folder: Path) -> None:
        faiss = import_faiss()
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(folder / "faiss.index"))
        save_vectors(folder / "vectors.npy", self.vecs)
        if self.deleted is not None:
            np.save(folder / "deleted.npy", self.deleted)
        (folder / "rag_dense.json").write_text(json.dumps(self.params), encoding="utf-8")

    @classmethod
    def open(cls, folder: Path, params: dict, row_labels: np.ndarray | None = None) -> "FaissIndex":
        """`folder`'s index with its codes memory-mapped, and vectors.npy memory-mapped. ValueError when
        their sizes disagree with rag_dense.json; BadInput without faiss installed."""
        faiss = import_faiss(f"{folder} is a faiss index ({params.get('index_type')}); {FAISS_MISSING}")
        index = faiss.read_index(str(folder / "faiss.index"), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        vecs = load_vectors(folder / "vectors.npy")
        deleted = np.load(folder / "deleted.npy") if (folder / "deleted.npy").exists() else None
        if vecs.shape != (params["n"], params["dim"]) or index.d != params["dim"]:
            raise ValueError(f"{folder}: faiss.index ({index.d} dimensions) and vectors.npy {vecs.shape} do not "
                             f"match rag_dense.json (n {params['n']}, dim {params['dim']})")
        if row_labels is not None and np.array_equal(row_labels, np.arange(len(row_labels))):
            row_labels = None
        return cls(index, vecs, params, None if row_labels is None else np.asarray(row_labels, np.int64),
                   deleted, folder)

    # ------------------------------------------------------------------ search
    def vectors(self, rows) -> np.ndarray:
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
        return np.asarray(self.vecs[rows], dtype=np.float32).reshape(len(rows), self.params["dim"])

    def _label_rows(self) -> np.ndarray | None:
        if self._rows is None and self.row_labels is not None:
            self._rows = label_rows(self.row_labels, int(self.index.ntotal))
        return self._rows

    def _selector(self, mask: np.ndarray | None):
        """(faiss IDSelectorBitmap of the allowed labels, the bitmap it points into), or (None, None)
        when every label is allowed."""
        faiss = import_faiss()
        n_labels = int(max(self.index.ntotal, self.params.get("next_label", 0)))
        if mask is None:
            if self.deleted is None:
                return None, None
            allowed = np.ones(n_labels, dtype=bool)
            allowed[:len(self.deleted)] = ~self.deleted
        else:
            allowed = np.zeros(n_labels, dtype=bool)
            labels = np.arange(len(mask)) if self.row_labels is None else self.row_labels
            allowed[labels[mask]] = True
        bits = np.packbits(allowed, bitorder="little")
        return faiss.IDSelectorBitmap(n_labels, faiss.swig_ptr(bits)), bits

    def _search_params(self, sel, ef: int | None, depth: int):
        faiss = import_faiss()
        kind = self.params["index_type"]
        if kind == "ivf-pq":
            return faiss.SearchParametersIVF(nprobe=int(self.params["nprobe"]), sel=sel)
        if kind == "hnsw-sq8":
            return faiss.SearchParametersHNSW(efSearch=int(max(ef or self.params["ef"], depth)), sel=sel)
        return faiss.SearchParameters(sel=sel) if sel is not None else None

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None, ef: int | None = None
               ) -> Result:
        """Top-`k` rows per query with their cosines (exact after re-ranking), best first; see the module doc."""
        check_queries(query_vectors, self.params["dim"])
        n = self.params["n"]
        q = len(query_vectors)
        allowed = n if mask is None else int(mask.sum())
        k = min(k, allowed)
        if n == 0 or k < 1:
            return empty(q)
        if mask is not None and allowed <= EXACT_MAX_ROWS:
            return exact_rows(self.vectors, query_vectors, k, np.flatnonzero(mask))
        rescore = int(self.params.get("rescore", self.params.get("rerank", 0)))  # rerank: its name before #33
        depth = min(max(k, rescore), allowed)
        sel, _bits = self._selector(mask)  # _bits must live until the search returns
        sp = self._search_params(sel, ef, depth)
        qv = np.ascontiguousarray(unit(query_vectors))
        sims, labels = self.index.search(qv, depth, params=sp) if sp is not None else self.index.search(qv, depth)
        to_rows = self._label_rows()
        out = []
        for i in range(q):
            keep = labels[i] >= 0
            rows = labels[i][keep].astype(np.int64)
            if to_rows is not None:
                rows = to_rows[rows]
            if len(rows) < k:  # fewer allowed rows found than asked (a selective filter, few cells probed)
                rest = np.flatnonzero(mask) if mask is not None else self._live_rows()
                out.append(top_k_blocks(self.vecs, qv[i:i + 1], k, rows=rest)[0])
                continue
            if rescore:
                s = (self.vectors(rows) @ qv[i]).astype(np.float32)
            else:
                s = sims[i][keep].astype(np.float32)
            order = np.lexsort((rows, -s))[:k]
            out.append((rows[order], s[order]))
        return out

    def _live_rows(self) -> np.ndarray:
        """Every row (rows are never deleted: a deleted label has no row)."""
        return np.arange(self.params["n"], dtype=np.int64)
