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
- Where the batches run is the encoder's business: the texts to embed go
  to `encoder.iter_encode_groups` one window at a time, and what comes back
  (sha256s and vectors, batch by batch) is cached and written here. A
  `BiEncoder` runs them in this process; a `RayEncoder`
  (`rag_cli.models.ray_encoder`, `rag embed --ray`) runs the same batches
  in actors on a Ray cluster, so both paths write the same files. With Ray
  the driver holds no more than the local path, but the texts to embed
  wait in Ray's object store (spilled to disk when it is full).

The model fingerprint, name and dimension are in the file's schema metadata.

Truncation is a property of the text, not of the run: every chunk's tokens
(passage prefix and special tokens included) are counted with the model's
tokenizer alone (no ONNX run), cached chunks too, and written as `n_tokens`
and `truncated` (n_tokens > max_length) to embeddings.parquet; the summary
names the truncated chunks. With `on_truncate="error"` a truncated chunk
fails the run before anything is embedded or written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from rag_cli.hashing import sha256_file, sha256_text
from rag_cli.progress import Progress
from rag_cli.store.chunks import embed_text_column, iter_chunk_batches
from rag_cli.errors import BadInput, WorkFailed
from rag_cli.store.embeddings import (NAMED_IDS, ROW_BYTES, DamagedVectors, VectorCache, bad_vector_rows,
                                      describe_bad_vectors, describe_truncated, embeddings_writer, stored_fingerprint,
                                      vector_cache_dir)

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder

#: Chunk rows read, tokenized, embedded and written at a time.
WINDOW = 4096
#: A cache part is written after this many onnxruntime batches (Ray: result blocks), and at the end.
PART_BATCHES = 16


