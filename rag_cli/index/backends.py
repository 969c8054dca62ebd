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
* `milvus` (the optional `milvus` extra, `pip install 'rag-cli[milvus]'`):
  the generation is written as for `exact` and published to a Milvus
  collection (dense vectors under `index.milvus_index`, and rag-cli's own
  BM25 weights as sparse vectors), which then serves dense and sparse
  search (`rag_cli.index.milvus`; publishing, rollback checks and pruning:
  `rag_cli.index.milvus_publish`); `publish`, `serve_sparse` and `sync`
  are the hooks the stages call.

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

from rag_cli.index.dense_common import (EXACT_MAX_ROWS, FAISS_MISSING, Result, import_faiss,  # noqa: F401
                                        unit, top_k_blocks)  # the interface's names, for callers

BACKENDS = ("hnswlib", "faiss", "exact", "milvus")
FAISS_TYPES = ("hnsw-sq8", "sq8", "ivf-pq")



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
    if b == "milvus":
        return f"milvus {params.get('milvus_index')}"
    return f"faiss {params.get('index_type')}" if b == "faiss" else b


def check_backend(settings) -> None:
    """BadInput unless `settings.backend` can be used here: faiss (pymilvus) must import; milvus needs a BM25
    variant that is a sparse inner product."""
    if settings.backend == "faiss":
        import_faiss()
    elif settings.backend == "milvus":
        from rag_cli.index.milvus import check_settings

        check_settings(settings)


def concrete_settings(settings, root: Path):
    """`settings` ([index]) as a build at the project folder `root` uses them: for milvus the URI and the
    collection alias made concrete (`rag_cli.index.milvus.concrete`); others unchanged."""
    if getattr(settings, "backend", "hnswlib") != "milvus":
        return settings
    from rag_cli.index.milvus import concrete

    return concrete(settings, root)


def publisher(dense: VectorIndex):
    """What publishes a complete generation folder before it becomes current (`write_index_folder`'s
    `publish`): `MilvusIndex.publish` for milvus, None for the local backends."""
    return getattr(dense, "publish", None)


def check_served(gen: Path, params: dict, settings) -> None:
    """Before `rag update` builds on the generation `gen` (its rag_dense.json / meta `dense` `params`) with
    the [index] `settings`: BadInput when the copy it is served from is gone (milvus: its Lite file,
    `rag_cli.index.milvus_publish.check_served`). Nothing for the local backends (their files are
    `gen`'s own)."""
    if params.get("backend") == "milvus":
        from rag_cli.index.milvus_publish import check_served as check_milvus

        check_milvus(gen, params, settings)


def serving_problem(gen: Path, params: dict) -> str | None:
    """What `rag status` says when the copy the generation `gen` (its meta.json `dense` `params`) is served
    from is visibly gone (milvus: its Lite file missing or not a folder,
    `rag_cli.index.milvus_publish.lite_problem`; looked at on disk only: status opens no Milvus, which would
    take a Lite file from a `rag serve`), else None. Nothing for the local backends."""
    if not isinstance(params, dict) or params.get("backend") != "milvus":
        return None
    from rag_cli.index.milvus_publish import lite_problem

    return lite_problem(gen, params)


