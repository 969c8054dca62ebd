"""embeddings.parquet and the vector cache (see docs/layout.md).

embeddings.parquet: `chunk_id` string, `text_sha256` string (of the
embedded text), `vector` fixed_size_list<float32>[dim], `n_tokens` int32
(tokens of the passage prefix + embedded text under the model's tokenizer,
special tokens included, before truncation) and `truncated` bool
(`n_tokens > max_length`: the model saw only the first max_length tokens),
one row per chunk in the order of chunks.parquet; the schema metadata holds
`model_fingerprint`, `model_name`, `dim`, `passage_fingerprint`,
`max_length` and `normalized` ("true" when the model gives unit vectors).
Files written before `n_tokens`/`truncated` existed lack those two columns
and are still read.

The vector cache: `PROJECT/cache/vectors/<passage fingerprint>/part-*.parquet`
(`text_sha256`, `vector`; one row group each), vectors by the sha256 of the
embedded text, so a rerun embeds only new or changed texts. Each part has
its own checksum: `vectors_sha256` in its schema metadata, the sha256 of its
float32 vectors (row-major). Vectors read from the cache are checked as they
are read: the checksum (parts written before it existed have none), and for
a model that normalises, a norm of 1 (`UNIT_NORM_TOLERANCE`), so a flipped
bit never becomes a vector of norm 3e34 (`DamagedVectors`). The parts that
`rag embed` did not read are checked at its end (`VectorCache.set_aside_unread`),
so a damaged part of vectors no chunk uses is set aside too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.store.parquet import iter_row_groups, open_parquet, read_parquet, rerun

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
    normalized: bool | None = None  # whether the model gives unit vectors (None: a file written before this was kept)


#: How many chunk ids a message about bad vectors names.
NAMED_IDS = 10

#: Bytes per row besides the vector (a chunk id, a text sha256, n_tokens, truncated), for space estimates.
ROW_BYTES = 120

#: A vector of a normalising model whose L2 norm differs from 1 by more than this is damaged.
UNIT_NORM_TOLERANCE = 1e-3


class DamagedVectors(Exception):
    """Vectors read from a cache part (or an older embeddings.parquet used
    as a source) are damaged: `path` (the file), `why` (what was found)."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why


#: Rows checked at a time by `off_unit_rows` and `bad_vector_rows`: their temporaries (a float64
#: copy, masks) stay a few tens of MB at any corpus size (whole, they were 4 times the vectors).
CHECK_ROWS = 16384


def _blocks(vectors: np.ndarray):
    for start in range(0, len(vectors), CHECK_ROWS):
        yield start, vectors[start:start + CHECK_ROWS]


def off_unit_rows(vectors: np.ndarray, tolerance: float = UNIT_NORM_TOLERANCE) -> np.ndarray:
    """Rows whose L2 norm (computed in float64) is not 1 within `tolerance` (or not finite): the
    damaged vectors of a model that normalises. (n, d) -> (m,) int64, ascending."""
    vectors = np.asarray(vectors)
    if vectors.size == 0:
        return np.zeros(0, np.int64)
    found = []
    with np.errstate(all="ignore"):
        for start, block in _blocks(vectors):
            b = block.astype(np.float64)
            norms = np.sqrt(np.einsum("ij,ij->i", b, b))
            found.append(start + np.flatnonzero(~np.isfinite(norms) | (np.abs(norms - 1.0) > tolerance)))
    return np.concatenate(found).astype(np.int64)


def vectors_sha256(vectors: np.ndarray) -> str:
    """sha256 of (n, d) vectors as row-major float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).hexdigest()


def bad_vector_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows that cannot be searched by cosine: a non-finite component (NaN,
    +-inf) or an L2 norm of zero. (n, d) float -> (m,) int64 row positions, ascending."""
    vectors = np.asarray(vectors)
    if vectors.size == 0:
        return np.zeros(0, np.int64)
    found = []
    for start, block in _blocks(vectors):
        finite = np.isfinite(block)
        bad = ~finite.all(axis=1) | ~np.any(finite & (block != 0), axis=1)
        found.append(start + np.flatnonzero(bad))
    return np.concatenate(found).astype(np.int64)