def embed_chunks(project: "ProjectFolder", encoder, progress: Progress | None = None, *, batch_tokens: int | None = None,
                 window: int = WINDOW, part_batches: int = PART_BATCHES, on_truncate: str = "warn") -> dict:
    """Embed every chunk of `chunks.parquet` that has no cached vector for this model,
    then write `embeddings.parquet` (see the module doc).

    Args:
        project: the project folder.
        encoder: a `rag_cli.models.encoder.BiEncoder`.
        progress: progress("embedding", done, total), in texts to embed, after each batch.
        batch_tokens: padded tokens per onnxruntime batch (default: the encoder's default).
        window: chunk rows held in memory at a time.
        part_batches: batches per cache part file.
        on_truncate: "warn" (report truncated chunks in the summary) or
            "error" (raise BadInput naming them, before any embedding).

    Returns:
        Summary: n_chunks, n_embedded (chunks whose vector was computed now,
        those whose cached vector was damaged and embedded again included;
        identical texts are embedded once), n_texts_embedded (the distinct
        texts embedded now: the `total` of `progress`, plus those embedded
        again after a damaged cache part), n_reused (n_chunks - n_embedded), n_truncated (chunks,
        embedded now or reused, longer than max_length tokens), truncated
        (the first `NAMED_IDS` of them: {"chunk_id", "n_tokens"}),
        truncation (the warning naming them, or None), max_length,
        rebuilt_unreadable (why an old embeddings.parquet could not be read,
        or None), seconds, fingerprint, model_warnings (`ModelFolder.warnings`);
        cache_repaired (only when a damaged part of the vector cache was set
        aside: one message each, naming the part; parts holding only vectors
        the chunks no longer use are checked too, after embeddings.parquet
        is written, see `VectorCache.set_aside_unread`).

    Raises:
        BadInput: `chunks.parquet` is missing, unreadable, lacks chunk_id/text
            or has no chunks (nothing is written);
            or `on_truncate="error"` and a chunk is longer than max_length
            (names the chunks with their token counts; nothing is written).
        WorkFailed: the model gave a vector with NaN/inf or of norm zero
            (names the chunks of that batch); the good vectors of the batches
            before are cached, the bad ones are not, and embeddings.parquet is
            left as it was.
    """
    t0 = time.perf_counter()
    chunks_path = project.require(project.chunks_path, "chunk")
    col = embed_text_column(chunks_path)
    folder = encoder.folder
    fingerprint = folder.fingerprint
    encoder.check_query_graph()  # a broken query graph fails now, not at the first search
    dim = encoder.dim
    cache_dir = vector_cache_dir(project.root, folder.passage_fingerprint)
    cache = VectorCache(cache_dir, dim, unit=folder.normalize)

    stored, unreadable = stored_fingerprint(project.embeddings_path)  # a damaged file is rebuilt, not a dead end
    if stored == fingerprint:
        unreadable = cache.add_source(project.embeddings_path)

    if on_truncate not in ("warn", "error"):
        raise BadInput(f"--on-truncate {on_truncate!r}: use warn or error (config model.on_truncate)")
    # the text hashes and token counts (the only per-chunk state kept for the whole corpus)
    shas: list[str] = []
    counts: list[np.ndarray] = []
    new: set[str] = set()
    truncated: list[tuple[str, int]] = []  # the first NAMED_IDS (chunk_id, n_tokens)
    n_truncated = 0
    max_length = folder.max_length
    for batch in iter_chunk_batches(chunks_path, [col, "chunk_id"], window):
        texts = batch.column(0).to_pylist()
        n_tok = encoder.count_tokens(texts, folder.passage_prefix).astype(np.int32)
        counts.append(n_tok)
        cut = np.flatnonzero(n_tok > max_length)
        n_truncated += len(cut)
        if len(truncated) < NAMED_IDS and len(cut):
            ids = batch.column(1).to_pylist()
            truncated += [(ids[i], int(n_tok[i])) for i in cut[: NAMED_IDS - len(truncated)]]
        for text in texts:
            sha = sha256_text(text)
            shas.append(sha)
            if sha not in cache:
                new.add(sha)
    if not shas:  # nothing to embed: an empty embeddings.parquet would only fail `rag index` later
        raise BadInput(f"{chunks_path} has no chunks (its documents have no text); "
                       "run `rag chunk` on documents with text")
    n_tokens = np.concatenate(counts) if counts else np.zeros(0, np.int32)
    truncation = describe_truncated(truncated, n_truncated, max_length) if n_truncated else None
    if truncation and on_truncate == "error":
        raise BadInput(f"{describe_truncated(truncated, n_truncated, max_length, embedded=False)}; nothing was embedded or written (--on-truncate error): chunk again with "
                       f"a smaller --size, or use --on-truncate warn")
    total, done = len(new), 0
    cache.space_needed = total * (4 * dim + 80) + len(shas) * (4 * dim + ROW_BYTES)  # parts + embeddings.parquet
    kwargs = {} if batch_tokens is None else {"batch_tokens": batch_tokens}

    if new:
        got_shas: list[str] = []
        got_vec: list[np.ndarray] = []
        n_batches = 0

        def flush() -> None:
            nonlocal n_batches
            if got_shas:
                cache.write_part(list(got_shas), np.concatenate(got_vec))
                got_shas.clear()
                got_vec.clear()
            n_batches = 0

        groups = _texts_to_embed(chunks_path, col, window, shas, new, np.minimum(n_tokens, max_length))
        for keys, vectors in _flushed_on_failure(encoder.iter_encode_groups(groups, folder.passage_prefix, **kwargs),
                                                 flush):
            bad = bad_vector_rows(vectors)
            if bad.size:
                flush()
                ids, rows = _chunks_of(chunks_path, shas, {keys[i]: i for i in bad})
                raise WorkFailed(f"{folder.onnx_path} gave vectors that cosine search cannot use for "
                                 f"{describe_bad_vectors(ids, vectors[rows])}; they were not cached and "
                                 f"{project.embeddings_path.name} was not written. The model's graph gives "
                                 "NaN/inf or zero outputs for these texts, or token vectors whose mean is "
                                 "near-zero (rounding noise, taken as zero: rag_cli.models.encoder."
                                 "near_zero_rows) (an fp16 export that overflows, or a broken graph): use "
                                 "another export of the model")
            got_shas.extend(keys)
            got_vec.append(vectors)
            done += len(keys)
            n_batches += 1
            if n_batches >= part_batches:
                flush()
            if progress is not None:
                progress("embedding", done, total)
        flush()

    repaired: list[str] = list(cache.removed)  # parts that could not even be opened (deleted)
    redone: set[str] = set()  # texts embedded again because their cached vector was damaged
    used: set[str] = set()  # every chunk's text sha256, made when a damaged part is found

    def gather_checked(part: list[str], texts: Callable[[], list[str]]) -> np.ndarray:
        """The cached vectors of `part`; a damaged cache part (or older
        embeddings.parquet) is discarded and the texts it held are embedded again."""
        for _ in range(cache.n_sources + 2):  # each round discards one source
            missing: dict[str, str] = {}
            if any(sha not in cache for sha in part):
                for sha, text in zip(part, texts()):
                    if sha not in cache:
                        missing.setdefault(sha, text)
            if missing:
                _embed_again(encoder, cache, missing, kwargs, project)
                redone.update(missing)
            try:
                return cache.gather(part)
            except DamagedVectors as exc:
                gone = cache.discard(exc.path)
                if not used:
                    used.update(shas)
                n = sum(sha in used for sha in gone)
                repaired.append(f"{exc}; it was set aside and the {n} vector(s) of it that the chunks "
                                "use are embedded again")
        raise WorkFailed(f"the vector cache {cache_dir} keeps giving damaged vectors; delete that folder and run "
                         "`rag embed` again")

    with embeddings_writer(project.embeddings_path, fingerprint, folder.name, dim,
                           folder.passage_fingerprint, max_length, n_rows=len(shas),
                           normalized=folder.normalize) as write:
        row = 0
        for batch in iter_chunk_batches(chunks_path, ["chunk_id", col], window):
            part = shas[row : row + batch.num_rows]
            vectors = gather_checked(part, lambda: batch.column(1).to_pylist())
            bad = bad_vector_rows(vectors)
            if bad.size:  # a cache written by an older version, or edited
                ids = batch.column(0).to_pylist()
                raise WorkFailed(f"the vector cache {cache_dir} holds vectors that cosine search cannot use, "
                                 f"{describe_bad_vectors([ids[i] for i in bad], vectors[bad])}; delete that "
                                 "folder and run `rag embed` again")
            write(batch.column(0), part, vectors, n_tokens[row : row + batch.num_rows])
            row += batch.num_rows
    repaired += cache.set_aside_unread()  # damaged parts that only hold vectors no chunk uses now
    computed = new | redone
    n_embedded = sum(s in computed for s in shas)
    total = len(computed)
    seconds = time.perf_counter() - t0
    summary = {"n_chunks": len(shas), "n_embedded": n_embedded, "n_texts_embedded": total,
               "n_reused": len(shas) - n_embedded,
               "n_truncated": n_truncated, "max_length": max_length, "rebuilt_unreadable": unreadable,
               "truncated": [{"chunk_id": c, "n_tokens": k} for c, k in truncated], "truncation": truncation,
               "seconds": seconds, "fingerprint": fingerprint, "model_warnings": list(folder.warnings)}
    if repaired:
        summary["cache_repaired"] = repaired
    project.record("embed", params={"model": folder.name, "onnx": str(folder.onnx_path), "max_length": max_length,
                                    "on_truncate": on_truncate},
                   inputs={"chunks.parquet": sha256_file(project.chunks_path)},
                   outputs=["embeddings.parquet"], rows=len(shas), model_fingerprint=fingerprint,
                   n_embedded=n_embedded, n_truncated=n_truncated, seconds=round(seconds, 3),
                   vector_cache=str(cache_dir.relative_to(project.root)))
    return summary