def check_switch(gen: Path) -> None:
    """Before CURRENT moves to the existing generation `gen` (`rag rollback`): raise what switching its
    serving copy to it would raise, so a refusal changes nothing (milvus:
    `rag_cli.index.milvus_publish.check_switch`: the Lite file missing or held by another process, the server
    unreachable, the collection gone or another project's). Nothing for the local backends (their files are
    `gen`'s own, already verified)."""
    try:
        params = json.loads((Path(gen) / "dense" / "rag_dense.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # verified before: a generation of the time before rag_dense.json (hnswlib)
    if isinstance(params, dict) and params.get("backend") == "milvus":
        from rag_cli.index.milvus_publish import check_switch as check_milvus

        check_milvus(gen, params)


def serving_targets(index_dir: Path) -> set:
    """The external copies of the generations in `index_dir` (milvus: {(uri, alias, collection)}); read
    before a write, given to `sync_serving` after it. Empty (and nothing imported) when there are none."""
    if not any(Path(index_dir).glob("gen-*/dense/rag_dense.json")):
        return set()
    from rag_cli.index.milvus_publish import targets

    return targets(index_dir)


def sync_serving(index_dir: Path, known: set = frozenset()) -> dict | None:
    """After a write or a rollback of `index_dir`: point the Milvus alias at the current generation's
    collection and drop the collections of generations that are gone
    (`rag_cli.index.milvus_publish.sync`), `known` being `serving_targets` before the write. None (nothing
    imported) when no generation was ever a milvus one."""
    from rag_cli.store.index_folder import current_generation

    places = set(known) | serving_targets(index_dir)
    if not places:
        return None
    from rag_cli.index.milvus_publish import sync

    return sync(index_dir, current_generation(index_dir), places)


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
    elif backend == "milvus":
        from rag_cli.index.milvus import MilvusIndex

        dense = MilvusIndex.build(vectors, settings)  # settings made concrete (`concrete_settings`)
    else:
        from rag_cli.index.dense import DenseIndex

        dense = DenseIndex.build(vectors, m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction,
                                 ef=settings.hnsw_ef, threads=threads)
    dense.params["build_seconds"] = round(time.perf_counter() - t0, 3)  # of the last full build
    return dense


def load_dense(folder: Path, row_labels: np.ndarray | None = None) -> VectorIndex:
    """The dense index saved in `folder` (`dense/` of a generation), of the backend its rag_dense.json
    names; vectors and codes are memory-mapped where the backend allows. Raises BadInput for a faiss
    index without faiss installed or a space other than cosine, ValueError for an unreadable one."""
    params = json.loads((folder / "rag_dense.json").read_text(encoding="utf-8"))
    if params.get("space", "cosine") != "cosine":
        from rag_cli.errors import BadInput

        raise BadInput(f"{folder / 'rag_dense.json'} records space {params.get('space')!r}; "
                       "rag-cli searches by cosine and needs space 'cosine'; rebuild it with `rag index`")
    backend = backend_of(params)
    if backend == "exact":
        from rag_cli.index.exact import ExactIndex

        return ExactIndex.load(folder, params)
    if backend == "faiss":
        import_faiss(f"{folder} is a faiss index ({params.get('index_type')}); {FAISS_MISSING}")
        from rag_cli.index.faiss_index import FaissIndex

        return FaissIndex.load(folder, params, row_labels)
    if backend == "milvus":
        from rag_cli.index.milvus import MilvusIndex, import_pymilvus

        import_pymilvus()  # a missing extra is exit 2 on open, not at the first search
        return MilvusIndex.load(folder, params)
    if backend != "hnswlib":
        raise ValueError(f"{folder / 'rag_dense.json'} names the backend {backend!r}; known: {', '.join(BACKENDS)}")
    from rag_cli.index.dense import DenseIndex

    return DenseIndex.load(folder, row_labels)


#: [index] keys whose change needs a new index structure, per backend (the rest are read at search time).
_STRUCTURE = {"hnswlib": ("hnsw_m", "hnsw_ef_construction"), "exact": (),
              "faiss": ("index_type", "hnsw_m", "hnsw_ef_construction", "nlist", "pq_m"),
              "milvus": ("uri", "collection")}  # milvus republishes every generation whole anyway
#: [index] key -> the rag_dense.json key that records it.
_RECORDED = {"hnsw_m": "M", "hnsw_ef_construction": "ef_construction", "hnsw_ef": "ef", "index_type": "index_type",
             "nlist": "nlist_setting", "pq_m": "pq_m_setting", "nprobe": "nprobe", "rerank": "rerank",
             "uri": "uri", "collection": "alias", "milvus_index": "milvus_index"}
#: [index] keys read at search time, per backend (milvus: those of its index, whose change republishes the
#: generation; `rag update` then writes a new one even when no chunk changed).
_SEARCH = {"hnswlib": ("hnsw_ef",), "exact": (),
           "faiss": ("hnsw_ef", "nprobe", "rerank"),
           "milvus": ("milvus_index", "hnsw_m", "hnsw_ef_construction", "hnsw_ef", "nlist", "pq_m", "nprobe")}


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
