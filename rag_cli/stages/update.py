"""`rag update`: bring the chunks and the index up to date with the remembered sources.

Two steps, each called by `Project.update` under one project lock, with
`rag embed` between them (the vector cache embeds only texts whose sha256
is new):

1. `update_chunks`: rescan the sources. A file whose mtime equals the one in
   docs.parquet, and that was not modified within `RACY_SECONDS` before the
   scan that read it (an edit in the same timestamp tick would keep the
   mtime), is not read; another is read and each of its documents
   compared by sha256 (of the file's bytes; of the JSON line for a BEIR
   corpus). The mtime stored is the one taken before the file was read
   (`rag_cli.loaders.sources.read_stable`), so an edit during the read is
   never recorded as read. Chunks of changed and removed documents are dropped, new and
   changed documents are chunked, and docs.parquet / chunks.parquet are
   written in the order a fresh `rag chunk` of the same sources gives (so the
   tables, and BM25 over them, equal those of a fresh build).
2. `update_index`: a new index generation from the current one. The HNSW
   graph is changed in place: labels of chunks that are gone or whose
   embedded text changed are marked deleted (`mark_deleted`), new chunks are
   added under new labels (`add_items`, the graph resized as needed); when
   the deleted labels exceed `COMPACT_FRACTION` of the graph it is rebuilt
   from scratch. BM25 is rebuilt over all chunks (it is fast and then equals
   a fresh build exactly). Another embedder, another dense backend, or
   other parameters of its structure (HNSW M / ef_construction; faiss index
   type, nlist, pq_m) than the current generation's force a full build;
   each backend's `update` says how it adds and deletes
   (`rag_cli.index.backends`). A milvus generation is published whole to
   a new collection and the alias switched to it (why not upserts into the
   served collection: `rag_cli.index.milvus_publish`).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from rag_cli.chunking import chunk_with_parents
from rag_cli.chunking.setup import chunk_options, chunk_settings
from rag_cli.config import ChunkConfig, IndexConfig, ModelConfig
from rag_cli.index.backends import (backend_for, check_backend, rebuild_reason, same_search_params, serving_targets,
                                    sync_serving)
from rag_cli.index.build import build_full, index_docs, index_meta, index_texts, read_inputs, record_index, with_labels
from rag_cli.index.sparse import SparseIndex
from rag_cli.loaders import load_sources
from rag_cli.loaders.sources import no_documents, without_chunks
from rag_cli.loaders.document import Document
from rag_cli.progress import Progress
from rag_cli.store.chunks import chunks_table, read_chunks, write_tables
from rag_cli.store.docs import docs_table, read_docs
from rag_cli.index.generation import IndexFolder
from rag_cli.store.index_chunks import labels_of
from rag_cli.store.index_folder import clean_index_dir, write_index_folder

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder

#: The HNSW graph is rebuilt when more than this share of its labels is deleted.
COMPACT_FRACTION = 0.2

#: A file modified less than this many seconds before the scan that read it
#: is read again by the next update even when its mtime is unchanged: an edit
#: within the same tick of the file system's clock (up to 2 s on FAT) keeps
#: the mtime the first scan recorded.
RACY_SECONDS = 2.0


def _old_docs(project: "ProjectFolder") -> dict[str, list[Document]]:
    """docs.parquet as Documents without text, grouped by file path (in table order)."""
    by_path: dict[str, list[Document]] = defaultdict(list)
    for r in read_docs(project.docs_path).to_pylist():
        by_path[r["path"]].append(Document(
            doc_id=r["doc_id"], path=r["path"], sha256=r["sha256"], mtime=r["mtime"], n_chars=r["n_chars"],
            title=r["title"], text="", metadata=json.loads(r["metadata"] or "{}")))
    return by_path


def update_chunks(project: "ProjectFolder", sources: list[str], *, fmt: str, params: ChunkConfig, model: ModelConfig,
                  full: bool = False, progress: Progress | None = None) -> dict:
    """Step 1 (see the module doc). `full` rechunks every document (the
    chunk settings changed). Writes docs.parquet, chunks.parquet (and
    parents.parquet for parent-child) atomically, and the `chunk` entry of
    manifest.json. Returns the counts: docs_added, docs_changed,
    docs_removed, docs_unchanged, chunks_added, chunks_removed, n_docs,
    n_chunks, skipped, seconds. Raises BadInput as `rag chunk` does."""
    t0 = time.perf_counter()
    scanned = time.time()
    options = chunk_options(params, model)
    exists = project.docs_path.exists() and project.chunks_path.exists()
    have_old = not full and exists
    old_by_path = _old_docs(project) if exists else {}
    old_sha = {d.doc_id: d.sha256 for docs in old_by_path.values() for d in docs}
    reused: set[str] = set()
    last_scan = project.manifest().get("chunk", {}).get("scanned") if exists else None
    clean_before = last_scan - RACY_SECONDS if isinstance(last_scan, (int, float)) else float("inf")

    def known(path: str, mtime: float) -> list[Document] | None:
        docs = old_by_path.get(path)
        if docs and mtime < clean_before and all(d.mtime == mtime for d in docs):
            reused.update(d.doc_id for d in docs)
            return docs
        return None

    loaded = load_sources(sources, fmt=fmt, known=known if have_old else None, exclude=[project.root])
    docs = loaded.documents
    same = {d.doc_id for d in docs if d.doc_id in reused or old_sha.get(d.doc_id) == d.sha256} if have_old else set()
    todo = [d for d in docs if d.doc_id not in same]
    new_chunks, new_parents = chunk_with_parents(
        todo, progress=(lambda done, n: progress("chunking", done, n)) if progress else None, **options)
    chunked = {c.doc_id for c in new_chunks}
    empty = [d for d in todo if d.doc_id not in chunked]  # headings only, a title only: skipped, as `rag chunk` does
    if empty:
        gone = {d.doc_id for d in empty}
        loaded.skipped.extend(without_chunks(d) for d in empty)
        docs, todo = [d for d in docs if d.doc_id not in gone], [d for d in todo if d.doc_id not in gone]
        if not docs:
            raise no_documents(sources, loaded.skipped)
    parent_child = params.strategy == "parent-child"
    old_chunks = read_chunks(project.chunks_path) if have_old else None
    chunks, n_removed = _merge(old_chunks, chunks_table(new_chunks), [d.doc_id for d in docs], same)
    if not have_old and exists:
        n_removed = read_chunks(project.chunks_path, columns=["chunk_id"], required=["chunk_id"]).num_rows
    tables = {project.docs_path: docs_table(docs), project.chunks_path: chunks}
    if parent_child:
        old_parents = read_chunks(project.parents_path) if have_old and project.parents_path.exists() else None
        tables[project.parents_path] = _merge(old_parents, chunks_table(new_parents), [d.doc_id for d in docs],
                                              same)[0]
    write_tables(tables, remove=[] if parent_child else [project.parents_path])
    counts = {"docs_added": sum(d.doc_id not in old_sha for d in todo),
              "docs_changed": sum(d.doc_id in old_sha for d in todo),
              "docs_removed": len(set(old_sha) - {d.doc_id for d in docs}),
              "docs_unchanged": len(same), "chunks_added": len(new_chunks), "chunks_removed": n_removed,
              "n_docs": len(docs), "n_chunks": chunks.num_rows,
              "skipped": [{"path": s.path, "reason": s.reason} for s in loaded.skipped]}
    project.record("chunk", params=chunk_settings(params, model, fmt), inputs={"sources": list(sources)},
                   outputs=[p.name for p in tables],
                   rows={"docs": len(docs), "chunks": chunks.num_rows,
                         "parents": tables[project.parents_path].num_rows if parent_child else 0},
                   skipped=counts["skipped"], update={k: v for k, v in counts.items() if k != "skipped"},
                   scanned=scanned)
    return {**counts, "seconds": time.perf_counter() - t0}


#: The counts of `update_chunks` that add up over runs.
_ADDING = ("docs_added", "docs_changed", "docs_removed", "chunks_added", "chunks_removed")


def pending_counts(project: "ProjectFolder") -> dict | None:
    """The document and chunk counts of an update whose chunks never reached
    an index (it was interrupted after `update_chunks` wrote chunks.parquet):
    the `update` counts of manifest.json's chunk entry when the index entry
    was built from another chunks.parquet; else None."""
    from rag_cli.hashing import sha256_file

    manifest = project.manifest()
    counts = manifest.get("chunk", {}).get("update")
    if not counts or not project.chunks_path.exists():
        return None
    built = manifest.get("index", {}).get("inputs", {}).get("chunks.parquet")
    return None if built == sha256_file(project.chunks_path) else counts


def add_pending(counts: dict, pending: dict | None) -> dict:
    """`counts` of this `update_chunks` run plus those of an interrupted run
    before it (`pending_counts`), so the summary covers every change since the
    last index: added, changed and removed sum; unchanged drops by the
    documents that run added or changed."""
    if not pending:
        return counts
    out = {**counts, **{k: counts[k] + pending.get(k, 0) for k in _ADDING}}
    out["docs_unchanged"] = max(0, counts["docs_unchanged"] - pending.get("docs_added", 0)
                                - pending.get("docs_changed", 0))
    return out


def _merge(old: pa.Table | None, new: pa.Table, order: list[str], keep: set[str]) -> tuple[pa.Table, int]:
    """The chunks of the documents `order` (doc_ids, in that order): from
    `old` for the doc_ids in `keep`, from `new` for the others. Returns
    (table, number of old rows dropped)."""
    if old is None or old.num_rows == 0:
        return new, 0 if old is None else old.num_rows
    both = pa.concat_tables([old, new], promote_options="default") if new.num_rows else old
    rows: dict[str, list[int]] = defaultdict(list)
    old_ids = old.column("doc_id").to_pylist()
    for i, doc_id in enumerate(old_ids):
        if doc_id in keep:
            rows[doc_id].append(i)
    for i, doc_id in enumerate(new.column("doc_id").to_pylist()):
        rows[doc_id].append(old.num_rows + i)
    take = [i for doc_id in order for i in rows.get(doc_id, ())]
    n_kept = sum(len(rows[d]) for d in keep if d in rows)
    table = both.take(pa.array(take, type=pa.int64()))
    if new.num_rows == 0 or table.schema != new.schema:  # the columns of a fresh build, in its order
        table = table.select([c for c in new.schema.names if c in table.column_names] if new.num_rows else
                             table.column_names)
    return table, old.num_rows - n_kept


def check_served_index(project: "ProjectFolder", params: IndexConfig) -> None:
    """Before an update changes anything: BadInput when the current generation is served from a copy that
    is gone (a deleted Milvus Lite file: `Backend.verify`), so `rag update` stops
    before rechunking. Nothing when there is no index yet, or its meta.json cannot be read (opening the
    generation says why later)."""
    from rag_cli.store.index_folder import current_generation

    gen = current_generation(project.index_dir)
    if gen is None:
        return
    try:
        dense = json.loads((gen / "meta.json").read_text(encoding="utf-8"))["dense"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if isinstance(dense, dict):
        backend_for(dense).verify(gen, dense, backend_for(params).concrete(params, project.root))


def update_index(project: "ProjectFolder", params: IndexConfig, *, threads: int = 0, keep: int = 2,
                 progress: Progress | None = None) -> dict:
    """Step 2 (see the module doc): write a new index generation from the
    current one and chunks.parquet + embeddings.parquet, and make it current.
    Returns: n_chunks, dim, vectors_added, vectors_deleted, full (why a full
    build was done, or None), compacted (bool), generation, seconds."""
    t0 = time.perf_counter()
    check_backend(params)
    params = backend_for(params).concrete(params, project.root)
    known = serving_targets(project.index_dir)
    step = (lambda done: progress("indexing", done, 3)) if progress else (lambda done: None)
    chunks, vectors, emb = read_inputs(project.require(project.chunks_path, "chunk"),
                                       project.require(project.embeddings_path, "embed"))
    step(1)
    full = None
    cur = IndexFolder.open(project.index_dir) if IndexFolder.exists(project.index_dir) else None
    if cur is not None:
        backend_for(cur.meta["dense"]).verify(cur.path, cur.meta["dense"], params)  # a deleted Milvus Lite file: `rag index`, not an update
    if cur is None:
        full = "there is no index yet"
    elif cur.meta["model_fingerprint"] != emb.fingerprint:
        full = f"the embedder changed ({cur.meta['model_fingerprint']} -> {emb.fingerprint})"
    elif (why := rebuild_reason(cur.meta["dense"], params)) is not None:  # another backend or structure
        full = why
    added = deleted = 0
    compacted = False
    if full is None:
        dense = cur.dense
        old_labels = labels_of(cur.chunks)
        old_labels = np.arange(cur.chunks.num_rows) if old_labels is None else old_labels
        old_key = {(cid, t): int(label) for cid, t, label in
                   zip(cur.chunks.column("chunk_id").to_pylist(), index_texts(cur.chunks), old_labels)}
        new_keys = list(zip(chunks.column("chunk_id").to_pylist(), index_texts(chunks)))
        next_label = int(dense.params.get("next_label", len(old_labels)))
        labels = np.empty(len(new_keys), dtype=np.int64)
        add_rows = []
        for row, key in enumerate(new_keys):
            label = old_key.pop(key, None)
            if label is None:
                label, next_label = next_label, next_label + 1
                add_rows.append(row)
            labels[row] = label
        gone = sorted(old_key.values())
        added, deleted = len(add_rows), len(gone)
        total_deleted = dense.params.get("n_deleted", 0) + deleted
        if total_deleted > COMPACT_FRACTION * (len(new_keys) + total_deleted):
            full, compacted = "compaction: too many deleted labels in the HNSW graph", True
        elif not add_rows and not gone and _same_params(cur, params):
            chunks, sparse = with_labels(chunks, labels), cur.sparse
        else:
            dense.update(labels, gone, vectors[add_rows], labels[add_rows], vectors=vectors, settings=params,
                         threads=threads)
            step(2)
            sparse = SparseIndex.build(index_texts(chunks), k1=params.bm25_k1, b=params.bm25_b,
                                       method=params.bm25_method)
            step(3)
            chunks = with_labels(chunks, labels)
    docs = index_docs(project.docs_path)
    unchanged = (full is None and added == deleted == 0 and cur.chunks.equals(chunks) and _same_params(cur, params)
                 and (cur.docs is None if docs is None else cur.docs is not None and cur.docs.equals(docs)))
    if unchanged:  # nothing changed: no new generation, but what a killed writer left is removed
        clean_index_dir(project.index_dir, keep)
        sync_serving(project.index_dir, known)
        counts = {"n_chunks": chunks.num_rows, "vectors_added": 0, "vectors_deleted": 0, "full": None,
                  "compacted": False}
        record_index(project, params, emb, cur.path.name, counts, time.perf_counter() - t0)
        return {**counts, "unchanged": True, "dim": cur.meta["dim"], "generation": cur.path.name,
                "seconds": time.perf_counter() - t0, "fingerprint": emb.fingerprint}
    if full is not None:
        dense, sparse, chunks = build_full(chunks, vectors, params, threads, step)
    meta = index_meta(emb, vectors, dense, sparse, chunks.num_rows)
    counts = {"n_chunks": chunks.num_rows, "vectors_added": added, "vectors_deleted": deleted,
              "full": full, "compacted": compacted}
    gen = write_index_folder(project.index_dir, dense=dense, sparse=sparse, chunks=chunks, meta=meta, keep=keep,
                             command="update", counts=counts, docs=docs, publish=dense.publish)
    sync_serving(project.index_dir, known)
    seconds = time.perf_counter() - t0
    record_index(project, params, emb, gen.name, counts, seconds)
    return {**counts, "unchanged": False, "dim": meta["dim"], "generation": gen.name, "seconds": seconds,
            "fingerprint": emb.fingerprint}


def _same_params(cur: IndexFolder, params: IndexConfig) -> bool:
    """Whether the current generation was built with `params`' dense search-time settings (ef; faiss
    nprobe, rerank) and BM25 settings."""
    sp = cur.meta["sparse"]
    return same_search_params(cur.meta["dense"], params) and (sp["k1"], sp["b"], sp["method"]) == (
        params.bm25_k1, params.bm25_b, params.bm25_method)