def _flushed_on_failure(batches: Iterator, flush: Callable[[], None]) -> Iterator:
    """The items of `batches`; when getting the next one fails (a model server that dies mid-run),
    `flush()` first (the vectors that came back before are cached: the rerun reuses them), then the error."""
    try:
        yield from batches
    except Exception:
        flush()
        raise


def _embed_again(encoder, cache: VectorCache, todo: dict[str, str], kwargs: dict, project: "ProjectFolder") -> None:
    """Embed the texts `todo` ({sha256: text}) whose cached vectors were
    damaged, and cache them. Raises WorkFailed for NaN/inf or zero vectors."""
    folder = encoder.folder
    shas, texts = list(todo), list(todo.values())
    for idx, vectors in encoder.iter_encode(texts, folder.passage_prefix, **kwargs):
        bad = bad_vector_rows(vectors)
        if bad.size:
            raise WorkFailed(f"{folder.onnx_path} gave vectors that cosine search cannot use for "
                             f"{len(bad)} text(s) embedded again after a damaged vector cache part; "
                             f"{project.embeddings_path.name} was not written; use another export of the model")
        cache.write_part([shas[i] for i in idx], vectors)


def _texts_to_embed(chunks_path, col: str, window: int, shas: list[str], new: set[str], lengths: np.ndarray
                    ) -> Iterator[tuple[list[str], list[str], np.ndarray]]:
    """The texts to embed, one window of chunks.parquet at a time: (sha256s,
    texts, their token lengths as the model sees them (m,) int) of the texts
    of the window whose sha256 is in `new`, each text once, in the window
    where it first appears (in row order). `shas` and `lengths` hold every
    row's sha256 and length (in row order); `new` is not changed."""
    pending = set(new)
    row = 0
    for batch in iter_chunk_batches(chunks_path, [col], window):
        texts = batch.column(0).to_pylist()
        todo: dict[str, tuple[str, int]] = {}
        for i, (sha, text) in enumerate(zip(shas[row : row + len(texts)], texts)):
            if sha in pending:
                pending.discard(sha)
                todo[sha] = (text, int(lengths[row + i]))
        row += len(texts)
        if todo:
            yield list(todo), [t for t, _ in todo.values()], np.array([n for _, n in todo.values()], np.int64)


def _chunks_of(chunks_path, shas: list[str], bad: dict[str, int]) -> tuple[list[str], list[int]]:
    """(chunk ids, positions in the batch) of the chunks whose text sha256 is
    a key of `bad` ({sha256: its row in the batch of vectors}), in the order
    of chunks.parquet (`shas`: every row's sha256, in that order)."""
    ids: list[str] = []
    rows: list[int] = []
    row = 0
    for batch in iter_chunk_batches(chunks_path, ["chunk_id"], WINDOW):
        for cid, sha in zip(batch.column(0).to_pylist(), shas[row : row + batch.num_rows]):
            if sha in bad:
                ids.append(cid)
                rows.append(bad[sha])
        row += batch.num_rows
    return ids, rows
