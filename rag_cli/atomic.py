"""Atomic file writes: every output goes to a temporary file in the same
folder and is renamed into place, so a failed or interrupted stage leaves the
previous file intact and never a half-written one.

A full disk (ENOSPC, or a quota: EDQUOT) while writing is reported as
`WorkFailed` naming the file and how much space the step needs, instead of
a bare `OSError: [Errno 28] No space left on device` (`no_space`)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from rag_cli.errors import WorkFailed

#: errno values that mean "the disk (or the user's quota) is full".
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(exc: BaseException) -> bool:
    """Whether `exc` is an OSError for a full disk or quota (pyarrow's and
    numpy's included, which carry errno 28 or say so in the message)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in NO_SPACE_ERRNOS or "no space left on device" in str(exc).lower()


def human_bytes(n: int | float) -> str:
    """`n` bytes as '512 B', '3.4 KiB', '12.0 MiB', '1.5 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # unreachable


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free for this user on the file system of `path` (or of its
    nearest existing parent); None when that cannot be asked."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def no_space(path: str | os.PathLike, exc: OSError, need: int | None = None, written: int | None = None,
             kept: str = "the file it would have replaced is unchanged") -> WorkFailed:
    """The error for a write of `path` that failed because the disk is full:
    names the file, how much space the step needs (`need` bytes, an
    estimate; else more than the `written` bytes it got before the disk
    filled), how much is free, and what was kept (`kept`)."""
    free = free_bytes(path)
    if need is not None:
        needs = f"this step needs about {human_bytes(need)} there"
    elif written:
        needs = f"this step needs more than the {human_bytes(written)} it had written"
    else:
        needs = "this step needs more space there"
    has = f", and {human_bytes(free)} are free" if free is not None else ""
    why = os.strerror(exc.errno) if exc.errno in NO_SPACE_ERRNOS else "No space left on device"
    return WorkFailed(f"no space left on the device: {path} could not be written ({why}); "
                      f"{needs}{has}. Free some space (or give the project folder another disk with -p) and run "
                      f"it again; {kept}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "", need: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it onto `path`.

    The temporary file (or folder, if the caller makes one there) is removed
    when the body raises. Parent folders are created. A full disk raises
    WorkFailed naming `path` and `need` (bytes the step needs, an estimate;
    None: more than what was written before the disk filled).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
    except OSError as exc:
        if is_no_space(exc):
            raise no_space(path, exc, need) from exc
        raise
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException as exc:
        written = _size(tmp_path)
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        if is_no_space(exc):
            raise no_space(path, exc, need, written) from exc
        raise


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new temporary folder beside `path`; on success it replaces `path`.

    The old folder is moved aside, the new one renamed into place, then the
    old one removed; on error the temporary folder is removed and `path` is
    untouched.
    """
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes 0700; give the usual mode
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_named(path: str | os.PathLike) -> Iterator[Path]:
    """Yield `path`'s own name inside a temporary folder beside it, for a
    writer that names companion files after its output (an ONNX graph over
    2 GB writes `NAME.data` beside `NAME`). On success every file written
    there moves into place, `path` last, each by an atomic rename; on failure
    the folder is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent) as tmp:
        out = Path(tmp) / path.name
        yield out
        for f in sorted(Path(tmp).iterdir(), key=lambda p: p == out):  # the named file last
            os.chmod(f, 0o666 & ~_umask())
            os.replace(f, path.parent / f.name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj) -> None:
    """Write `obj` as indented UTF-8 JSON (non-ASCII kept) to `path` atomically."""
    write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def write_parquet(path: str | os.PathLike, table, need: int | None = None, **kwargs) -> None:
    """Write a `pyarrow.Table` to `path` atomically (zstd-compressed Parquet;
    `kwargs` go to `pyarrow.parquet.write_table`). `need`: the bytes the
    step needs, said when the disk is full (default: the table's size)."""
    import pyarrow.parquet as pq

    with atomic_path(path, need=table.nbytes if need is None else need) as tmp:
        pq.write_table(table, tmp, compression="zstd", **kwargs)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