def describe_bad_vectors(chunk_ids: list[str], vectors: np.ndarray, limit: int = NAMED_IDS) -> str:
    """'3 chunk(s): 'a#0' (NaN/inf), 'b#2' (zero norm), ...' for the rows
    `chunk_ids` (m ids) of the bad vectors `vectors` (m, d); at most `limit` named."""
    parts = []
    for cid, vec in list(zip(chunk_ids, vectors))[:limit]:
        parts.append(f"{cid!r} ({'NaN/inf' if not np.isfinite(vec).all() else 'zero norm'})")
    more = f" and {len(chunk_ids) - limit} more" if len(chunk_ids) > limit else ""
    return f"{len(chunk_ids)} chunk(s): " + ", ".join(parts) + more


def describe_truncated(chunks: list[tuple[str, int]], n: int, max_length: int, *, embedded: bool = True) -> str:
    """"N chunk(s) are longer than the model's max_length (L tokens) and were
    cut to it: 'a#0' (612 tokens), ..." for the first (chunk_id, n_tokens)
    pairs `chunks` of the `n` truncated chunks; at most `NAMED_IDS` named.
    `embedded=False` (nothing was embedded: `--on-truncate error`) says they
    "would be cut"."""
    named = ", ".join(f"{cid!r} ({k} tokens)" for cid, k in chunks[:NAMED_IDS])
    more = f" and {n - min(len(chunks), NAMED_IDS)} more" if n > min(len(chunks), NAMED_IDS) else ""
    cut = "were cut to it" if embedded else "would be cut to it"
    return (f"{n} chunk(s) are longer than the model's max_length ({max_length} tokens, prefix and special "
            f"tokens included) and {cut}: {named}{more}")


def _check_sizes(path: Path, lengths: np.ndarray, chunk_ids: Sequence[str], dim: int) -> int:
    """The vector size of every row (`lengths` (n,) int64: each row's list length, 0 for null); 0 for
    no rows.

    Raises:
        BadInput: rows have different sizes, or a size other than `dim` (the
            metadata's, when not 0); the message names the sizes and example chunk ids.
    """
    if len(lengths) == 0:
        return dim
    sizes = sorted(set(np.unique(lengths).tolist()))
    if len(sizes) == 1 and (not dim or sizes[0] == dim):
        return int(sizes[0])
    examples = "; ".join(
        f"size {s}: " + ", ".join(repr(chunk_ids[i]) for i in np.flatnonzero(lengths == s)[:3]) for s in sizes
    )
    if len(sizes) == 1:
        what = f"vectors of size {sizes[0]} but its metadata says dim {dim}"
    else:
        what = "vectors of different sizes " + " and ".join(map(str, sizes))
    raise BadInput(f"{path}: {what} ({examples}); every vector must come from one model: run `rag embed` again")


def read_embeddings(path: Path) -> Embeddings:
    """Read `embeddings.parquet`: the ids and hashes whole, the vectors a row group at a time
    (`iter_row_groups`) into one (n, dim) float32 array, so that reading holds the array and one
    row group (`rag embed` writes a row group per part) rather than the file's decoded column, its
    copy and what the allocator kept of them (2.6 times the vectors' size at the peak).

    Raises:
        BadInput: it is unreadable, lacks the contract's columns or metadata, or its vectors
            differ in size (naming the sizes and example chunk ids).
    """
    import pyarrow.compute as pc

    remedy = rerun("embed")
    pf = open_parquet(path, remedy)
    schema = pf.schema_arrow
    pf.close()
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    if "chunk_id" not in schema.names or "vector" not in schema.names or "model_fingerprint" not in meta:
        raise BadInput(f"{path}: not an embeddings file of rag-cli (needs chunk_id, vector and a model_fingerprint)")
    keys = read_parquet(path, remedy, columns=[c for c in ("chunk_id", "text_sha256") if c in schema.names])
    chunk_ids = keys.column("chunk_id").to_pylist()
    sha = keys.column("text_sha256").to_pylist() if "text_sha256" in keys.column_names else [""] * keys.num_rows
    del keys
    n, dim = len(chunk_ids), int(meta.get("dim", 0))
    lengths = np.zeros(n, dtype=np.int64)
    vectors, size, same, pos = None, dim, True, 0
    for group in iter_row_groups(path, remedy, ["vector"]):
        col = group.column(0)
        m = len(col)
        lengths[pos:pos + m] = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
        size = size or (int(lengths[0]) if m else 0)
        same = same and size > 0 and bool((lengths[pos:pos + m] == size).all())
        if same:  # else only the lengths are read on, for the message
            if vectors is None:
                vectors = np.empty((n, size), dtype=np.float32)
            vectors[pos:pos + m] = to_matrix(col, size)
        pos += m
    if pos != n:
        raise BadInput(f"{path}: {n} chunk ids but {pos} vectors; the file is damaged: {remedy}")
    dim = _check_sizes(path, lengths, chunk_ids, dim)
    if vectors is None:
        vectors = np.zeros((0, dim), np.float32)
    normalized = {"true": True, "false": False}.get(meta.get("normalized", ""))
    return Embeddings(chunk_ids, sha, vectors, meta["model_fingerprint"],
                      meta.get("model_name", ""), dim, meta.get("passage_fingerprint", meta["model_fingerprint"]),
                      normalized)


