"""index/: the dense (hnswlib) and sparse (bm25s) indexes and what they were built from.

    index/
      meta.json        model_fingerprint, passage_fingerprint, model_name, dim,
                       n_chunks, dense (M, ef_construction, ef, space, n), sparse params
      chunks.parquet   the chunk columns search and ask read (`INDEX_COLUMNS`)
      dense/           hnsw.bin + rag_dense.json
      sparse/          the bm25s index + rag_sparse.json

The folder is self-contained, so searching never depends on files that may
have changed since it was built. It is written into a temporary folder and
renamed into place (`atomic.atomic_dir`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from rag_cli import atomic
from rag_cli.errors import BadInput

#: Columns of chunks.parquet kept in index/chunks.parquet; `context` is the
#: text `rag ask` gives the generator for `sentence` and `parent-child` chunks.
INDEX_COLUMNS = ["chunk_id", "doc_id", "text", "embed_text", "title_path", "parent_id", "context_start",
                 "context_end", "context"]


@dataclass
class IndexFolder:
    """A loaded index folder: `meta` (meta.json), `chunks` (pyarrow.Table of
    INDEX_COLUMNS present), `dense` (`DenseIndex`), `sparse` (`SparseIndex`)."""

    path: Path
    meta: dict
    chunks: pa.Table
    dense: object
    sparse: object

    @staticmethod
    def exists(path: Path) -> bool:
        return (Path(path) / "meta.json").exists()

    @classmethod
    def open(cls, path: Path, project_root: Path | None = None) -> "IndexFolder":
        """Load index/ at `path`.

        Raises BadInput when there is no index (run `rag index`) or a file of
        it cannot be read (naming the folder and the error).
        """
        import pyarrow.parquet as pq

        from rag_cli.index.dense import DenseIndex
        from rag_cli.index.sparse import SparseIndex

        path = Path(path)
        if not cls.exists(path):
            where = f" (project folder {project_root})" if project_root is not None else ""
            raise BadInput(f"{path} has no index: run `rag index` first{where}")
        try:
            meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
            chunks = pq.read_table(path / "chunks.parquet")
            dense, sparse = DenseIndex.load(path / "dense"), SparseIndex.load(path / "sparse")
        except Exception as exc:  # hnswlib, bm25s, json and arrow each raise their own
            raise BadInput(f"{path} cannot be read ({type(exc).__name__}: {exc}); "
                           "rebuild it with `rag index`") from exc
        return cls(path, meta, chunks, dense, sparse)


def write_index_folder(path: Path, *, dense, sparse, chunks: pa.Table, meta: dict) -> None:
    """Write the index folder atomically: `dense` (DenseIndex), `sparse`
    (SparseIndex), `chunks` (the INDEX_COLUMNS of chunks.parquet), `meta`
    (meta.json). On error the previous folder is left as it was."""
    import pyarrow.parquet as pq

    with atomic.atomic_dir(path) as tmp:
        dense.save(tmp / "dense")
        sparse.save(tmp / "sparse")
        pq.write_table(chunks, tmp / "chunks.parquet", compression="zstd")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
