"""A loaded index generation: the current generation of an index folder
(see `rag_cli.store.index_folder` for the layout) opened with its chunks and
the dense and sparse indexes asked for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from rag_cli.errors import BadInput, RagError
from rag_cli.store.index_chunks import labels_of, read_index_chunks
from rag_cli.store.index_folder import GenerationVanished, current_generation, current_pointer, verify_generation


@dataclass
class IndexFolder:
    """A loaded index generation: `meta` (meta.json), `chunks` (pyarrow.Table
    of INDEX_COLUMNS present, plus `label`, memory-mapped), `dense` (a
    `rag_cli.index.backends.Backend` of the backend meta.json names), `sparse`
    (`SparseIndex`, or the backend's retriever around it: `Backend.open_sparse`), each None when not
    asked for (`open`'s `parts`), `docs`
    (pyarrow.Table of INDEX_DOC_COLUMNS, None for a generation without
    docs.parquet); `path` is the generation's folder; `key` says which
    generation this is in a way that never repeats: (folder, sha256 of its
    files.json), or (folder, mtime of meta.json) for the old flat layout."""

    path: Path
    meta: dict
    chunks: pa.Table
    dense: object
    sparse: object
    docs: pa.Table | None = None
    key: tuple | None = None

    @staticmethod
    def exists(path: Path) -> bool:
        """Whether the index folder `path` has a current generation (or a flat index)."""
        return current_generation(path) is not None

    @classmethod
    def open(cls, path: Path, project_root: Path | None = None,
             parts: tuple[str, ...] = ("dense", "sparse")) -> "IndexFolder":
        """Load the current generation of the index folder `path` (CURRENT is
        read once): its chunks and meta, and the indexes named in `parts`
        ("dense", "sparse"; a dense-only search never imports bm25s).

        Raises BadInput when there is no index (run `rag index`), a file does
        not match files.json (its size, or its sha256 for files of at most
        VERIFY_SHA256_MAX_BYTES), or a file cannot be read (naming the file).
        A generation removed by a writer between reading CURRENT and opening
        it (a reader slower than `keep` writes) is retried with the new CURRENT.
        """
        path = Path(path)
        before = None
        for attempt in range(3):
            ptr = current_pointer(path)  # BadInput naming CURRENT when it is damaged
            gen = ptr.path if ptr is not None else current_generation(path)
            if gen is None:
                where = f" (project folder {project_root})" if project_root is not None else ""
                raise BadInput(f"{path} has no index: run `rag index` first{where}")
            if ptr is not None and before is not None and ptr.raw == before.raw:
                # CURRENT still names it: no writer removed it (they remove only generations CURRENT left)
                raise BadInput(f"{path / 'CURRENT'} names {gen.name}, which is not a complete generation of this "
                               "index (the folder or its files.json is missing); write a new generation with "
                               "`rag index`")
            try:
                return cls._load(gen, flat=ptr is None, parts=parts,
                                 files_sha256=ptr.files_sha256 if ptr is not None else None)
            except GenerationVanished:
                before = ptr
                if attempt == 2:
                    raise BadInput(f"{gen} was removed while it was being opened; try again") from None
        raise AssertionError("unreachable")

    @classmethod
    def _load(cls, gen: Path, flat: bool, parts: tuple[str, ...], files_sha256: str | None = None) -> "IndexFolder":
        import pyarrow.parquet as pq

        if not flat:  # the old flat layout has no files.json
            if not gen.is_dir():
                raise GenerationVanished(gen)
            key = (gen, verify_generation(gen, files_sha256=files_sha256))
        part = "meta.json"  # the part being read, named when it cannot be
        try:
            if flat:
                key = (gen, (gen / "meta.json").stat().st_mtime_ns)
            meta = json.loads((gen / "meta.json").read_text(encoding="utf-8"))
            part = "chunks.arrow"
            chunks = read_index_chunks(gen)  # memory-mapped: nothing is read until a row is used
            labels = labels_of(chunks)
            dense = sparse = None
            if "dense" in parts:
                from rag_cli.index.backends import load_dense

                part = "dense"
                dense = load_dense(gen / "dense", labels)  # of the backend its rag_dense.json names
            if "sparse" in parts:
                from rag_cli.index.sparse import SparseIndex

                part = "sparse"
                sparse = SparseIndex.load(gen / "sparse")
                from rag_cli.index.backends import backend_for

                sparse = backend_for(meta.get("dense", {})).open_sparse(sparse, meta.get("dense", {}), gen)
            part = "docs.parquet"
            docs = pq.ParquetFile(gen / "docs.parquet").read() if (gen / "docs.parquet").exists() else None
        except BadInput:
            raise
        except Exception as exc:  # hnswlib, bm25s, json and arrow each raise their own
            if not gen.exists():  # a writer removed it while it was read: read CURRENT again
                raise GenerationVanished(gen) from exc
            # our own errors say what is wrong in words; a library's is named by its class
            why = str(exc) if isinstance(exc, RagError) else f"{type(exc).__name__}: {exc}"
            raise BadInput(f"{gen} cannot be read ({part}: {why}); rebuild it with `rag index`") from exc
        return cls(gen, meta, chunks, dense, sparse, docs, key)
