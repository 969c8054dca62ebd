"""A loaded index generation: the current generation of an index folder
(see `rag_cli.store.index_folder` for the layout) opened with its chunks and
the dense and sparse indexes asked for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from rag_cli.errors import BadInput
from rag_cli.store.index_chunks import read_index_chunks
from rag_cli.store.index_folder import current_generation, verify_generation


@dataclass
class IndexFolder:
    """A loaded index generation: `meta` (meta.json), `chunks` (pyarrow.Table
    of INDEX_COLUMNS present, plus `label`, memory-mapped), `dense` (a
    `rag_cli.index.backends.VectorIndex` of the backend meta.json names), `sparse`
    (`SparseIndex`), each None when not asked for (`open`'s `parts`), `docs`
    (pyarrow.Table of INDEX_DOC_COLUMNS, None for a generation without
    docs.parquet); `path` is the generation's folder."""

    path: Path
    meta: dict
    chunks: pa.Table
    dense: object
    sparse: object
    docs: pa.Table | None = None

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
        for attempt in range(3):
            gen = current_generation(path)
            if gen is None:
                where = f" (project folder {project_root})" if project_root is not None else ""
                raise BadInput(f"{path} has no index: run `rag index` first{where}")
            try:
                return cls._load(gen, flat=gen == path, parts=parts)
            except _Vanished:
                if attempt == 2:
                    raise BadInput(f"{gen} was removed while it was being opened; try again") from None
        raise AssertionError("unreachable")

    @classmethod
    def _load(cls, gen: Path, flat: bool, parts: tuple[str, ...]) -> "IndexFolder":
        import pyarrow.parquet as pq

        if not flat:  # the old flat layout has no files.json
            if not gen.is_dir():
                raise _Vanished
            verify_generation(gen)
        try:
            meta = json.loads((gen / "meta.json").read_text(encoding="utf-8"))
            chunks = read_index_chunks(gen)  # memory-mapped: nothing is read until a row is used
            labels = chunks.column("label").to_numpy() if "label" in chunks.column_names else None
            dense = sparse = None
            if "dense" in parts:
                from rag_cli.index.backends import load_dense

                dense = load_dense(gen / "dense", labels)
            if "sparse" in parts:
                from rag_cli.index.sparse import SparseIndex

                sparse = SparseIndex.load(gen / "sparse")
            docs = pq.ParquetFile(gen / "docs.parquet").read() if (gen / "docs.parquet").exists() else None
        except BadInput:
            raise
        except FileNotFoundError as exc:
            if not gen.exists():
                raise _Vanished from exc
            raise BadInput(f"{gen} cannot be read ({type(exc).__name__}: {exc}); "
                           "rebuild it with `rag index`") from exc
        except Exception as exc:  # hnswlib, bm25s, json and arrow each raise their own
            raise BadInput(f"{gen} cannot be read ({type(exc).__name__}: {exc}); "
                           "rebuild it with `rag index`") from exc
        return cls(gen, meta, chunks, dense, sparse, docs)


class _Vanished(Exception):
    """The generation folder disappeared while it was opened."""
