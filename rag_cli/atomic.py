"""Atomic file writes: every output goes to a temporary file in the same
folder and is renamed into place, so a failed or interrupted stage leaves the
previous file intact and never a half-written one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it onto `path`.

    The temporary file (or folder, if the caller makes one there) is removed
    when the body raises. Parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


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


def write_parquet(path: str | os.PathLike, table) -> None:
    """Write a `pyarrow.Table` to `path` atomically (zstd-compressed Parquet)."""
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