def embeddings_schema(fingerprint: str, model_name: str, dim: int, extra_meta: dict | None = None) -> pa.Schema:
    """Schema of `embeddings.parquet`: chunk_id string, text_sha256 string,
    vector fixed_size_list<float32>[dim], n_tokens int32, truncated bool;
    metadata model_fingerprint, model_name, dim (+ `extra_meta`)."""
    meta = {"model_fingerprint": fingerprint, "model_name": model_name, "dim": str(dim)}
    meta.update({k: str(v) for k, v in (extra_meta or {}).items()})
    return pa.schema([("chunk_id", pa.string()), ("text_sha256", pa.string()),
                      ("vector", pa.list_(pa.float32(), dim)), ("n_tokens", pa.int32()),
                      ("truncated", pa.bool_())], metadata=meta)


def vector_array(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """(n, d) float32 -> Arrow fixed_size_list<float32>[d]."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), vectors.shape[1])


def to_matrix(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    """Arrow list<float32> column of n rows -> (n, dim) float32."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(len(column), dim)


def _one_line(exc: BaseException) -> str:
    """`Type: message` of an exception on one line (pyarrow's thrift errors hold line breaks)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class VectorCache:
    """Vectors of one model, by the sha256 of the embedded text, in Parquet part files.

    Sources are the part files of `folder` (`part-*.parquet`: `text_sha256`,
    `vector`; one row group each) plus, optionally, an older
    `embeddings.parquet` of the same model. Only the hashes are held in
    memory (hash -> source, row group, row); vectors are read row group by
    row group when gathered.

    Every row group is checked when it is read (`gather`): its checksum
    (`vectors_sha256` in a part's metadata) and, with `unit`, the norm of
    each vector; a damaged source raises DamagedVectors, and `discard`
    removes it (deleting a part of the cache) so its texts are embedded again.
    The parts no `gather` read (they hold only vectors no longer needed, or
    ones another part also holds) are checked by `set_aside_unread`, so a
    damaged one does not stay in the cache for ever. A part that cannot be
    opened at all is deleted when the cache is opened (`removed` says why).

    Args:
        folder: `PROJECT/cache/vectors/<fingerprint>`; created on the first write.
        dim: vector size; part files of another size are ignored.
        unit: the model normalises: every vector must have norm 1.
    """

    def __init__(self, folder: Path, dim: int, unit: bool = False):
        self.folder, self.dim, self.unit = Path(folder), int(dim), bool(unit)
        self._files: list[Path] = []  # opened when read: a big cache has more parts than a process may open
        self._sums: list[str | None] = []  # each source's vectors_sha256 (None: none written)
        self._where: dict[str, tuple[int, int, int]] = {}
        self._loaded: tuple[tuple[int, int], np.ndarray] | None = None  # the last row group read
        self._seq = 0
        self._read_srcs: set[int] = set()  # sources of which `_read` read a row group (or found it damaged)
        self._gone: set[int] = set()  # sources discarded
        #: Why each part that could not be opened was deleted when the cache was opened (one message each).
        self.removed: list[str] = []
        #: Bytes the step that writes parts needs (said when the disk is full); None: the part's size.
        self.space_needed: int | None = None
        if self.folder.is_dir():
            for part in sorted(self.folder.glob("part-*.parquet")):
                why = self.add_source(part, remove_if_unreadable=True)
                if why is not None and not part.exists():
                    self.removed.append(f"{why}; it was set aside (deleted)")

    def __contains__(self, sha: str) -> bool:
        return sha in self._where

    def __len__(self) -> int:
        return len(self._where)

    @property
    def n_sources(self) -> int:
        """The files indexed (parts and older embeddings.parquet), discarded ones included."""
        return len(self._files)

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
                checksum = (pf.schema_arrow.metadata or {}).get(b"vectors_sha256")
                for rg in range(pf.num_row_groups):
                    shas = pf.read_row_group(rg, columns=["text_sha256"]).column(0).to_pylist()
                    for row, sha in enumerate(shas):
                        if sha and sha not in self._where:
                            found.setdefault(sha, (src, rg, row))
        except Exception as exc:  # pyarrow raises several types for a damaged file
            if remove_if_unreadable:
                Path(path).unlink(missing_ok=True)
            return f"{path}: cannot be read as Parquet ({_one_line(exc)})"
        self._files.append(Path(path))
        self._sums.append(checksum.decode() if checksum else None)
        self._where.update(found)
        return None

    def discard(self, path: Path) -> list[str]:
        """Stop using the source `path` (damaged); a part of this cache is
        deleted, another file (embeddings.parquet) is left as it is. Returns
        the hashes it was the source of (no longer cached: to be embedded
        again where they are needed)."""
        path = Path(path)
        srcs = {i for i, f in enumerate(self._files) if f == path}
        gone = [sha for sha, loc in self._where.items() if loc[0] in srcs]
        for sha in gone:
            del self._where[sha]
        self._gone |= srcs
        self._loaded = None
        if self._is_part(path):
            path.unlink(missing_ok=True)
        return gone

    def _is_part(self, path: Path) -> bool:
        return path.parent == self.folder and path.name.startswith("part-")

    def set_aside_unread(self) -> list[str]:
        """Check every part of this cache that no `gather` read (nor `discard`
        dropped) as `gather` would, and discard (delete) the damaged ones: a
        part holding only vectors that are no longer needed is never read, so
        without this its damage would be reported by `rag status --verify`
        after every embed. Call it once the vectors of every chunk were
        gathered (a part read by no `gather` then holds no vector the chunks
        use). Reads each such part once, a row group at a time. Returns one message per part set aside, naming it and the damage."""
        out = []
        for src, path in enumerate(self._files):
            if src in self._read_srcs or src in self._gone or not self._is_part(path):
                continue
            try:
                with pq.ParquetFile(path) as pf:
                    n_groups = pf.num_row_groups
                for rg in range(n_groups):
                    self._read(src, rg)
            except DamagedVectors as exc:
                n = len(self.discard(path))
                out.append(f"{exc}; it was set aside (deleted): none of its {n} vector(s) is used by the "
                           "current chunks")
            except Exception as exc:  # pyarrow raises several types for a damaged file
                self.discard(path)
                out.append(f"{path}: cannot be read as Parquet ({_one_line(exc)}); it was set aside "
                           "(deleted): none of its vectors is used by the current chunks")
        self._loaded = None
        return out

    def write_part(self, shas: list[str], vectors: np.ndarray) -> Path:
        """Write one part file atomically and index it.

        Args:
            shas: n text hashes.
            vectors: (n, dim) float32.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        path = self.folder / f"part-{time.time_ns():020d}-{os.getpid()}-{self._seq:06d}.parquet"
        schema = pa.schema([("text_sha256", pa.string()), ("vector", pa.list_(pa.float32(), self.dim))],
                           metadata={"vectors_sha256": vectors_sha256(vectors)})
        table = pa.Table.from_arrays([pa.array(shas, pa.string()), vector_array(vectors)], schema=schema)
        atomic.write_parquet(path, table, need=self.space_needed,  # a full disk: WorkFailed naming the part
                             row_group_size=max(len(shas), 1))  # one row group: the checksum covers it
        self.add_source(path)
        return path

    def gather(self, shas: list[str]) -> np.ndarray:
        """(n, dim) float32 vectors of `shas`, each of which must be cached.

        Raises:
            KeyError: a hash is not cached.
            DamagedVectors: a row group read is damaged: unreadable, another
                checksum than the one written, or (with `unit`) a vector whose
                norm is not 1. `discard` its path and embed its texts again.
        """
        out = np.empty((len(shas), self.dim), dtype=np.float32)
        locs = [self._where[s] for s in shas]
        order = sorted(range(len(shas)), key=lambda i: locs[i])  # read each row group once
        for i in order:
            src, rg, row = locs[i]
            if self._loaded is None or self._loaded[0] != (src, rg):
                self._loaded = ((src, rg), self._read(src, rg))
            out[i] = self._loaded[1][row]
        return out

    def _read(self, src: int, rg: int) -> np.ndarray:
        """Row group `rg` of source `src` as (n, dim) float32, checked (see `gather`)."""
        path = self._files[src]
        self._read_srcs.add(src)
        try:
            with pq.ParquetFile(path) as pf:
                col = pf.read_row_group(rg, columns=["vector"]).column(0)
                single = pf.num_row_groups == 1
            vectors = to_matrix(col, self.dim)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise DamagedVectors(path, f"cannot be read as Parquet ({_one_line(exc)})") from exc
        want = self._sums[src]
        if want is not None and single and vectors_sha256(vectors) != want:
            raise DamagedVectors(path, "its vectors' sha256 differs from the one written (the file was changed "
                                       "or damaged)")
        off = off_unit_rows(vectors) if self.unit else np.zeros(0, np.int64)
        if off.size:
            norm = float(np.linalg.norm(vectors[off[0]].astype(np.float64)))
            raise DamagedVectors(path, f"{off.size} vector(s) of row group {rg} do not have norm 1 although the "
                                       f"model normalises (row {int(off[0])}: norm {norm:.3g})")
        return vectors


def check_vector_cache(folder: Path, unit: bool = False) -> list[str]:
    """Problems of the part files of the vector cache `folder`: unreadable,
    a checksum (`vectors_sha256`) other than the one written, or with `unit`
    a vector whose norm is not 1. One message per damaged part, naming it
    (for `rag status --verify`; `rag embed` sets such parts aside itself,
    needed or not: `VectorCache.set_aside_unread`)."""
    problems = []
    for part in sorted(Path(folder).glob("part-*.parquet")):
        try:
            with pq.ParquetFile(part) as pf:
                dim = getattr(pf.schema_arrow.field("vector").type, "list_size", 0)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            problems.append(f"{part}: cannot be read as Parquet ({_one_line(exc)})")
            continue
        cache = VectorCache(Path(folder) / "-", dim, unit=unit)  # a folder that does not exist: no parts of its own
        if cache.add_source(part) is not None:
            problems.append(f"{part}: not a part of the vector cache (no text_sha256 or vector column)")
            continue
        try:
            for rg in range(pq.ParquetFile(part).num_row_groups):
                cache._read(0, rg)
        except DamagedVectors as exc:
            problems.append(str(exc))
    return [f"{p}; the next `rag embed` (or `update`) with its model sets it aside and embeds again those of its "
            "texts the chunks use" for p in problems]


def vector_cache_dir(root: Path, fingerprint: str) -> Path:
    """`PROJECT/cache/vectors/<fingerprint>`: the vector cache of one model (`root` is the project folder)."""
    return Path(root) / "cache" / "vectors" / fingerprint


def stored_fingerprint(path: Path) -> tuple[str | None, str | None]:
    """(model_fingerprint in the schema metadata of `path` or None, why the
    file cannot be read or None). A missing file gives (None, None)."""
    if not Path(path).exists():
        return None, None
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for a damaged file
        return None, f"{path}: cannot be read as Parquet ({_one_line(exc)}); run `rag embed` again"
    return meta.get(b"model_fingerprint", b"").decode() or None, None


@contextlib.contextmanager
def embeddings_writer(path: Path, fingerprint: str, model_name: str, dim: int, passage_fingerprint: str,
                      max_length: int, n_rows: int | None = None, normalized: bool | None = None
                      ) -> Iterator[Callable[[pa.Array, list[str], np.ndarray, np.ndarray], None]]:
    """Write embeddings.parquet atomically, part by part: yields
    `write(chunk_ids, text_sha256s, vectors (n, dim) float32, n_tokens (n,) int)`
    (`truncated` is `n_tokens > max_length`); the file is renamed into place
    when the block ends without an error. `n_rows` (the rows to come) sizes
    the space a full disk is said to need; `normalized` (the model gives
    unit vectors) is kept in the metadata, for `rag index` to check."""
    extra = {"passage_fingerprint": passage_fingerprint, "max_length": max_length}
    if normalized is not None:
        extra["normalized"] = "true" if normalized else "false"
    schema = embeddings_schema(fingerprint, model_name, dim, extra)
    need = None if n_rows is None else n_rows * (4 * dim + ROW_BYTES)
    with atomic.atomic_path(path, need=need) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            rows = 0

            def write(chunk_ids, shas: list[str], vectors: np.ndarray, n_tokens: np.ndarray) -> None:
                nonlocal rows
                ids = chunk_ids.cast(pa.string()) if hasattr(chunk_ids, "cast") else pa.array(chunk_ids, pa.string())
                n_tokens = np.asarray(n_tokens, dtype=np.int32)
                writer.write_table(pa.Table.from_arrays(
                    [ids, pa.array(shas, pa.string()), vector_array(vectors), pa.array(n_tokens, pa.int32()),
                     pa.array(n_tokens > max_length, pa.bool_())], schema=schema))
                rows += len(shas)

            yield write
            if rows == 0:
                writer.write_table(schema.empty_table())
