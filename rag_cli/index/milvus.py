"""The `milvus` backend: a generation's dense vectors and BM25 served from Milvus.

`rag index --backend milvus --uri URI` writes the generation folder as the
`exact` backend does (`dense/vectors.npy`, `sparse/` of bm25s, the chunk and
document tables: the folder stays the source of truth), then publishes it to
the collection `ALIAS_gen_NNNNNN` (`collection_of`) and switches the alias
`ALIAS` (`index.collection`) to it with `alter_alias`, both before CURRENT
moves to it: a failure at any step (the alias's included) drops the new
collection and leaves CURRENT where it was. One row per chunk:

| field | type | holds |
| --- | --- | --- |
| `row` | INT64, primary key | the chunk's row in the generation (what search returns) |
| `label` | INT64 | the chunk's dense label (the generation's `label` column) |
| `chunk_id`, `doc_id` | VARCHAR | the chunk's ids |
| `path`, `title` | VARCHAR | its document's (docs.parquet; "" when unknown) |
| `n_chars` | INT64 | its document's length (-1 when unknown) |
| `metadata` | JSON | its document's front-matter / BEIR metadata |
| `vector` | FLOAT_VECTOR(d) | the unit vector; metric IP (= cosine) |
| `sparse` | SPARSE_FLOAT_VECTOR | the chunk's BM25 weight per term id, as bm25s stores it |

BM25 without a second analyzer: bm25s keeps, for every term t and chunk c,
the score contribution w(t, c) = idf(t) · tf·(k1+1) / (tf + k1·(1−b+b·dl/avgdl))
(in its CSC matrix `scores`: `indptr` over term ids, `indices` the chunks,
`data` the weights) and scores a query by summing w(t, c) over the query's
terms *with repeats* (`BM25.get_scores_from_ids`: one `np.add.at` per query
token id). So a chunk's sparse vector is its column of that matrix, the
query's sparse vector is {term id: number of times the term occurs in the
analyzed query} (terms outside the vocabulary dropped, as bm25s drops them),
and Milvus's inner product of the two is the local BM25 score (up to float32
summation order). The query is analyzed by rag-cli (`rag_cli.index.sparse.analyze`:
jieba, stemming), never by Milvus. Variants with a non-occurrence score
(bm25l, bm25+) add a constant per query term to every chunk, which a sparse
inner product cannot express: they are refused.

Searching: the generation's own collection, not the alias, so a search that
opened generation N reads N's rows while N+1 is published (as local
generations do). `--filter` is the local mask (`rag_cli.index.filters`, the
same semantics as every backend) sent as `row in [...]` or `row not in [...]`,
whichever list is shorter. Hybrid fuses the two Milvus result lists locally
with `rag_cli.index.fusion` (the Searcher does it, as for local backends).

Index types: Milvus Lite (3.x) builds HNSW, IVF_SQ8 and FLAT (with faiss) but
not IVF_PQ, which needs a server. Milvus Lite 3.2 reads build parameters
(nlist, M, efConstruction) only in the JSON form earlier pymilvus sent, not
the key-value pairs pymilvus 3 sends, and silently builds with its defaults
otherwise: `rag_cli.index.milvus_publish._build_params` sends both forms to
a Lite file. An IVF index is built per segment (as on a server); the nlist
sent and recorded in rag_dense.json is at most n / 39 (`MIN_TRAIN_PER_CELL`, at least 1), so
faiss's k-means (which Milvus Lite runs in this process) has the 39 training
vectors per cell it wants and prints no warning; below 39 chunks one cell is
still too few for it, and its one-line warning on stderr is harmless.

Publishing a generation and the lifecycle of its collection (the publish, the
alias, ownership, rollback checks, pruning) is `rag_cli.index.milvus_publish`.
Reaching Milvus (URIs, clients, an unreachable server, a busy or missing Lite
file, pymilvus's logging) is `rag_cli.index.milvus_connection`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.index import milvus_publish
from rag_cli.index.dense_common import Result, check_queries, empty, unit
from rag_cli.index.exact import ExactIndex
from rag_cli.index.milvus_connection import (  # noqa: F401 - the backend's names, re-exported
    OWNER, TOKEN, busy, client, close_clients, collection_of, default_alias, failed, forget, given_uri,
    import_pymilvus, is_server, lite_holders, loaded, mark_loaded, properties, resolve_uri)

#: index.milvus_index -> Milvus's index type.
INDEX_TYPES = {"hnsw": "HNSW", "ivf-sq8": "IVF_SQ8", "ivf-pq": "IVF_PQ", "flat": "FLAT"}
#: Milvus returns at most this many hits per query (its topk limit).
MAX_K = 16384
#: Query vectors per search request.
SEARCH_BATCH = 256
#: BM25 variants whose scores are a sparse inner product (no per-term constant for absent terms).
SPARSE_METHODS = ("lucene", "robertson", "atire")
#: faiss's `min_points_per_centroid`: k-means with fewer training vectors per cell prints a warning to stderr.
MIN_TRAIN_PER_CELL = 39


# --------------------------------------------------------------------------- settings
def check_settings(settings) -> None:
    """BadInput unless the milvus backend can run with `settings` ([index]): pymilvus importable, a BM25
    variant that is a sparse inner product (`SPARSE_METHODS`)."""
    if settings.bm25_method not in SPARSE_METHODS:
        raise BadInput(f"--bm25-method {settings.bm25_method} adds a score for absent terms, which a Milvus sparse "
                       f"vector cannot hold; with --backend milvus use one of {', '.join(SPARSE_METHODS)}")
    import_pymilvus()


def concrete(settings, root: Path):
    """`settings` ([index], `IndexConfig`) with `uri` and `collection` made concrete for the project at `root`
    (`given_uri`: a relative file stays relative to the project folder; `default_alias`). Called before a
    write does any work, so it also refuses early what would fail at the publish: IVF_PQ on a Lite file
    (BadInput), a Lite file another process holds (WorkFailed, `busy`: before `rag update` rechunks)."""
    from dataclasses import replace

    uri = given_uri(settings.uri)
    if not is_server(uri):
        if settings.milvus_index == "ivf-pq":
            raise BadInput("--milvus-index ivf-pq: Milvus Lite (a local file --uri) does not build IVF_PQ; use a "
                           "Milvus server (--uri http://host:19530) or --milvus-index hnsw, ivf-sq8 or flat")
        if pids := lite_holders(Path(resolve_uri(uri, root))):
            raise busy(resolve_uri(uri, root), pids)
    return replace(settings, uri=uri, collection=settings.collection or default_alias(root))


def _index_params(settings, n: int, dim: int) -> dict:
    """{"index_type", "params"} of the dense index Milvus builds, from [index] (`settings`)."""
    from rag_cli.index.faiss_index import auto_nlist, auto_pq_m

    kind = settings.milvus_index
    if kind == "hnsw":
        return {"index_type": "HNSW", "params": {"M": settings.hnsw_m, "efConstruction": settings.hnsw_ef_construction}}
    if kind == "flat":
        return {"index_type": "FLAT", "params": {}}
    # at most n / 39 cells: faiss's k-means wants 39 training vectors per cell and prints a warning with fewer
    params = {"nlist": min(settings.nlist or auto_nlist(n), max(n // MIN_TRAIN_PER_CELL, 1))}
    if kind == "ivf-pq":
        m = settings.pq_m or auto_pq_m(dim)
        if dim % m:
            raise BadInput(f"--pq-m {m} does not divide the dimension {dim}; give a divisor of {dim} (or 0)")
        params.update(m=m, nbits=8)
    return {"index_type": INDEX_TYPES[kind], "params": params}


# --------------------------------------------------------------------------- the filter
def row_filter(mask: np.ndarray | None) -> str | None:
    """A Milvus boolean expression over `row` allowing the rows where `mask` ((n,) bool) is True: "" for
    all (or no mask), None when no row is allowed, else the shorter of the expressions for the allowed
    and for the excluded rows (`_rows_expr`: runs of 3 or more consecutive rows as ranges, the rest as
    `row in [...]`; a document's chunks are consecutive rows, so a filter on document fields gives few
    runs). Milvus parses a long list slowly (about 0.06 ms per id on Milvus Lite)."""
    if mask is None:
        return ""
    mask = np.asarray(mask, dtype=bool)
    if mask.all():
        return ""
    if not mask.any():
        return None
    allowed, excluded = _rows_expr(mask), _rows_expr(~mask)
    return allowed if len(allowed) <= len(excluded) + 6 else f"not ({excluded})"


def _rows_expr(mask: np.ndarray) -> str:
    """An expression true for exactly the rows where `mask` is True (at least one is)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    starts, ends = edges[::2], edges[1::2]  # runs [start, end)
    singles = [str(r) for a, b in zip(starts, ends) if b - a < 3 for r in range(a, b)]
    parts = [f"(row >= {a} and row < {b})" for a, b in zip(starts, ends) if b - a >= 3]
    if singles:
        parts.append(f"row in [{','.join(singles)}]")
    return " or ".join(parts)


