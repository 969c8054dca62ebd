"""The dense index behind one interface: a `Backend` class per backend, registered in `REGISTRY`.

`index.backend` names one of `REGISTRY` (`rag_cli.index.registry`). A backend is a subclass of
`Backend` (its methods are the life cycle) in its own module plus one registry line; the stages call
the functions here, which look the backend up by the name rag_dense.json (or [index]) records, and
never name one (docs/architecture.md: the interface, and a worked example).

Labels: row i of a freshly built index has label i; `rag update` keeps the
labels of unchanged chunks, so rows and labels differ after an update
(`row_labels`, the `label` column of the generation's chunks).
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.index.dense_common import (EXACT_MAX_ROWS, FAISS_MISSING, Result, import_faiss,  # noqa: F401
                                        unit, top_k_blocks)  # the interface's names, for callers
from rag_cli.index.registry import DEFAULT, REGISTRY


class Backend:
    """One dense backend: its settings' names and the life cycle of its index (see the module doc).

    Class attributes: `name` (its `REGISTRY` key, recorded as rag_dense.json's `backend`), `structure`
    ({[index] key: the rag_dense.json key recording it} for the keys whose change needs a new structure:
    `rag update` then builds afresh) and `search_keys` (the same for keys read at search time), `label`
    (how an ANN recall report names it). An instance holds `params` (rag_dense.json: backend, space, dim,
    n, next_label, n_deleted and the backend's own) and `row_labels` ((n,) int64 label of each row; None =
    label i is row i)."""

    name = ""
    structure: dict[str, str] = {}
    search_keys: dict[str, str] = {}
    label = ""
    row_labels: np.ndarray | None = None
    #: `publish(gen)` of a backend that keeps a copy elsewhere: called with a complete generation folder
    #: before it becomes current (`write_index_folder`'s `publish`); None for a local backend.
    publish = None

    # ------------------------------------------------------------------ settings
    @classmethod
    def check(cls, settings) -> None:
        """BadInput unless the backend can run here with `settings` ([index]): its extra installed, settings
        it cannot take. Called before a write reads anything."""

    @classmethod
    def concrete(cls, settings, root: Path):
        """`settings` as a build in the project folder `root` uses them (milvus: URI and alias made concrete)."""
        return settings

    @classmethod
    def describe(cls, params: dict, where: bool = False) -> str:
        """How `rag status` and reports name a generation of this backend (`where`: and its serving copy)."""
        return cls.name

    @classmethod
    def rebuild_reason(cls, params: dict, settings) -> str | None:
        """Why an index with `params` cannot be changed into one of `settings` (a `structure` key changed)."""
        changed = [k for k, recorded in cls.structure.items() if params.get(recorded) != getattr(settings, k)]
        return f"the {cls.describe(params)} parameters {' / '.join(changed)} changed" if changed else None

    # ------------------------------------------------------------------ the index
    @classmethod
    def build(cls, vectors: np.ndarray, settings, threads: int = 0) -> "Backend":
        """A fresh index over `vectors` ((n, d) float32; label i = row i) with the concrete [index]
        `settings`. Raises BadInput for settings the data cannot take."""
        raise NotImplementedError

    @classmethod
    def open(cls, folder: Path, params: dict, row_labels: np.ndarray | None = None) -> "Backend":
        """The index saved in `folder` (a generation's `dense/`, rag_dense.json read as `params`), memory-mapped
        where the backend allows. ValueError for files that do not match `params`."""
        raise NotImplementedError

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None) -> Result:
        """Top-`k` rows per query ((q, d) float32): [(rows (m,) int64, cosines (m,) float32)], best first,
        m = min(k, rows allowed by `mask`), the mask applied inside the search."""
        raise NotImplementedError

    def update(self, row_labels: np.ndarray, deleted: list[int], add_vectors: np.ndarray, add_labels: np.ndarray,
               *, vectors: np.ndarray, settings, threads: int = 0) -> None:
        """Delete the labels `deleted`, add `add_vectors` under `add_labels`; `row_labels` is the new row ->
        label map and `vectors` ((n, d) float32) every row's vector in the new row order."""
        raise NotImplementedError

    def save(self, folder: Path) -> None:
        """Write the index and rag_dense.json (`params`) into `folder`."""
        raise NotImplementedError

    def vectors(self, rows) -> np.ndarray:
        """(len(rows), d) float32: the stored vectors of `rows` (unit length)."""
        raise NotImplementedError

    @classmethod
    def open_sparse(cls, sparse, params: dict, gen: Path):
        """The BM25 retriever a search of the generation `gen` uses: `sparse` (its local `SparseIndex`) or a
        retriever that serves it from the backend's copy."""
        return sparse

    # ------------------------------------------------------------------ a copy kept elsewhere
    @classmethod
    def verify(cls, gen: Path, params: dict, settings) -> None:
        """Before `rag update` builds on the generation `gen`: BadInput when the copy it is served from is gone."""

    @classmethod
    def status(cls, gen: Path, params: dict) -> str | None:
        """What `rag status` says when the copy `gen` is served from is visibly gone (from the file system
        alone), else None."""
        return None

    @classmethod
    def check_switch(cls, gen: Path, params: dict) -> None:
        """Before CURRENT moves to the existing generation `gen` (`rag rollback`): raise what switching its
        serving copy would raise, so a refusal changes nothing."""

    @classmethod
    def targets(cls, index_dir: Path) -> set:
        """The copies of `index_dir`'s generations this backend serves (read before a write, given to `sync`)."""
        return set()

    @classmethod
    def sync(cls, index_dir: Path, current: Path | None, known: set) -> dict | None:
        """After a write or a rollback: point the served copy at `current` and drop those of removed
        generations (`known`: `targets` before the write, and after it)."""
        return None

    @classmethod
    def status_note(cls, index_dir: Path, current: Path, known: set) -> str:
        """After a rollback to `current`: what of the served copies `known` did not follow it ("" = nothing)."""
        return ""


def backend_class(name: str) -> type[Backend]:
    """The `Backend` registered as `name`. ValueError naming the known ones for another name."""
    if name not in REGISTRY:
        raise ValueError(f"unknown dense backend {name!r}; known: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name][0].split(":")
    return getattr(importlib.import_module(module), cls)


def backend_of(params: dict) -> str:
    """The backend recorded in rag_dense.json / meta.json's `dense` (hnswlib when absent: older generations)."""
    return params.get("backend", DEFAULT)


def backend_for(recorded) -> type[Backend]:
    """The `Backend` that `recorded` names: a generation's rag_dense.json / meta `dense` (a dict) or the
    [index] settings. ValueError for a name not registered."""
    return backend_class(backend_of(recorded) if isinstance(recorded, dict)
                         else getattr(recorded, "backend", DEFAULT))


def describe(params: dict, where: bool = False) -> str:
    """`hnswlib`, `exact`, `faiss ivf-pq`, `milvus hnsw` (`where`: `(alias A at URI)`): a generation's backend."""
    return backend_for(params).describe(params, where)


def ann_label(described: str | None) -> str:
    """How an ANN recall report names the backend `described` (`describe`'s words; None: a report that
    records none, of the default backend): the class's `label` (HNSW for hnswlib), else `described`."""
    described = described or DEFAULT
    name = described.split(" ")[0]
    return (backend_class(name).label or described) if name in REGISTRY else described


def check_backend(settings) -> None:
    """BadInput unless `settings.backend` can be used here (`Backend.check`)."""
    backend_for(settings).check(settings)


def serving_problem(gen: Path, params: dict) -> str | None:
    """What `rag status` says when the copy the generation `gen` (its meta.json `dense`) is served from is
    visibly gone (`Backend.status`), else None."""
    if not isinstance(params, dict) or backend_of(params) not in REGISTRY:
        return None
    return backend_for(params).status(gen, params)


def _recorded(path: Path) -> dict | None:
    """rag_dense.json at `path` when it is readable and names a registered backend, else None (checked
    when the generation is opened; a generation from before rag_dense.json is hnswlib's)."""
    try:
        params = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return params if isinstance(params, dict) and backend_of(params) in REGISTRY else None


def check_switch(gen: Path) -> None:
    """Before CURRENT moves to the existing generation `gen` (`rag rollback`): `Backend.check_switch`."""
    if (params := _recorded(Path(gen) / "dense" / "rag_dense.json")) is not None:
        backend_for(params).check_switch(gen, params)


def serving_targets(index_dir: Path) -> dict[str, set]:
    """{backend: its `targets`} for the backends of `index_dir`'s generations that keep copies elsewhere;
    read before a write, given to `sync_serving` after it. Empty when there are none."""
    names = {backend_of(p) for f in Path(index_dir).glob("gen-*/dense/rag_dense.json") if (p := _recorded(f))}
    out = {name: backend_class(name).targets(index_dir) for name in sorted(names)}
    return {name: places for name, places in out.items() if places}


def sync_serving(index_dir: Path, known: dict | None = None) -> dict | None:
    """After a write or a rollback of `index_dir`: each backend's `sync` of its copies (`known`: the
    `serving_targets` before the write). None when no generation keeps a copy elsewhere."""
    from rag_cli.store.index_folder import current_generation

    now = serving_targets(index_dir)
    places = {name: set((known or {}).get(name, ())) | now.get(name, set()) for name in set(known or {}) | set(now)}
    out = None
    for name, known_places in sorted(places.items()):
        done = backend_class(name).sync(index_dir, current_generation(index_dir), known_places)
        out = done if out is None else {**out, **(done or {})}
    return out


def serving_notes(index_dir: Path, current: Path) -> str:
    """After a rollback to `current`: what of the copies kept elsewhere did not follow it (`status_note`),
    from the folder alone; "" when nothing (or when a generation is unreadable: opening it says why)."""
    try:
        known = serving_targets(index_dir)
    except Exception:  # noqa: BLE001 - a generation opened later says what is wrong with it
        return ""
    return "".join(backend_class(name).status_note(index_dir, current, places) for name, places in known.items())


def build_dense(vectors: np.ndarray, settings, threads: int = 0) -> Backend:
    """A fresh dense index of `settings.backend` over `vectors` ((n, d) float32; label i = row i).
    `settings` is the [index] config (`IndexConfig`), made concrete (`Backend.concrete`). Raises BadInput
    for settings the data cannot take (e.g. a `pq_m` that does not divide the dimension) or a missing extra."""
    t0 = time.perf_counter()
    cls = backend_for(settings)
    cls.check(settings)
    dense = cls.build(vectors, settings, threads=threads)
    dense.params["build_seconds"] = round(time.perf_counter() - t0, 3)  # of the last full build
    return dense


def load_dense(folder: Path, row_labels: np.ndarray | None = None) -> Backend:
    """The dense index saved in `folder` (`dense/` of a generation), of the backend its rag_dense.json
    names (`Backend.open`). Raises BadInput for a backend whose extra is missing or a space other than
    cosine, ValueError for an unreadable index or an unknown backend."""
    params = json.loads((folder / "rag_dense.json").read_text(encoding="utf-8"))
    if params.get("space", "cosine") != "cosine":
        raise BadInput(f"{folder / 'rag_dense.json'} records space {params.get('space')!r}; "
                       "rag-cli searches by cosine and needs space 'cosine'; rebuild it with `rag index`")
    try:
        cls = backend_for(params)
    except ValueError as exc:
        raise ValueError(f"{folder / 'rag_dense.json'}: {exc}") from None
    return cls.open(folder, params, row_labels)


def rebuild_reason(params: dict, settings) -> str | None:
    """Why `rag update` must build the dense index afresh rather than change it (`params`: the current
    generation's rag_dense.json / meta `dense`; `settings`: the [index] config), or None."""
    want = getattr(settings, "backend", DEFAULT)
    if backend_of(params) != want:
        return f"the dense backend changed ({describe(params)} -> {want})"
    return backend_class(want).rebuild_reason(params, settings)


def same_search_params(params: dict, settings) -> bool:
    """Whether the dense index's search-time parameters (ef; faiss nprobe, rescore) equal `settings`'."""
    keys = backend_for(params).search_keys
    return all(params.get(recorded) == getattr(settings, k) for k, recorded in keys.items())
