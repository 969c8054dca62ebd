"""Publishing milvus generations and their lifecycle in Milvus: the publish, rollback checks, pruning.

This module owns what happens to a generation's collection `ALIAS_gen_NNNNNN` (`collection_of`) and to
the alias `ALIAS` (`index.collection`); the index itself (the vectors, the dense and sparse searches, the
filter, what the collection's rows hold and why their inner products are BM25 scores) is
`rag_cli.index.milvus`, and reaching Milvus is `rag_cli.index.milvus_connection`.

Publish order: collection -> alias -> CURRENT. `publish_generation` (behind `MilvusIndex.publish`,
which `write_index_folder` calls with the complete generation folder before it becomes current)
creates the collection, inserts every chunk's row, builds and loads its indexes (`_build_params`), and
switches the alias to it last; CURRENT moves only after that. A failure at any step (the alias's
included) drops the new collection and leaves CURRENT where it was.

Rollback checks: `check_switch` (before `rag rollback` moves CURRENT), `check_served` (before `rag
update` writes), `lite_problem` (what `rag status` says); pruning: `sync` (after every write and
rollback, with `targets` read before the write).

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
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.index.dense_common import load_vectors
from rag_cli.index.milvus_connection import (
    OWNER, TOKEN, client, collection_of, failed, forget, import_pymilvus, is_server, mark_loaded, properties,
    resolve_uri)

#: Rows per insert request (384-d float32: 3 MiB of vectors, well under Milvus's 64 MiB per request).
INSERT_BATCH = 2000
#: The term id of a chunk without BM25 terms (Milvus refuses an empty sparse vector): no query holds it
#: (term ids are below the vocabulary's size), so the chunk is never a sparse hit, as locally.
NO_TERMS = 2**32 - 2
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
    """`rag_cli.index.milvus.MilvusIndex.publish` (see there) of the generation folder `gen` with its
    rag_dense.json `params`. Returns the seconds it took."""
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
        raise failed(step, uri, exc) from exc
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
        raise failed(f"reading the collection {name}", uri, exc) from exc
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
            raise failed(f"switching the alias {alias} to {name}", uri, exc) from exc
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
            raise failed(f"dropping the collection {name}", uri, exc) from exc
    return out


def _drop(c, uri: str, name: str) -> None:
    c.drop_collection(name)
    forget(uri, name)


def _alias_target(c, alias: str) -> str | None:
    """The collection `alias` points at, or None when there is no such alias."""
    if alias not in (c.list_aliases().get("aliases") or []):
        return None
    return c.describe_alias(alias)["collection_name"]