def _check_k(k: int) -> None:
    if k > MAX_K:
        raise BadInput(f"-k/--candidates {k}: Milvus returns at most {MAX_K} hits per query")



# --------------------------------------------------------------------------- the dense index
class MilvusIndex(ExactIndex):
    """The dense side of a milvus generation (a `Backend`, stored as `exact` is): `vecs` ((n, d) float32
    unit rows, the generation's `dense/vectors.npy`, memory-mapped once loaded: `vectors`, evidence cosines
    and the exact ground truth read it locally) and `params` (rag_dense.json: backend, uri, alias, milvus_index,
    the index's parameters); `collection` is the generation's collection once it is known (open, publish).
    The serving life cycle (`verify`, `status`, `check_switch`, `targets`, `sync`) is
    `rag_cli.index.milvus_publish`'s."""

    name = "milvus"
    structure = {"uri": "uri", "collection": "alias"}  # milvus republishes every generation whole anyway
    #: read at search time: those of its index, whose change republishes the generation (`rag update` then
    #: writes a new one even when no chunk changed)
    search_keys = {"milvus_index": "milvus_index", "hnsw_m": "M", "hnsw_ef_construction": "ef_construction",
                   "hnsw_ef": "ef", "nlist": "nlist_setting", "pq_m": "pq_m_setting", "nprobe": "nprobe"}
    check = staticmethod(check_settings)
    concrete = staticmethod(concrete)

    @classmethod
    def describe(cls, params: dict, where: bool = False) -> str:
        return f"milvus {params.get('milvus_index')}" + (
            f" (alias {params.get('alias')} at {params.get('uri')})" if where else "")

    @classmethod
    def open_sparse(cls, sparse, params: dict, gen: Path) -> "MilvusSparse":
        """`sparse` (the generation `gen`'s local `SparseIndex`) served from its collection."""
        import_pymilvus()  # a missing extra is exit 2 on open, not at the first search
        return MilvusSparse(sparse, params, collection_of(params["alias"], gen.name), Path(gen).absolute().parent.parent)

    verify = staticmethod(milvus_publish.check_served)
    status = staticmethod(milvus_publish.lite_problem)
    check_switch = staticmethod(milvus_publish.check_switch)
    targets = staticmethod(milvus_publish.targets)
    sync = staticmethod(milvus_publish.sync)

    @classmethod
    def status_note(cls, index_dir: Path, current: Path, known: set) -> str:
        """"; the Milvus alias ... " naming the aliases of this project's other milvus generations that the
        rollback to `current` did not move (only the alias `current` was published under follows it, none for
        a local generation: see docs/scale-out.md), else "". From the folder alone (status opens no Milvus)."""
        mine = {(uri, alias) for uri, alias, name in known if name == collection_of(alias, current.name)}
        left = sorted({(uri, alias) for uri, alias, _ in known} - mine)
        if not left:
            return ""
        names = ", ".join(f"{alias} at {uri}" for uri, alias in left)
        return (f"; the Milvus alias {names} still serves the collection it pointed at (a rollback moves only the "
                f"alias of the generation it makes current{', which has none' if not mine else ''}); `rag index` "
                "publishes the current chunks again under the configured --collection")

    def __init__(self, vecs: np.ndarray, params: dict, collection: str | None = None, uri: str | None = None):
        super().__init__(vecs, params)
        self.collection = collection
        self.uri = uri  # params["uri"] resolved against the project folder (load, publish)

    @classmethod
    def build(cls, vectors: np.ndarray, settings, threads: int = 0) -> "MilvusIndex":
        """From (n, d) float32 vectors and concrete [index] settings (`concrete`). Nothing is sent yet:
        `publish` sends the written generation."""
        dense = super().build(vectors)
        dense.params.update(token=uuid.uuid4().hex, **cls._settings(settings, *vectors.shape))
        return dense

    @staticmethod
    def _settings(settings, n: int, d: int) -> dict:
        index = _index_params(settings, n, d)
        return {"uri": settings.uri, "alias": settings.collection, "milvus_index": settings.milvus_index,
                "index_type": index["index_type"], "index_params": index["params"],
                "M": settings.hnsw_m, "ef_construction": settings.hnsw_ef_construction, "ef": settings.hnsw_ef,
                "nlist_setting": settings.nlist, "pq_m_setting": settings.pq_m, "nprobe": settings.nprobe,
                "bm25_method": settings.bm25_method}

    def update(self, row_labels: np.ndarray, deleted: list[int], add_vectors: np.ndarray, add_labels: np.ndarray,
               *, vectors: np.ndarray, settings, threads: int = 0) -> None:
        """The new generation's vectors, whole (its collection is published whole: see the module doc)."""
        super().update(row_labels, deleted, add_vectors, add_labels, vectors=vectors)
        self.params.update(token=uuid.uuid4().hex, **self._settings(settings, len(vectors), self.params["dim"]))

    @classmethod
    def open(cls, folder: Path, params: dict, row_labels: np.ndarray | None = None) -> "MilvusIndex":
        """`folder` (a generation's `dense/`): its vectors.npy memory-mapped (`ExactIndex.open`), its
        collection named after the generation. Nothing is sent to Milvus until a search. BadInput without
        pymilvus (a missing extra is exit 2 on open, not at the first search)."""
        import_pymilvus()
        dense = super().open(folder, params)
        dense.collection = collection_of(params["alias"], folder.parent.name)
        dense.uri = resolve_uri(params["uri"], Path(folder).absolute().parent.parent.parent)
        return dense

    def _search_params(self, k: int) -> dict:
        kind = self.params["milvus_index"]
        params = {"ef": max(int(self.params["ef"]), k)} if kind == "hnsw" else \
            {} if kind == "flat" else {"nprobe": int(self.params["nprobe"])}
        return {"metric_type": "IP", "params": params}

    def search(self, query_vectors: np.ndarray, k: int, mask: np.ndarray | None = None) -> Result:
        """Top-`k` rows per query ((q, d) float32) by inner product of unit vectors (= cosine), from Milvus:
        [(rows (m,) int64, cosines (m,) float32)], best first, ties by lower row; `mask` is sent as a
        filter on `row` (`row_filter`). Raises BadInput for k > MAX_K, WorkFailed when Milvus fails."""
        check_queries(query_vectors, self.params["dim"])
        _check_k(k)
        expr = row_filter(mask)
        if expr is None or self.params["n"] == 0 or k < 1:
            return empty(len(query_vectors))
        c = loaded(self.uri, self.collection, self.params.get("token"))
        q = unit(query_vectors)
        out: Result = []
        for start in range(0, len(q), SEARCH_BATCH):
            try:
                res = c.search(self.collection, data=q[start:start + SEARCH_BATCH].tolist(), anns_field="vector",
                               limit=k, filter=expr, search_params=self._search_params(k), output_fields=["row"])
            except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
                raise failed(f"dense search of {self.collection}", self.uri, exc) from exc
            out.extend(_ranked(hits) for hits in res)
        for rows, _ in out:
            _check_rows(rows, self.params["n"], self.collection, self.uri)
        return out

    def publish(self, gen: Path) -> None:
        """Send the complete generation folder `gen` to its collection (`collection_of`): create it (a
        leftover of the same name, from a killed writer, is dropped first), insert every chunk's row
        (vector, BM25 sparse vector, ids, document fields) in batches, build the dense index
        (`milvus_index`) and the sparse inverted index (IP), and load it. Called before the generation
        becomes current. Raises BadInput for another project's collection or alias, WorkFailed when Milvus
        cannot be reached, the Lite file is busy or a request fails (`client`)."""
        from rag_cli.index.milvus_publish import publish_generation

        publish_generation(gen, self.params)
        self.collection = collection_of(self.params["alias"], gen.name)
        self.uri = resolve_uri(self.params["uri"], Path(gen).absolute().parent.parent)


