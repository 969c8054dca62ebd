"""`rag embed`: chunks.parquet -> embeddings.parquet with an ONNX bi-encoder.

Streaming, resumable, incremental:

- Vectors are cached by (model fingerprint, sha256 of the embedded text) in
  `PROJECT/cache/vectors/<fingerprint>/part-*.parquet` (columns
  `text_sha256`, `vector`). A part is written (atomically) every
  `part_batches` onnxruntime batches, so a run that is killed keeps what it
  finished and the next run embeds only the rest; a rerun after the chunks
  changed embeds only new or changed texts. An older `embeddings.parquet` of
  the same model also serves as a source of vectors.
- Chunks are read, tokenized and embedded `window` rows at a time, and
  `embeddings.parquet` is assembled window by window with a
  `pyarrow.parquet.ParquetWriter`, so the texts, token ids and vectors in
  memory are bounded by the window, not the corpus. What grows with the corpus
  is one text hash and one cache location per chunk (about 200 bytes).
- Resuming gives the same batches: inside a window, the texts to embed are
  sorted by length and cut by the token budget (`plan_batches`), and what a
  killed run left undone is a suffix of that plan, cut the same way again. So
  the float32 vectors of a resumed run are bit-identical to those of one
  uninterrupted run (int8 ones too: same batches, same activation scales).

The model fingerprint, name and dimension are in the file's schema metadata.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.parquet_read import iter_parquet_batches, open_parquet, read_parquet, rerun
from rag_cli.project import Project, sha256_file, sha256_text

#: Chunk rows read, tokenized, embedded and written at a time.
WINDOW = 4096
#: A cache part is written after this many onnxruntime batches (and at the end of each window).
PART_BATCHES = 16


@dataclass
class Embeddings:
    """The content of `embeddings.parquet`: `vectors` is (n, d) float32."""

    chunk_ids: list[str]
    text_sha256: list[str]
    vectors: np.ndarray
    fingerprint: str
    model_name: str
    dim: int
    passage_fingerprint: str = ""  # the model's fingerprint without its query graph (`ModelFolder.passage_fingerprint`)


def read_embeddings(path: Path) -> Embeddings:
    """Read `embeddings.parquet`. Raises BadInput if it lacks the contract's columns or metadata."""
    table = read_parquet(path, rerun("embed"))
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if "chunk_id" not in table.column_names or "vector" not in table.column_names or "model_fingerprint" not in meta:
        raise BadInput(f"{path}: not an embeddings file of rag-cli (needs chunk_id, vector and a model_fingerprint)")
    dim = int(meta.get("dim", 0))
    vectors = _to_matrix(table.column("vector"), dim) if dim else np.zeros((0, 0), np.float32)
    sha = table.column("text_sha256").to_pylist() if "text_sha256" in table.column_names else [""] * table.num_rows
    return Embeddings(table.column("chunk_id").to_pylist(), sha, vectors, meta["model_fingerprint"],
                      meta.get("model_name", ""), dim, meta.get("passage_fingerprint", meta["model_fingerprint"]))


def embeddings_schema(fingerprint: str, model_name: str, dim: int, extra_meta: dict | None = None) -> pa.Schema:
    """Schema of `embeddings.parquet`: chunk_id string, text_sha256 string,
    vector fixed_size_list<float32>[dim]; metadata model_fingerprint, model_name, dim."""
    meta = {"model_fingerprint": fingerprint, "model_name": model_name, "dim": str(dim)}
    meta.update({k: str(v) for k, v in (extra_meta or {}).items()})
    return pa.schema([("chunk_id", pa.string()), ("text_sha256", pa.string()),
                      ("vector", pa.list_(pa.float32(), dim))], metadata=meta)


