"""index/: generations of the dense (hnswlib) and sparse (bm25s) indexes.

    index/
      CURRENT          the pointer to the current generation (see `current_pointer`):
                         gen-000007
                         files.json sha256 <hex of gen-000007/files.json>
                         highest 9
                         check <sha256 hex of the three lines above>
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
N+1 is written.

CURRENT carries its own check: the generation's name, the sha256 of that
generation's files.json (so the pointer is validated against the
generation's own content when it is opened), the highest generation number
ever given out (numbers only grow, also after `rollback` and `--keep 0`: a
name is never reused), and a sha256 of these three lines. A CURRENT that
fails any of these is BadInput naming it. The one-line CURRENT of earlier
versions (just the name) is still read, but only when it names the newest
complete generation: without a check line, a name from a backup or written
by hand would silently serve an older index.

A generation folder is complete once `files.json` is in it; unfinished
ones (a killed writer) are removed by the next writer, which also keeps
only the `keep` newest generations besides the current one (a surplus
generation is renamed to `.gen-<id>.tmp` before it is deleted, so a writer
killed while deleting never leaves a half generation that looks complete).
While CURRENT is damaged a writer removes no complete generation.

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
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from rag_cli.atomic import is_no_space, no_space
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
_POINTER_NAME = re.compile(r"^gen-(\d{6,})$")  # generation_name() gives at least 6 digits
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: What to do about a damaged or unusable CURRENT.
_FIX_POINTER = ("write a new generation with `rag index` (it replaces CURRENT), or restore the file; "
                "the generations themselves are not changed")
_TMP = re.compile(r"^\.gen-(\d+)\.tmp$")
_FLAT = ("meta.json", "chunks.parquet", "chunks.arrow", "docs.parquet", "dense", "sparse")


def generation_name(gen_id: int) -> str:
    return f"gen-{gen_id:06d}"


class GenerationVanished(Exception):
    """The generation folder disappeared while it was opened (a writer
    removed it after CURRENT moved on): read CURRENT again and retry."""


@dataclass(frozen=True)
class Pointer:
    """The content of index/CURRENT: `name` (gen-NNNNNN), `files_sha256`
    (sha256 of that generation's files.json; None in a one-line CURRENT of
    an earlier version), `highest` (the highest generation number given out;
    None in a one-line CURRENT), `raw` (the file's bytes)."""

    index_dir: Path
    name: str
    files_sha256: str | None
    highest: int | None
    raw: bytes

    @property
    def path(self) -> Path:
        """The generation's folder."""
        return self.index_dir / self.name

    @property
    def id(self) -> int:
        return int(self.name[4:])


def _pointer_text(name: str, files_sha256: str, highest: int) -> str:
    body = f"{name}\nfiles.json sha256 {files_sha256}\nhighest {highest}\n"
    return body + f"check {hashlib.sha256(body.encode()).hexdigest()}\n"


def current_pointer(index_dir: Path) -> Pointer | None:
    """index/CURRENT read and checked, or None when there is none.

    Raises BadInput naming CURRENT when it is not a pointer this tool wrote:
    not UTF-8, not the four lines (name, files.json sha256, highest, check)
    or the one-line name of earlier versions, a name that is not gen-NNNNNN,
    a one-line name that is not the newest complete generation, or a check line that does not match the lines above (a flipped digit, a
    truncated file)."""
    index_dir = Path(index_dir)
    f = index_dir / CURRENT
    try:
        raw = f.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadInput(f"{f} cannot be read ({exc.strerror or exc}); {_FIX_POINTER}") from exc

    def bad(why: str) -> BadInput:
        return BadInput(f"{f} is damaged: {why}, so it does not say which index generation is current; "
                        f"{_FIX_POINTER}")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("it is not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) <= 1:  # the one-line CURRENT of earlier versions
        name = lines[0].strip() if lines else ""
        if not _POINTER_NAME.match(name):
            raise bad(f"{name!r} is not a generation name like gen-000001")
        newest = max(generations(index_dir), default=None)
        if newest is not None and newest[1].name != name:  # no check line: only the newest is believed
            raise BadInput(f"{f} holds only a generation name (the form of earlier versions, which carries no "
                           f"check) and names {name}, but {newest[1].name} is the newest complete generation; "
                           f"that form is obeyed only when it names the newest one; "
                           f"{_FIX_POINTER}")
        return Pointer(index_dir, name, None, None, raw)
    if len(lines) != 4:
        raise bad(f"it has {len(lines)} lines where a pointer has 4 (name, files.json sha256, highest, check)")
    body = "".join(line + "\n" for line in lines[:3])
    if lines[3] != f"check {hashlib.sha256(body.encode()).hexdigest()}":
        raise bad("its check line does not match the lines above it (changed or cut short)")
    name, sha_line, high_line = lines[:3]
    files_sha = sha_line.removeprefix("files.json sha256 ")
    highest = high_line.removeprefix("highest ")
    if (not _POINTER_NAME.match(name) or not sha_line.startswith("files.json sha256 ") or not _HEX64.match(files_sha)
            or not high_line.startswith("highest ") or not highest.isdigit() or int(highest) < int(name[4:])):
        raise bad("its lines are not a generation name, a files.json sha256 and the highest generation number")
    return Pointer(index_dir, name, files_sha, int(highest), raw)


def current_generation(index_dir: Path) -> Path | None:
    """The current generation's folder (read from CURRENT), the index folder
    itself for the old flat layout, or None when there is no index. Raises
    BadInput naming CURRENT when it is damaged (`current_pointer`)."""
    index_dir = Path(index_dir)
    ptr = current_pointer(index_dir)
    if ptr is None:
        return index_dir if (index_dir / "meta.json").exists() else None
    return ptr.path


def generations(index_dir: Path) -> list[tuple[int, Path]]:
    """Complete generations (with files.json), oldest first: [(id, folder)]."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for p in Path(index_dir).iterdir():
            m = _GEN.match(p.name)
            if m and (p / "files.json").exists():
                out.append((int(m.group(1)), p))
    return sorted(out)


def verify_generation(gen: Path, *, full: bool = False, sizes_only: bool = False,
                      files_sha256: str | None = None, fix: str | None = None) -> str:
    """Compare the files of generation `gen` with its files.json: sizes
    always, sha256 of files up to VERIFY_SHA256_MAX_BYTES (of all with
    `full`, of none with `sizes_only`); with `files_sha256` (CURRENT's), also
    the sha256 of files.json itself.
    Returns the sha256 of files.json. Raises BadInput naming the first file
    that is missing, of another size or another sha256, ending with `fix`
    (default: rebuild or roll back); GenerationVanished when the folder
    itself disappeared meanwhile."""
    fix = fix or "rebuild the index with `rag index`, or go back to the previous generation with `rag rollback`"
    try:
        raw = (gen / "files.json").read_bytes()
    except FileNotFoundError:
        if not gen.exists():
            raise GenerationVanished(gen) from None
        raise BadInput(f"{gen / 'files.json'} is missing: {gen} is not a complete generation; {fix}") from None
    files_sha = hashlib.sha256(raw).hexdigest()
    if files_sha256 is not None and files_sha != files_sha256:
        raise BadInput(f"{gen.parent / CURRENT} points at {gen.name} with a files.json of sha256 "
                       f"{files_sha256[:12]}..., but {gen / 'files.json'} has sha256 {files_sha[:12]}...: CURRENT or "
                       f"that generation is damaged; {fix}")
    try:
        listed = json.loads(raw.decode("utf-8"))["files"]
        items = [(rel, int(want["size"]), want["sha256"]) for rel, want in listed.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"{gen / 'files.json'} cannot be read ({type(exc).__name__}: {exc}); {fix}") from exc
    for rel, want_size, want_sha in items:
        f = gen / rel
        try:
            size = f.stat().st_size
            if size != want_size:
                raise BadInput(f"{f} is damaged: {size} bytes where {want_size} were written "
                               f"(truncated or overwritten); {fix}")
            if not sizes_only and (full or size <= VERIFY_SHA256_MAX_BYTES) and sha256_file(f) != want_sha:
                raise BadInput(f"{f} is damaged: its sha256 differs from the one written; {fix}")
        except FileNotFoundError:  # between the size check and the hash too: a writer removed the generation
            if not gen.exists():
                raise GenerationVanished(gen) from None
            raise BadInput(f"{f} is missing from the index generation {gen.name}; {fix}") from None
    return files_sha


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _readable_pointer(index_dir: Path) -> Pointer | None:
    """CURRENT, or None when it is missing or damaged (for writers, which replace it)."""
    try:
        return current_pointer(index_dir)
    except BadInput:
        return None


def _next_id(index_dir: Path) -> int:
    """One more than the highest generation number given out: of the
    folders there (complete, unfinished or being removed) and the `highest`
    CURRENT remembers (generations removed since, e.g. after a rollback and
    `--keep 0`). Numbers only grow, so a name never means two generations."""
    ids = [0]
    with contextlib.suppress(FileNotFoundError):
        for p in index_dir.iterdir():
            m = _GEN.match(p.name) or _TMP.match(p.name)
            if m:
                ids.append(int(m.group(1)))
    ptr = _readable_pointer(index_dir)
    if ptr is not None:
        ids += [ptr.id, ptr.highest or 0]
    return max(ids) + 1


def switch_current(index_dir: Path, name: str, highest: int | None = None) -> None:
    """Point index/CURRENT at generation `name` (complete: its files.json is
    hashed into the pointer), remembering the highest generation number
    given out (`highest`, the one CURRENT had, and `name`'s): temporary file,
    fsync, rename, fsync of the folder."""
    index_dir = Path(index_dir)
    files_sha = sha256_file(index_dir / name / "files.json")
    ptr = _readable_pointer(index_dir)
    top = max(int(name[4:]), highest or 0, (ptr.highest or ptr.id) if ptr is not None else 0)
    tmp = index_dir / f".{CURRENT}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(_pointer_text(name, files_sha, top))
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
    try:
        current = current_generation(index_dir)
    except BadInput:  # a damaged CURRENT: remove only what is surely unfinished, keep every complete generation
        current, keep = None, len(generations(index_dir))
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
                       command: str = "index", counts: dict | None = None, docs: pa.Table | None = None,
                       publish=None) -> Path:
    """Write a new generation of the index folder `path` and make it current.

    `dense` (DenseIndex), `sparse` (SparseIndex), `chunks` (the INDEX_COLUMNS
    of chunks.parquet plus `label`), `docs` (INDEX_DOC_COLUMNS of docs.parquet,
    or None), `meta` (meta.json; a `generation` entry
    {id, name, time, command, counts} is added). `publish(folder)`, when
    given, is called with the complete generation folder before CURRENT
    moves to it (a serving backend copies it out: Milvus); if it raises,
    the folder is removed and CURRENT is not moved. Then removes unfinished and
    surplus generations (`clean_index_dir` with `keep`). Call under the
    project lock. On error the current generation is left as it was.
    Returns the new generation's folder.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    gen_id = _next_id(path)  # before cleaning: the folders removed now still count
    clean_index_dir(path, keep)
    name = generation_name(gen_id)
    tmp = path / f".{name}.tmp"
    writing = tmp
    try:
        tmp.mkdir()
        writing = tmp / "dense"
        dense.save(writing)
        writing = tmp / "sparse"
        sparse.save(writing)
        writing = tmp / "chunks.arrow"
        write_index_chunks(chunks, tmp)  # chunks.arrow, memory-mapped when read (rag_cli.store.index_chunks)
        if docs is not None:
            writing = tmp / "docs.parquet"
            pq.write_table(docs, writing, compression="zstd")
        meta = {**meta, "generation": {"id": gen_id, "name": name, "command": command, "counts": counts or {},
                                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
        writing = tmp / "meta.json"
        writing.write_text(json.dumps(meta, indent=2), encoding="utf-8")
        writing = tmp / "files.json"
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
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_no_space(exc):
            raise no_space(writing, exc, generation_bytes(dense, chunks, docs, path),
                           kept="the current index generation is unchanged and still searched") from exc
        raise
    if publish is not None:
        try:
            publish(path / name)
        except BaseException:
            trash = path / f".{name}.tmp"  # renamed first, as clean_index_dir removes a generation
            os.rename(path / name, trash)
            _remove(trash)
            raise
    try:
        switch_current(path, name, gen_id)
    except OSError as exc:
        if is_no_space(exc):
            raise no_space(path / CURRENT, exc, 4096, kept=f"{path / name} was written, but the current "
                           "index generation is still the one before") from exc
        raise
    clean_index_dir(path, keep)
    return path / name


def generation_bytes(dense, chunks: pa.Table, docs: pa.Table | None, index_dir: Path) -> int:
    """About how many bytes a new generation takes: the HNSW graph (vectors,
    level-0 links and labels of every element, deleted ones included), the
    BM25 index (as big as the current generation's, else about the size of
    the chunk texts), the chunk and document tables (uncompressed size)."""
    try:
        n = int(dense.index.get_current_count())
        dim, m = int(dense.index.dim), int(dense.index.M)
    except Exception:  # not an hnswlib index (a test double): count the chunks
        n, dim, m = chunks.num_rows, int(dense.params.get("dim", 0)) if hasattr(dense, "params") else 0, 16
    graph = n * (4 * dim + 8 * m + 16) + 4096
    sparse = 0
    with contextlib.suppress(BadInput, OSError):
        cur = current_generation(index_dir)
        if cur is not None and cur != index_dir:
            sparse = sum(f.stat().st_size for f in (cur / "sparse").rglob("*") if f.is_file())
    if not sparse and "text" in chunks.column_names:
        sparse = chunks.column("text").nbytes
    return graph + sparse + chunks.nbytes + (docs.nbytes if docs is not None else 0)


def rollback(path: Path, before=None) -> tuple[str, str]:
    """Make the newest complete generation older than the current one current.
    The target is checked first, every file hashed against its files.json
    (as `rag status --verify` does), then `before(target folder)` is called
    when given (a serving backend checks it can switch: Milvus). Call under
    the project lock. Returns (from name, to name); raises BadInput when there
    is no older generation, or when the target is damaged (naming the file),
    and what `before` raises; CURRENT is then left as it was."""
    path = Path(path)
    current = current_generation(path)
    if current is None or current == path:
        raise BadInput(f"{path} has no generations to roll back to (run `rag index` first)")
    m = _GEN.match(current.name)
    older = [p for i, p in generations(path) if i < int(m.group(1))]
    if not older:
        raise BadInput(f"{path} has no generation older than {current.name} to roll back to "
                       "(old generations are kept with --keep N, config index.keep)")
    target = older[-1]
    verify_generation(target, full=True, fix=f"not rolled back: {path / CURRENT} still points at {current.name} "
                                              f"(remove the damaged generation {target} to roll back past it)")
    if before is not None:
        before(target)
    switch_current(path, target.name)
    return current.name, target.name


def generation_info(path: Path) -> list[dict]:
    """One dict per complete generation, oldest first: id, name, time,
    command, counts, n_chunks, model_fingerprint, dense (meta.json's: the dense backend and its
    parameters; None before backends were recorded), bytes (on disk), current
    (bool), damaged (None, or the message naming the meta.json / files.json
    that cannot be read; the fields read from it are then None). A damaged
    CURRENT marks no generation current."""
    try:
        current = current_generation(path)
    except BadInput:
        current = None
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
                    "model_fingerprint": meta.get("model_fingerprint"), "dense": meta.get("dense"),
                    "bytes": None if files is None else sum(files.values()), "current": p == current,
                    "damaged": damaged})
    return out
