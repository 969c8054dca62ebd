"""index/: generations of the dense (hnswlib) and sparse (bm25s) indexes.

    index/
      CURRENT          the name of the current generation (`gen-000007`), one line
      gen-000006/      an older generation, kept for `rag rollback`
      gen-000007/
        meta.json      model_fingerprint, passage_fingerprint, model_name, dim,
                       n_chunks, dense (M, ef_construction, ef, space, n, ...),
                       sparse params, generation {id, time, command, counts}
        chunks.arrow   the chunk columns search and ask read (`INDEX_COLUMNS`),
                       plus `label`: the chunk's label in the dense index; an
                       Arrow IPC file, memory-mapped (`rag_cli.store.index_chunks`;
                       chunks.parquet in generations of earlier versions)
        docs.parquet   the document columns `--filter` reads (`INDEX_DOC_COLUMNS`:
                       doc_id, path, title, n_chars, metadata JSON); absent in
                       generations written by earlier versions
        dense/         the dense index of `rag_cli.index.backends` + rag_dense.json
                       (hnswlib: hnsw.bin; faiss: faiss.index, vectors.npy;
                       exact: vectors.npy)
        sparse/        the bm25s index + rag_sparse.json
        files.json     {"files": {relative path: {"size": bytes, "sha256": hex}}}

Every writer (`rag index`, `build`, `update`) writes a whole new generation
into `index/.gen-<id>.tmp/`, fsyncs its files, renames it to `gen-<id>/`,
then switches `CURRENT` atomically (temporary file, fsync, rename, fsync of
the folder). A reader resolves `CURRENT` once and reads only that
generation, so a search that started on generation N finishes on N while
N+1 is written. A generation folder is complete once `files.json` is in it;
unfinished ones (a killed writer) are removed by the next writer, which also
keeps only the `keep` newest generations besides the current one (a surplus
generation is renamed to `.gen-<id>.tmp` before it is deleted, so a writer
killed while deleting never leaves a half generation that looks complete).

Checks on open: the size of every file is compared with files.json; files
of at most `VERIFY_SHA256_MAX_BYTES` are also hashed (sha256), so a damaged
or truncated file is reported (BadInput naming it) before anything is
loaded. Bigger files (the HNSW graph of a large corpus) get the size check
only when searching, since hashing them would cost more than loading them;
`verify_generation(..., full=True)` (`rag status --verify`) hashes them all.

The old flat layout (meta.json directly in index/, no CURRENT) is still
read; the next writer moves to generations and removes the flat files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import pyarrow as pa

from rag_cli.errors import BadInput
from rag_cli.hashing import sha256_file
from rag_cli.store.index_chunks import write_index_chunks

#: Columns of chunks.parquet kept in index/chunks.parquet; `context` is the
#: text `rag ask` gives the generator for `sentence` and `parent-child` chunks.
INDEX_COLUMNS = ["chunk_id", "doc_id", "text", "embed_text", "title_path", "parent_id", "context_start",
                 "context_end", "context"]

#: Columns of docs.parquet kept in index/docs.parquet (what `--filter` matches on).
INDEX_DOC_COLUMNS = ["doc_id", "path", "title", "n_chars", "metadata"]

#: Files up to this size are sha256-checked every time a generation is opened.
VERIFY_SHA256_MAX_BYTES = 64 << 20

CURRENT = "CURRENT"
_GEN = re.compile(r"^gen-(\d+)$")
_TMP = re.compile(r"^\.gen-(\d+)\.tmp$")
_FLAT = ("meta.json", "chunks.parquet", "chunks.arrow", "docs.parquet", "dense", "sparse")


def generation_name(gen_id: int) -> str:
    return f"gen-{gen_id:06d}"


def current_generation(index_dir: Path) -> Path | None:
    """The current generation's folder (read from CURRENT), the index folder
    itself for the old flat layout, or None when there is no index."""
    index_dir = Path(index_dir)
    try:
        name = (index_dir / CURRENT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return index_dir if (index_dir / "meta.json").exists() else None
    if not _GEN.match(name):
        raise BadInput(f"{index_dir / CURRENT}: {name!r} is not a generation name like gen-000001; "
                       "rebuild the index with `rag index`")
    return index_dir / name


def generations(index_dir: Path) -> list[tuple[int, Path]]:
    """Complete generations (with files.json), oldest first: [(id, folder)]."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for p in Path(index_dir).iterdir():
            m = _GEN.match(p.name)
            if m and (p / "files.json").exists():
                out.append((int(m.group(1)), p))
    return sorted(out)