def _vector_array(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """(n, d) float32 -> Arrow fixed_size_list<float32>[d]."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), vectors.shape[1])


def _to_matrix(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    """Arrow list<float32> column of n rows -> (n, dim) float32."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(len(column), dim)


class VectorCache:
    """Vectors of one model, by the sha256 of the embedded text, in Parquet part files.

    Sources are the part files of `folder` (`part-*.parquet`: `text_sha256`,
    `vector`; one row group each) plus, optionally, an older
    `embeddings.parquet` of the same model. Only the hashes are held in
    memory (hash -> source, row group, row); vectors are read row group by
    row group when gathered.

    Args:
        folder: `PROJECT/cache/vectors/<fingerprint>`; created on the first write.
        dim: vector size; part files of another size are ignored.
    """

    def __init__(self, folder: Path, dim: int):
        self.folder, self.dim = Path(folder), int(dim)
        self._files: list[Path] = []  # opened when read: a big cache has more parts than a process may open
        self._where: dict[str, tuple[int, int, int]] = {}
        self._loaded: tuple[tuple[int, int], np.ndarray] | None = None  # the last row group read
        self._seq = 0
        if self.folder.is_dir():
            for part in sorted(self.folder.glob("part-*.parquet")):
                self.add_source(part, remove_if_unreadable=True)

    def __contains__(self, sha: str) -> bool:
        return sha in self._where

    def __len__(self) -> int:
        return len(self._where)

    def add_source(self, path: Path, remove_if_unreadable: bool = False) -> str | None:
        """Index the `text_sha256` column of a Parquet file with `text_sha256`
        and `vector` columns. Hashes already known keep their first source.

        Returns:
            None, or why the file was skipped (unreadable, lacks the columns,
            another vector size); an unreadable part is deleted when
            `remove_if_unreadable`.
        """
        src = len(self._files)
        found: dict[str, tuple[int, int, int]] = {}
        try:
            with pq.ParquetFile(path) as pf:
                names = pf.schema_arrow.names
                vec_type = pf.schema_arrow.field("vector").type if "vector" in names else None
                if "text_sha256" not in names or getattr(vec_type, "list_size", None) != self.dim:
                    return f"{path}: no text_sha256 column or no vectors of size {self.dim}"
                for rg in range(pf.num_row_groups):
                    shas = pf.read_row_group(rg, columns=["text_sha256"]).column(0).to_pylist()
                    for row, sha in enumerate(shas):
                        if sha and sha not in self._where:
                            found.setdefault(sha, (src, rg, row))
        except Exception as exc:  # pyarrow raises several types for a damaged file
            if remove_if_unreadable:
                Path(path).unlink(missing_ok=True)
            return f"{path}: cannot be read as Parquet ({exc})"
        self._files.append(Path(path))
        self._where.update(found)
        return None

    def write_part(self, shas: list[str], vectors: np.ndarray) -> Path:
        """Write one part file atomically and index it.

        Args:
            shas: n text hashes.
            vectors: (n, dim) float32.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        path = self.folder / f"part-{time.time_ns():020d}-{os.getpid()}-{self._seq:06d}.parquet"
        table = pa.Table.from_arrays([pa.array(shas, pa.string()), _vector_array(vectors)],
                                     names=["text_sha256", "vector"])
        atomic.write_parquet(path, table)
        self.add_source(path)
        return path

    def gather(self, shas: list[str]) -> np.ndarray:
        """(n, dim) float32 vectors of `shas`, each of which must be cached.

        Raises:
            KeyError: a hash is not cached.
        """
        out = np.empty((len(shas), self.dim), dtype=np.float32)
        locs = [self._where[s] for s in shas]
        order = sorted(range(len(shas)), key=lambda i: locs[i])  # read each row group once
        for i in order:
            src, rg, row = locs[i]
            if self._loaded is None or self._loaded[0] != (src, rg):
                with pq.ParquetFile(self._files[src]) as pf:
                    col = pf.read_row_group(rg, columns=["vector"]).column(0)
                self._loaded = ((src, rg), _to_matrix(col, self.dim))
            out[i] = self._loaded[1][row]
        return out


def vector_cache_dir(project: Project, fingerprint: str) -> Path:
    """`PROJECT/cache/vectors/<fingerprint>`: the vector cache of one model."""
    return project.root / "cache" / "vectors" / fingerprint


def _windows(path: Path, columns: list[str], window: int) -> Iterator[pa.RecordBatch]:
    yield from iter_parquet_batches(path, rerun("chunk"), columns, window)


def embed_chunks(project: Project, encoder, progress=None, *, batch_tokens: int | None = None,
                 window: int = WINDOW, part_batches: int = PART_BATCHES) -> dict:
    """Embed every chunk of `chunks.parquet` that has no cached vector for this model,
    then write `embeddings.parquet` (see the module doc).

    Args:
        project: the project folder.
        encoder: a `rag_cli.models.encoder.BiEncoder`.
        progress: progress(done, total), in texts to embed, after each batch.
        batch_tokens: padded tokens per onnxruntime batch (default: the encoder's default).
        window: chunk rows held in memory at a time.
        part_batches: batches per cache part file.

    Returns:
        Summary: n_chunks, n_embedded (chunks whose vector was computed now;
        identical texts are embedded once), n_reused, n_truncated, max_length,
        rebuilt_unreadable (why an old embeddings.parquet could not be read,
        or None), seconds, fingerprint.

    Raises:
        BadInput: `chunks.parquet` is missing, unreadable or lacks chunk_id/text.
    """
    t0 = time.perf_counter()
    chunks_path = project.require(project.chunks_path, "chunk")
    with open_parquet(chunks_path, rerun("chunk"), required=["chunk_id", "text"]) as pf:
        names = pf.schema_arrow.names
    col = "embed_text" if "embed_text" in names else "text"
    folder = encoder.folder
    fingerprint = folder.fingerprint
    encoder.check_query_graph()  # a broken query graph fails now, not at the first search
    dim = encoder.dim
    cache = VectorCache(vector_cache_dir(project, folder.passage_fingerprint), dim)

    unreadable = None
    if project.embeddings_path.exists():
        try:
            meta = pq.read_schema(project.embeddings_path).metadata or {}
        except Exception as exc:  # a damaged file is rebuilt, not a dead end
            unreadable = f"{project.embeddings_path}: cannot be read as Parquet ({exc}); run `rag embed` again"
        else:
            if meta.get(b"model_fingerprint", b"").decode() == fingerprint:
                unreadable = cache.add_source(project.embeddings_path)

    # the text hashes (the only per-chunk state kept for the whole corpus)
    shas: list[str] = []
    new: set[str] = set()
    for batch in _windows(chunks_path, [col], window):
        for text in batch.column(0).to_pylist():
            sha = sha256_text(text)
            shas.append(sha)
            if sha not in cache:
                new.add(sha)
    n_embedded = sum(s in new for s in shas)
    total, done, n_truncated = len(new), 0, 0
    kwargs = {} if batch_tokens is None else {"batch_tokens": batch_tokens}

    if new:
        row = 0
        for batch in _windows(chunks_path, [col], window):
            texts = batch.column(0).to_pylist()
            todo: dict[str, str] = {}
            for sha, text in zip(shas[row : row + len(texts)], texts):
                if sha not in cache and sha not in todo:
                    todo[sha] = text
            row += len(texts)
            if not todo:
                continue
            todo_shas, todo_texts = list(todo), list(todo.values())
            got_idx: list[np.ndarray] = []
            got_vec: list[np.ndarray] = []

            def flush() -> None:
                if got_idx:
                    idx = np.concatenate(got_idx)
                    cache.write_part([todo_shas[i] for i in idx], np.concatenate(got_vec))
                    got_idx.clear()
                    got_vec.clear()

            for idx, vectors in encoder.iter_encode(todo_texts, folder.passage_prefix, **kwargs):
                got_idx.append(idx)
                got_vec.append(vectors)
                done += len(idx)
                if len(got_idx) >= part_batches:
                    flush()
                if progress is not None:
                    progress(done, total)
            flush()
            n_truncated += int(encoder.n_truncated)

    schema = embeddings_schema(fingerprint, folder.name, dim, {"passage_fingerprint": folder.passage_fingerprint})
    with atomic.atomic_path(project.embeddings_path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            row = 0
            for batch in _windows(chunks_path, ["chunk_id"], window):
                n = batch.num_rows
                part = shas[row : row + n]
                writer.write_table(pa.Table.from_arrays(
                    [batch.column(0).cast(pa.string()), pa.array(part, pa.string()), _vector_array(cache.gather(part))],
                    schema=schema))
                row += n
            if row == 0:
                writer.write_table(schema.empty_table())
    seconds = time.perf_counter() - t0
    summary = {"n_chunks": len(shas), "n_embedded": n_embedded, "n_reused": len(shas) - n_embedded,
               "n_truncated": n_truncated, "max_length": folder.max_length, "rebuilt_unreadable": unreadable,
               "seconds": seconds, "fingerprint": fingerprint}
    project.record("embed", params={"model": folder.name, "onnx": str(folder.onnx_path), "max_length": folder.max_length},
                   inputs={"chunks.parquet": sha256_file(project.chunks_path)},
                   outputs=["embeddings.parquet"], rows=len(shas), model_fingerprint=fingerprint,
                   n_embedded=n_embedded, n_truncated=n_truncated, seconds=round(seconds, 3),
                   vector_cache=str(vector_cache_dir(project, folder.passage_fingerprint).relative_to(project.root)))
    return summary