def _check_rows(rows: np.ndarray, n: int, collection: str, uri: str) -> None:
    """BadInput when Milvus returned a row the generation does not have (`n` chunks): its collection was
    replaced by another project's (one published before owner tokens, which `loaded` cannot check)."""
    if len(rows) and int(rows.max()) >= n:
        raise BadInput(f"the collection {collection} at {uri} returned row {int(rows.max())} of a generation of {n} "
                       "chunks: it was replaced by another project; run `rag index` to publish this project again "
                       "(with its own --collection)")


def _ranked(hits) -> tuple[np.ndarray, np.ndarray]:
    """One query's Milvus hits -> (rows int64, scores float32), best first, ties by lower row."""
    rows = np.fromiter((int(h["id"] if "id" in h else h["row"]) for h in hits), dtype=np.int64, count=len(hits))
    scores = np.fromiter((float(h["distance"]) for h in hits), dtype=np.float32, count=len(hits))
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]


# --------------------------------------------------------------------------- the sparse side
class MilvusSparse:
    """A generation's BM25 served from Milvus: `search` sends the query's term counts (analyzed here, with
    the local `SparseIndex`'s vocabulary) to the generation's collection; everything else (`idf`,
    `coverage`, `scores`, `params`, `retriever`) is the local `SparseIndex`'s."""

    def __init__(self, local, dense_params: dict, collection: str, root: Path | None = None):
        self.local = local
        self.uri = dense_params["uri"] if root is None else resolve_uri(dense_params["uri"], root)
        self.token = dense_params.get("token")
        self.collection = collection

    def __getattr__(self, name):
        return getattr(self.local, name)

    def query_vector(self, query: str) -> dict[int, float]:
        """{term id: count} of the analyzed `query` over the index's vocabulary (bm25s's weighting of
        repeated query terms: each occurrence adds the term's weight once more)."""
        from rag_cli.index.sparse import analyze

        vocab = self.local.retriever.vocab_dict
        out: dict[int, float] = {}
        for t in analyze(query):
            tid = vocab.get(t)
            if tid is not None:
                out[int(tid)] = out.get(int(tid), 0.0) + 1.0
        return out

    def search(self, query: str, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` rows with a BM25 score > 0: (rows (m,) int64, scores (m,) float32), m <= k, as
        `SparseIndex.search` gives them, from Milvus; `mask` (n,) bool as a filter on `row`."""
        _check_k(k)
        expr = row_filter(mask)
        vec = self.query_vector(query)
        if expr is None or not vec or k < 1:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        c = loaded(self.uri, self.collection, self.token)  # its BadInput / WorkFailed as they are
        try:
            res = c.search(
                self.collection, data=[vec], anns_field="sparse", limit=k, filter=expr,
                search_params={"metric_type": "IP", "params": {}}, output_fields=["row"])
        except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
            raise failed(f"sparse search of {self.collection}", self.uri, exc) from exc
        rows, scores = _ranked(res[0])
        _check_rows(rows, int(self.local.retriever.scores["num_docs"]), self.collection, self.uri)
        keep = scores > 0
        return rows[keep], scores[keep]