def verify_generation(gen: Path, *, full: bool = False, sizes_only: bool = False) -> None:
    """Compare the files of generation `gen` with its files.json: sizes
    always, sha256 of files up to VERIFY_SHA256_MAX_BYTES (of all with
    `full`, of none with `sizes_only`).
    Raises BadInput naming the first file that is missing, of another size
    or another sha256 (and saying to rebuild or roll back)."""
    fix = "rebuild the index with `rag index`, or go back to the previous generation with `rag rollback`"
    try:
        listed = json.loads((gen / "files.json").read_text(encoding="utf-8"))["files"]
    except FileNotFoundError:
        if not gen.exists():
            raise _Vanished from None
        raise BadInput(f"{gen / 'files.json'} is missing: {gen} is not a complete generation; {fix}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{gen / 'files.json'} cannot be read ({exc}); {fix}") from exc
    for rel, want in listed.items():
        f = gen / rel
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            if not gen.exists():
                raise _Vanished from None
            raise BadInput(f"{f} is missing from the index generation {gen.name}; {fix}") from None
        if size != want["size"]:
            raise BadInput(f"{f} is damaged: {size} bytes where {want['size']} were written "
                           f"(truncated or overwritten); {fix}")
        if not sizes_only and (full or size <= VERIFY_SHA256_MAX_BYTES) and sha256_file(f) != want["sha256"]:
            raise BadInput(f"{f} is damaged: its sha256 differs from the one written; {fix}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _next_id(index_dir: Path) -> int:
    ids = [0]
    with contextlib.suppress(FileNotFoundError):
        for p in index_dir.iterdir():
            m = _GEN.match(p.name) or _TMP.match(p.name)
            if m:
                ids.append(int(m.group(1)))
    return max(ids) + 1


def switch_current(index_dir: Path, name: str) -> None:
    """Point index/CURRENT at generation `name`: temporary file, fsync, rename, fsync of the folder."""
    tmp = index_dir / f".{CURRENT}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, index_dir / CURRENT)
    _fsync(index_dir)


def clean_index_dir(index_dir: Path, keep: int) -> list[str]:
    """Remove what a killed writer left (`.gen-*.tmp`, gen folders without
    files.json, temporary CURRENT files), the old flat layout once CURRENT
    exists, and complete generations beyond the current one and the `keep`
    newest others. Call under the project lock. Returns the names removed."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        return []
    current = current_generation(index_dir)
    removed = []
    for p in index_dir.iterdir():
        unfinished = _TMP.match(p.name) or (_GEN.match(p.name) and not (p / "files.json").exists())
        stale_tmp = p.name.startswith(f".{CURRENT}.") and p.name.endswith(".tmp")
        flat = p.name in _FLAT and current is not None and current != index_dir
        if (unfinished and p != current) or stale_tmp or flat:
            _remove(p)
            removed.append(p.name)
    others = [p for _, p in generations(index_dir) if p != current]
    for p in others[: max(len(others) - keep, 0)]:
        trash = index_dir / f".{p.name}.tmp"  # renamed first: a kill while deleting leaves no half generation
        os.rename(p, trash)
        _remove(trash)
        removed.append(p.name)
    for p in index_dir.parent.glob(f".{index_dir.name}.*.tmp"):  # the atomic_dir of older versions
        _remove(p)
    return removed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def write_index_folder(path: Path, *, dense, sparse, chunks: pa.Table, meta: dict, keep: int = 2,
                       command: str = "index", counts: dict | None = None, docs: pa.Table | None = None) -> Path:
    """Write a new generation of the index folder `path` and make it current.

    `dense` (DenseIndex), `sparse` (SparseIndex), `chunks` (the INDEX_COLUMNS
    of chunks.parquet plus `label`), `docs` (INDEX_DOC_COLUMNS of docs.parquet,
    or None), `meta` (meta.json; a `generation` entry
    {id, name, time, command, counts} is added). Then removes unfinished and
    surplus generations (`clean_index_dir` with `keep`). Call under the
    project lock. On error the current generation is left as it was.
    Returns the new generation's folder.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    clean_index_dir(path, keep)
    gen_id = _next_id(path)
    name = generation_name(gen_id)
    tmp = path / f".{name}.tmp"
    try:
        tmp.mkdir()
        dense.save(tmp / "dense")
        sparse.save(tmp / "sparse")
        write_index_chunks(chunks, tmp)  # chunks.arrow, memory-mapped when read (rag_cli.store.index_chunks)
        if docs is not None:
            pq.write_table(docs, tmp / "docs.parquet", compression="zstd")
        meta = {**meta, "generation": {"id": gen_id, "name": name, "command": command, "counts": counts or {},
                                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        files = {}
        for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
            _fsync(f)
            files[f.relative_to(tmp).as_posix()] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
        with open(tmp / "files.json", "w", encoding="utf-8") as out:
            json.dump({"files": files}, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        for d in (tmp / "dense", tmp / "sparse", tmp):
            _fsync(d)
        os.rename(tmp, path / name)
        _fsync(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    switch_current(path, name)
    clean_index_dir(path, keep)
    return path / name


def rollback(path: Path) -> tuple[str, str]:
    """Make the newest complete generation older than the current one current.
    Call under the project lock. Returns (from name, to name); raises
    BadInput when there is no older generation."""
    path = Path(path)
    current = current_generation(path)
    if current is None or current == path:
        raise BadInput(f"{path} has no generations to roll back to (run `rag index` first)")
    m = _GEN.match(current.name)
    older = [p for i, p in generations(path) if i < int(m.group(1))]
    if not older:
        raise BadInput(f"{path} has no generation older than {current.name} to roll back to "
                       "(old generations are kept with --keep N, config index.keep)")
    switch_current(path, older[-1].name)
    return current.name, older[-1].name


def generation_info(path: Path) -> list[dict]:
    """One dict per complete generation, oldest first: id, name, time,
    command, counts, n_chunks, model_fingerprint, bytes (on disk), current
    (bool), damaged (None, or the message naming the meta.json / files.json
    that cannot be read; the fields read from it are then None)."""
    current = current_generation(path)
    out = []
    for gen_id, p in generations(path):
        meta: dict = {}
        files: dict | None = None
        damaged = None
        for name in ("files.json", "meta.json"):
            try:
                data = json.loads((p / name).read_text(encoding="utf-8"))
                if name == "files.json":
                    files = {k: int(v["size"]) for k, v in data["files"].items()}
                elif isinstance(data, dict):
                    meta = data
                else:
                    raise ValueError("not a JSON object")
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                damaged = damaged or (f"{p / name} cannot be read ({type(exc).__name__}: {exc}); rebuild the "
                                      "index with `rag index`, or go back to the previous generation with "
                                      "`rag rollback`")
        g = meta.get("generation", {})
        out.append({"id": gen_id, "name": p.name, "time": g.get("time"), "command": g.get("command"),
                    "counts": g.get("counts", {}), "n_chunks": meta.get("n_chunks"),
                    "model_fingerprint": meta.get("model_fingerprint"),
                    "bytes": None if files is None else sum(files.values()), "current": p == current,
                    "damaged": damaged})
    return out
