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

Ownership: every published collection carries the properties `OWNER` (the resolved project folder
that published it) and `TOKEN` (the generation's random `token`, also in its rag_dense.json). A
publish refuses (BadInput naming --collection and the owner) to overwrite another project's collection
or to move an alias pointing at one, and (BadInput naming --collection: aliases and collections share one
namespace) an alias named like an existing collection or a collection named like an existing alias
(`_check_names`); a search refuses a collection without its generation's token
(replaced by another project: BadInput, run `rag index`); pruning drops only this project's
(`_droppable`: a collection without an owner, published before owners were recorded, only from a
Lite file inside the project folder, and never the alias's target).

Generations and collections: a generation's collection lives as long as its
folder: `sync` (after every write and rollback) points the alias at the
current generation's collection and drops `ALIAS_gen_*` collections whose
generation folder is gone. A rollback moves only the alias recorded in the
target generation's rag_dense.json (none for a local generation), after
`check_switch` found everything that switch needs, before CURRENT moves. `rag update` publishes the new generation whole
(not an upsert into the served collection): every chunk's BM25 weights depend
on the corpus (N, document frequencies, average length), so one changed
document changes every sparse vector, and a separate collection keeps the
switch atomic and `rag rollback` possible. `rag update` refuses (BadInput)
when the current generation's Lite file is gone (`check_served`): the served
index was deleted or moved, and `rag index` is what publishes everything again.

Index types: Milvus Lite (3.x) builds HNSW, IVF_SQ8 and FLAT (with faiss) but
not IVF_PQ, which needs a server. Milvus Lite 3.2 reads build parameters
(nlist, M, efConstruction) only in the JSON form earlier pymilvus sent, not
the key-value pairs pymilvus 3 sends, and silently builds with its defaults
otherwise: `_build_params` sends both forms to a Lite file. An IVF index is
built per segment (as on a server); the nlist sent and recorded in
rag_dense.json is at most n / 39 (`MIN_TRAIN_PER_CELL`, at least 1), so
faiss's k-means (which Milvus Lite runs in this process) has the 39 training
vectors per cell it wants and prints no warning; below 39 chunks one cell is
still too few for it, and its one-line warning on stderr is harmless.

Reaching Milvus (URIs, clients, an unreachable server, a busy or missing Lite
file, pymilvus's logging) is `rag_cli.index.milvus_connection`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.index.dense_common import Result, check_queries, empty, load_vectors, save_vectors, unit
from rag_cli.index.milvus_connection import (  # noqa: F401 - the backend's names, re-exported
    OWNER, TOKEN, busy, client, close_clients, collection_of, default_alias, forget, given_uri, import_pymilvus,
    is_server, lite_holders, loaded, mark_loaded, properties, resolve_uri)

#: index.milvus_index -> Milvus's index type.
INDEX_TYPES = {"hnsw": "HNSW", "ivf-sq8": "IVF_SQ8", "ivf-pq": "IVF_PQ", "flat": "FLAT"}
#: Milvus returns at most this many hits per query (its topk limit).
MAX_K = 16384
#: Rows per insert request (384-d float32: 3 MiB of vectors, well under Milvus's 64 MiB per request).
INSERT_BATCH = 2000
#: Query vectors per search request.
SEARCH_BATCH = 256
#: BM25 variants whose scores are a sparse inner product (no per-term constant for absent terms).
SPARSE_METHODS = ("lucene", "robertson", "atire")
#: The term id of a chunk without BM25 terms (Milvus refuses an empty sparse vector): no query holds it
#: (term ids are below the vocabulary's size), so the chunk is never a sparse hit, as locally.
NO_TERMS = 2**32 - 2
#: faiss's `min_points_per_centroid`: k-means with fewer training vectors per cell prints a warning to stderr.
MIN_TRAIN_PER_CELL = 39
_GEN_COLLECTION = re.compile(r"^(?P<alias>.+)_gen_(?P<id>\d{6,})$")


# --------------------------------------------------------------------------- ownership
def _gone(uri: str, owner: str) -> bool:
    """Whether the project folder `owner` of a collection of a Milvus Lite file `uri` no longer exists (the
    project was moved or deleted: a Lite file serves only this machine). Never for a server, whose other
    clients' folders are not visible here."""
    return not is_server(uri) and not Path(owner).exists()


def _foreign(c, uri: str, name: str, root: str) -> str | None:
    """The project folder that owns the collection `name` when that is not `root`, else None (this
    project's; one published before owners were recorded, without an `OWNER` property; or, on a Lite
    file, one whose owner folder is gone: `_gone`)."""
    owner = properties(c, name).get(OWNER)
    return owner if owner and owner != root and not _gone(uri, owner) else None


def _droppable(c, uri: str, name: str, root: str, target: str | None) -> bool:
    """Whether pruning may drop the collection `name` of the project at `root` (`target`: the collection
    its alias points at): one it published (its `OWNER` property), or on a Lite file one of a project
    folder that is gone (`_gone`: this project before it was moved). A collection without an owner
    (published before owners were recorded) only when it is in a Lite file inside the project folder,
    which serves this project alone (a copy of the project copies the file), and is not `target`; on a
    server or a Lite file outside the project it may be another project's that used the same
    --collection, and nothing in it says whose: it is left."""
    owner = properties(c, name).get(OWNER)
    if owner:
        return owner == root or _gone(uri, owner)
    return name != target and _inside(uri, root)


def _inside(uri: str, root: str) -> bool:
    """Whether `uri` is a Milvus Lite file inside the project folder `root`."""
    return not is_server(uri) and Path(uri).resolve().is_relative_to(Path(root))


def owner_root(index_dir: Path) -> str:
    """The owner recorded for the collections of the project whose index folder is `index_dir`: its
    project folder, resolved (a copied or moved project is another owner)."""
    return str(Path(index_dir).resolve().parent)


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


def _failed(what: str, uri: str, exc: Exception) -> WorkFailed:
    return WorkFailed(f"Milvus at {uri}: {what} failed ({type(exc).__name__}: {exc})")


# --------------------------------------------------------------------------- the dense index
class MilvusIndex:
    """The dense side of a milvus generation (a `VectorIndex`): `vecs` ((n, d) float32 unit rows, the
    generation's `dense/vectors.npy`, memory-mapped once loaded: `vectors`, evidence cosines and the
    exact ground truth read it locally) and `params` (rag_dense.json: backend, uri, alias, milvus_index,
    the index's parameters); `collection` is the generation's collection once it is known (load, publish)."""

    row_labels = None  # rows are the vectors' order, as for `exact`

    def __init__(self, vecs: np.ndarray, params: dict, collection: str | None = None, uri: str | None = None):
        self.vecs = vecs
        self.params = params
        self.collection = collection
        self.uri = uri  # params["uri"] resolved against the project folder (load, publish)

    @classmethod
    def build(cls, vectors: np.ndarray, settings) -> "MilvusIndex":
        """From (n, d) float32 vectors and concrete [index] settings (`concrete`). Nothing is sent yet:
        `publish` sends the written generation."""
        n, d = vectors.shape
        params = {"backend": "milvus", "space": "cosine", "dim": int(d), "n": int(n), "n_deleted": 0,
                  "next_label": int(n), "token": uuid.uuid4().hex}
        params.update(cls._settings(settings, n, d))
        return cls(unit(vectors), params)

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
        self.vecs = unit(vectors)
        self.params.update(n=int(len(vectors)), n_deleted=0, token=uuid.uuid4().hex,
                           next_label=int(max(self.params.get("next_label", 0),
                                              int(add_labels.max()) + 1 if len(add_labels) else 0)))
        self.params.update(self._settings(settings, len(vectors), self.params["dim"]))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save_vectors(folder / "vectors.npy", self.vecs)
        (folder / "rag_dense.json").write_text(json.dumps(self.params), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, params: dict) -> "MilvusIndex":
        """`folder` (a generation's `dense/`): its vectors.npy memory-mapped, its collection named after the
        generation. Nothing is sent to Milvus until a search. ValueError when the shape is not rag_dense.json's."""
        vecs = load_vectors(folder / "vectors.npy")
        if vecs.shape != (params["n"], params["dim"]):
            raise ValueError(f"{folder / 'vectors.npy'} holds {vecs.shape} vectors where rag_dense.json says "
                             f"({params['n']}, {params['dim']})")
        return cls(vecs, params, collection_of(params["alias"], folder.parent.name),
                   resolve_uri(params["uri"], Path(folder).absolute().parent.parent.parent))

    def vectors(self, rows) -> np.ndarray:
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
        return np.asarray(self.vecs[rows], dtype=np.float32).reshape(len(rows), self.params["dim"])

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
                raise _failed(f"dense search of {self.collection}", self.uri, exc) from exc
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
            raise _failed(f"sparse search of {self.collection}", self.uri, exc) from exc
        rows, scores = _ranked(res[0])
        _check_rows(rows, int(self.local.retriever.scores["num_docs"]), self.collection, self.uri)
        keep = scores > 0
        return rows[keep], scores[keep]


def serve_sparse(sparse, dense_params: dict, gen: Path):
    """`sparse` (the generation's local `SparseIndex`) served from Milvus when the generation is a milvus
    one (`MilvusSparse`), else `sparse` itself."""
    if dense_params.get("backend") != "milvus":
        return sparse
    import_pymilvus()  # a missing extra is exit 2 on open, not at the first search
    return MilvusSparse(sparse, dense_params, collection_of(dense_params["alias"], gen.name),
                        Path(gen).absolute().parent.parent)


# --------------------------------------------------------------------------- publishing
def sparse_rows(retriever) -> "object":
    """The BM25 weights of a bm25s index as a (n_chunks, n_terms) float32 `scipy.sparse.csr_matrix`: row c
    holds chunk c's weight of each of its terms (bm25s's `scores` is the same matrix in CSC, by term)."""
    import scipy.sparse as sp

    s = retriever.scores
    n_terms = len(s["indptr"]) - 1
    csc = sp.csc_matrix((np.asarray(s["data"], np.float32), np.asarray(s["indices"]), np.asarray(s["indptr"])),
                        shape=(int(s["num_docs"]), n_terms))
    return csc.tocsr()


def _schema(pymilvus, c, dim: int, max_ids: int):
    schema = c.create_schema(auto_id=False, enable_dynamic_field=False,
                             description="rag-cli index generation (rag_cli.index.milvus)")
    dt = pymilvus.DataType
    schema.add_field("row", dt.INT64, is_primary=True)
    schema.add_field("label", dt.INT64)
    schema.add_field("chunk_id", dt.VARCHAR, max_length=max_ids)
    schema.add_field("doc_id", dt.VARCHAR, max_length=max_ids)
    schema.add_field("path", dt.VARCHAR, max_length=65535)
    schema.add_field("title", dt.VARCHAR, max_length=65535)
    schema.add_field("n_chars", dt.INT64)
    schema.add_field("metadata", dt.JSON)
    schema.add_field("vector", dt.FLOAT_VECTOR, dim=dim)
    schema.add_field("sparse", dt.SPARSE_FLOAT_VECTOR)
    return schema


def _doc_fields(gen: Path) -> dict[str, tuple[str, str, int, dict]]:
    """{doc_id: (path, title, n_chars, metadata dict)} of a generation's docs.parquet ({} without one)."""
    import pyarrow.parquet as pq

    if not (gen / "docs.parquet").exists():
        return {}
    out = {}
    for r in pq.read_table(gen / "docs.parquet").to_pylist():
        try:
            meta = json.loads(r.get("metadata") or "{}")
        except ValueError:
            meta = {}
        n_chars = r.get("n_chars")
        out[r["doc_id"]] = (r.get("path") or "", r.get("title") or "", -1 if n_chars is None else int(n_chars),
                            meta if isinstance(meta, dict) else {})
    return out


def publish_generation(gen: Path, params: dict) -> float:
    """`MilvusIndex.publish` (see there) of the generation folder `gen` with its rag_dense.json `params`.
    Returns the seconds it took."""
    from rag_cli.index.sparse import SparseIndex
    from rag_cli.store.index_chunks import read_index_chunks

    t0 = time.perf_counter()
    pymilvus = import_pymilvus()
    uri, name = resolve_uri(params["uri"], Path(gen).absolute().parent.parent), collection_of(params["alias"], gen.name)
    c = client(uri, create=True)
    chunks = read_index_chunks(gen)
    vecs = load_vectors(gen / "dense" / "vectors.npy")
    weights = sparse_rows(SparseIndex.load(gen / "sparse").retriever)
    docs = _doc_fields(gen)
    chunk_ids = chunks.column("chunk_id").to_pylist()
    doc_ids = chunks.column("doc_id").to_pylist()
    labels = (chunks.column("label").to_numpy() if "label" in chunks.column_names
              else np.arange(len(chunk_ids))).tolist()
    n, dim = vecs.shape
    if weights.shape[0] != n or len(chunk_ids) != n:
        raise WorkFailed(f"{gen} holds {len(chunk_ids)} chunks, {n} vectors and {weights.shape[0]} BM25 rows; "
                         "rebuild it with `rag index`")
    max_ids = max(256, max((len(s.encode()) for s in chunk_ids + doc_ids), default=0))
    root, alias = owner_root(gen.parent), params["alias"]
    created, step = False, f"publishing {gen.name} to the collection {name}"
    try:
        _check_names(c, uri, alias, name)
        if c.has_collection(name):
            if other := _foreign(c, uri, name, root):
                raise BadInput(f"--collection {alias}: the collection {name} at {uri} belongs to another project "
                               f"({other}); give this project its own --collection (nothing was changed)")
            c.drop_collection(name)  # this project's leftover (a killed writer's)
            forget(uri, name)
        target = _alias_target(c, alias)
        if target is not None and (other := _foreign(c, uri, target, root)):
            raise BadInput(f"--collection {alias}: the alias {alias} at {uri} points at {target}, which belongs to "
                           f"another project ({other}); give this project its own --collection (nothing was changed)")
        created = True
        c.create_collection(name, schema=_schema(pymilvus, c, dim, min(max_ids, 65535)))
        c.alter_collection_properties(name, properties={OWNER: root, TOKEN: params.get("token") or ""})
        indptr, indices, data = weights.indptr, weights.indices, weights.data
        for start in range(0, n, INSERT_BATCH):
            rows = []
            block = np.asarray(vecs[start:start + INSERT_BATCH], dtype=np.float32)
            for i in range(start, min(start + INSERT_BATCH, n)):
                lo, hi = indptr[i], indptr[i + 1]
                path, title, n_chars, meta = docs.get(doc_ids[i], ("", "", -1, {}))
                rows.append({"row": i, "label": int(labels[i]), "chunk_id": chunk_ids[i], "doc_id": doc_ids[i],
                             "path": path, "title": title, "n_chars": n_chars, "metadata": meta,
                             "vector": block[i - start].tolist(),
                             "sparse": dict(zip(indices[lo:hi].tolist(), data[lo:hi].tolist())) or {NO_TERMS: 1.0}})
            c.insert(name, rows)
        c.flush(name)  # sealed segments: a server builds the index over them rather than over growing ones
        index = c.prepare_index_params()
        index.add_index(field_name="vector", index_type=params["index_type"], metric_type="IP",
                        params=_build_params(uri, params["index_params"]))
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP", params={})
        c.create_index(name, index)
        c.load_collection(name)
        mark_loaded(uri, name)
        step = f"switching the alias {alias} to the collection {name}"
        (c.alter_alias if target is not None else c.create_alias)(name, alias)  # last: then CURRENT moves
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
        if created:  # the generation is not published: its collection goes with its folder
            try:
                _drop(c, uri, name)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
        raise _failed(step, uri, exc) from exc
    return time.perf_counter() - t0


def _check_names(c, uri: str, alias: str, name: str) -> None:
    """BadInput naming --collection when the alias `alias` or the collection `name` of a publish cannot be
    created at `uri`: Milvus keeps aliases and collections in one namespace, so an alias may not have the
    name of an existing collection (anyone's), nor a new collection the name of an existing alias."""
    if alias in c.list_collections():
        raise BadInput(f"--collection {alias}: Milvus at {uri} already has a collection named {alias}, and the "
                       f"alias {alias} cannot have a collection's name; give another --collection (nothing was "
                       "changed)")
    if name in (c.list_aliases().get("aliases") or []):
        raise BadInput(f"--collection {alias}: the collection {name} cannot be created at {uri}, which has an "
                       f"alias of that name; give another --collection (nothing was changed)")


def check_served(gen: Path, params: dict, settings) -> None:
    """Before `rag update` writes the next generation from `gen` (the current one, its rag_dense.json
    `params`) with the [index] `settings`: BadInput when `gen` was published to a Milvus Lite file that no
    longer exists and the update would publish to the same file. The served index was deleted or moved:
    an update would quietly start a new file without the older generations' collections (`rag rollback`
    targets), so it is refused, and `rag index` (which publishes everything again) is named. Nothing is
    checked for a server (a publish that cannot reach it fails on its own) or a --uri that changes."""
    if params.get("backend") != "milvus" or getattr(settings, "backend", None) != "milvus":
        return
    if not params.get("uri") or params["uri"] != settings.uri or is_server(params["uri"]):
        return
    uri = resolve_uri(params["uri"], Path(gen).absolute().parent.parent)
    if not Path(uri).exists():
        raise BadInput(f"the current generation {gen.name} was published to the Milvus Lite file {uri}, which does "
                       "not exist (deleted or moved?); `rag update` has no served index to update: run `rag index` "
                       "to publish the current chunks and embeddings again (or put the file back); the index was not "
                       "changed")


def lite_problem(gen: Path, params: dict) -> str | None:
    """For `rag status`: why the milvus generation `gen` (its rag_dense.json / meta `dense` `params`) cannot
    be searched when its Milvus Lite file is missing or is not a folder (a search is then BadInput), else
    None (also for a server, and for a uri that cannot be resolved: opening the generation says why).
    Reads the file system only, without pymilvus."""
    uri = params.get("uri")
    if not uri or is_server(uri):
        return None
    try:
        path = Path(resolve_uri(uri, Path(gen).absolute().parent.parent))
    except BadInput:
        return None
    if path.is_dir():
        return None
    what = "is a file, not the folder Milvus Lite 3 keeps" if path.exists() else "does not exist (deleted or moved?)"
    return (f"the current generation {Path(gen).name} is served from the Milvus Lite file {path}, which {what}: "
            "every search fails; run `rag index` to publish the current chunks and embeddings again (or put the "
            "file back)")


def check_switch(gen: Path, params: dict) -> None:
    """Before CURRENT moves back to the existing milvus generation `gen` (its rag_dense.json `params`) in
    `rag rollback`: the alias switch that follows (`sync`) must be able to succeed, so nothing moves when
    it could not. Opens the client (`client`: BadInput for a missing Lite file, WorkFailed for one another
    process holds or a server that does not answer); BadInput when the generation's collection is gone
    (the Lite file was replaced, e.g. deleted and published anew by `rag index`) or was replaced by
    another project's publish (its `TOKEN` is not the generation's), or when the alias or the collection
    belongs to another project (as `sync` refuses); WorkFailed when Milvus fails to answer."""
    root = Path(gen).absolute().parent.parent
    uri, alias = resolve_uri(params["uri"], root), params["alias"]
    name = collection_of(alias, Path(gen).name)
    c = client(uri)
    fix = f"nothing was changed: {Path(gen).parent / 'CURRENT'} still points at the current generation"
    try:
        exists = name in c.list_collections()
        props = properties(c, name) if exists else {}
        target = _alias_target(c, alias)
        foreign = [(coll, other) for coll in {name if exists else None, target} - {None}
                   if (other := _foreign(c, uri, coll, owner_root(Path(gen).parent)))]
    except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
        raise _failed(f"reading the collection {name}", uri, exc) from exc
    if not exists:
        raise BadInput(f"cannot roll back to {gen.name}: its collection {name} is not in Milvus at {uri} (dropped, "
                       "or the Milvus Lite file was deleted and published anew); run `rag index` to publish the "
                       f"current chunks and embeddings again; {fix}")
    if params.get("token") and props.get(TOKEN) != params["token"]:
        raise BadInput(f"cannot roll back to {gen.name}: the collection {name} at {uri} is not this generation's "
                       f"(published again by {props.get(OWNER) or 'another project'}); run `rag index` to publish "
                       f"the current chunks and embeddings again; {fix}")
    if foreign:
        coll, other = foreign[0]
        raise BadInput(f"--collection {alias}: cannot roll back to {gen.name}: {coll} at {uri} belongs to another "
                       f"project ({other}); give this project its own --collection and run `rag index`; {fix}")


def _build_params(uri: str, index_params: dict) -> dict:
    """The dense index's build parameters (nlist, M, efConstruction) as `add_index` takes them for `uri`.
    pymilvus 3 sends them as separate key-value pairs, which a server reads; Milvus Lite (3.2) reads them
    only from one JSON entry `params` (the form earlier pymilvus sent) and otherwise builds with its own
    defaults (nlist 128, M 16, efConstruction 200), so for a Lite file they are sent in both forms."""
    if is_server(uri) or not index_params:
        return dict(index_params)
    return {**index_params, "params": dict(index_params)}


# --------------------------------------------------------------------------- aliases and pruning
def targets(index_dir: Path) -> set[tuple[str, str, str]]:
    """{(uri, alias, collection)} of the complete milvus generations in `index_dir` (each
    gen-*/dense/rag_dense.json, the collection named after the generation; a relative uri resolved
    against the project folder, `index_dir`'s parent)."""
    out = set()
    for f in Path(index_dir).glob("gen-*/dense/rag_dense.json"):
        gen = f.parent.parent
        try:
            p = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (isinstance(p, dict) and p.get("backend") == "milvus" and p.get("uri") and p.get("alias")
                and (gen / "files.json").exists()):
            try:
                uri = resolve_uri(p["uri"], Path(index_dir).absolute().parent)
            except BadInput:
                continue
            out.add((uri, p["alias"], collection_of(p["alias"], gen.name)))
    return out


def sync(index_dir: Path, current: Path | None, known: set[tuple[str, str, str]] = frozenset()) -> dict:
    """Bring Milvus in line with the index folder after a write or a rollback:

    - when the `current` generation is a milvus one, its alias points at its collection (`create_alias` or
      `alter_alias`: atomic for every client that searches the alias), and collections `ALIAS_gen_N` of that
      alias without a generation folder (a killed writer's, pruned ones) are dropped;
    - collections in `known` (`targets` before the write) whose generation is gone now (pruned by
      `index.keep`) are dropped, on any URI and alias (their alias first, when it points there), so a
      backend or an alias given up leaves nothing behind once its generations are pruned.

    Other aliases are never moved: a project touches only its current alias and the collections of its
    own generations, and drops only collections whose `OWNER` is this project (`owner_root`; one
    published before owners were recorded only under `_droppable`'s conditions); an alias is never moved
    to or from another project's collection (BadInput naming --collection, before anything changes).
    A Lite file that does not exist is never created: the current one's is BadInput (`client`), and
    pruned generations of a missing file have nothing left to drop.

    Returns {"alias": {alias: collection}, "dropped": [collection names]}. Raises BadInput / WorkFailed
    as `client` and Milvus do."""
    now = targets(index_dir)
    root = owner_root(index_dir)
    cur = next((t for t in now if current is not None and t[2] == collection_of(t[1], Path(current).name)), None)
    out: dict = {"alias": {}, "dropped": []}
    if cur is not None:
        uri, alias, name = cur
        c = client(uri)
        try:
            existing = _alias_target(c, alias)
            if existing != name:
                for coll in (name, existing):
                    if coll is not None and (other := _foreign(c, uri, coll, root)):
                        raise BadInput(f"--collection {alias}: not switching the alias {alias} at {uri} to {name}: "
                                       f"{coll} belongs to another project ({other}); give this project its own "
                                       "--collection")
                (c.alter_alias if existing is not None else c.create_alias)(name, alias)
            out["alias"][alias] = name
            mine = {t[2] for t in now if t[:2] == (uri, alias)}
            for other in c.list_collections():
                m = _GEN_COLLECTION.match(other)
                if (m and m.group("alias") == alias and other not in mine
                        and _droppable(c, uri, other, root, name)):
                    _drop(c, uri, other)
                    out["dropped"].append(other)
        except BadInput:
            raise
        except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
            raise _failed(f"switching the alias {alias} to {name}", uri, exc) from exc
    for uri, alias, name in sorted(set(known) - now):
        if not is_server(uri) and not Path(uri).exists():
            continue  # the Lite file is gone, and its collections with it
        c = client(uri)
        try:
            target = _alias_target(c, alias)
            if name in c.list_collections() and _droppable(c, uri, name, root, target):
                if target == name:
                    c.drop_alias(alias)
                _drop(c, uri, name)
                out["dropped"].append(name)
        except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
            raise _failed(f"dropping the collection {name}", uri, exc) from exc
    return out


def _drop(c, uri: str, name: str) -> None:
    c.drop_collection(name)
    forget(uri, name)


def _alias_target(c, alias: str) -> str | None:
    """The collection `alias` points at, or None when there is no such alias."""
    if alias not in (c.list_aliases().get("aliases") or []):
        return None
    return c.describe_alias(alias)["collection_name"]
