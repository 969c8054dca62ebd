"""`rag embed`: chunks.parquet -> embeddings.parquet with an ONNX bi-encoder.

Incremental: vectors already in `embeddings.parquet` for the same model
fingerprint are reused by the sha256 of the text that is embedded, so a
rerun embeds only new or changed chunks. The model fingerprint, name and
dimension are in the file's schema metadata.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.project import Project, sha256_file, sha256_text


@dataclass
class Embeddings:
    """The content of `embeddings.parquet`: `vectors` is (n, d) float32."""

    chunk_ids: list[str]
    text_sha256: list[str]
    vectors: np.ndarray
    fingerprint: str
    model_name: str
    dim: int


def read_embeddings(path: Path) -> Embeddings:
    """Read `embeddings.parquet`. Raises BadInput if it lacks the contract's columns or metadata."""
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise BadInput(f"{path}: cannot be read as Parquet ({exc}); run `rag embed` again") from exc
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if "chunk_id" not in table.column_names or "vector" not in table.column_names or "model_fingerprint" not in meta:
        raise BadInput(f"{path}: not an embeddings file of rag-cli (needs chunk_id, vector and a model_fingerprint)")
    dim = int(meta.get("dim", 0))
    flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vectors = np.asarray(flat, dtype=np.float32).reshape(table.num_rows, dim) if dim else np.zeros((0, 0), np.float32)
    sha = table.column("text_sha256").to_pylist() if "text_sha256" in table.column_names else [""] * table.num_rows
    return Embeddings(table.column("chunk_id").to_pylist(), sha, vectors, meta["model_fingerprint"],
                      meta.get("model_name", ""), dim)


def embeddings_table(emb: Embeddings, extra_meta: dict | None = None) -> pa.Table:
    """Arrow table: chunk_id string, text_sha256 string, vector fixed_size_list<float32>[d]."""
    d = emb.vectors.shape[1]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(emb.vectors.reshape(-1), type=pa.float32()), d)
    meta = {"model_fingerprint": emb.fingerprint, "model_name": emb.model_name, "dim": str(d)}
    meta.update({k: str(v) for k, v in (extra_meta or {}).items()})
    schema = pa.schema([("chunk_id", pa.string()), ("text_sha256", pa.string()),
                        ("vector", pa.list_(pa.float32(), d))], metadata=meta)
    return pa.Table.from_arrays([pa.array(emb.chunk_ids, pa.string()), pa.array(emb.text_sha256, pa.string()), vec],
                                schema=schema)


def embed_chunks(project: Project, encoder, progress=None) -> dict:
    """Embed every chunk of `chunks.parquet` that has no vector yet for this model.

    `encoder` is a `rag_cli.models.encoder.BiEncoder`. `progress(done, total)`
    is called as batches finish. An unreadable old `embeddings.parquet` is
    rebuilt (its error is in the summary's `rebuilt_unreadable`). Returns a summary (n_chunks, n_embedded,
    n_reused, n_truncated, seconds, fingerprint).
    """
    t0 = time.perf_counter()
    chunks = pq.read_table(project.require(project.chunks_path, "chunk"))
    col = "embed_text" if "embed_text" in chunks.column_names else "text"
    ids = chunks.column("chunk_id").to_pylist()
    texts = chunks.column(col).to_pylist()
    shas = [sha256_text(t) for t in texts]
    folder = encoder.folder
    fingerprint = folder.fingerprint

    cached: dict[str, np.ndarray] = {}
    unreadable = None
    if project.embeddings_path.exists():
        try:
            old = read_embeddings(project.embeddings_path)
        except BadInput as exc:  # a damaged file is rebuilt, not a dead end
            unreadable, old = str(exc), None
        if old is not None and old.fingerprint == fingerprint:
            cached = {s: old.vectors[i] for i, s in enumerate(old.text_sha256) if s}
    todo = [i for i, s in enumerate(shas) if s not in cached]
    dim = encoder.dim
    vectors = np.zeros((len(ids), dim), dtype=np.float32)
    for i, s in enumerate(shas):
        if s in cached:
            vectors[i] = cached[s]
    n_truncated = 0
    if todo:
        new = encoder.encode_passages([texts[i] for i in todo], progress=progress)
        vectors[np.asarray(todo)] = new
        n_truncated = int(encoder.n_truncated)
    emb = Embeddings(ids, shas, vectors, fingerprint, folder.name, dim)
    atomic.write_parquet(project.embeddings_path, embeddings_table(emb))
    seconds = time.perf_counter() - t0
    summary = {"n_chunks": len(ids), "n_embedded": len(todo), "n_reused": len(ids) - len(todo),
               "n_truncated": n_truncated, "max_length": folder.max_length, "rebuilt_unreadable": unreadable,
               "seconds": seconds, "fingerprint": fingerprint}
    project.record("embed", params={"model": folder.name, "onnx": str(folder.onnx_path), "max_length": folder.max_length},
                   inputs={"chunks.parquet": sha256_file(project.chunks_path)},
                   outputs=["embeddings.parquet"], rows=len(ids), model_fingerprint=fingerprint,
                   n_embedded=len(todo), n_truncated=n_truncated, seconds=round(seconds, 3))
    return summary
