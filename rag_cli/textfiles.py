"""Reading user-given input files: folder and existence checks, and UTF-8
text lines (gzip when the name ends in .gz). Every failure is a BadInput
naming the file (and the flag that gave it, when known)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Iterator

from rag_cli.errors import BadInput


def not_folder(path: Path, want: str) -> None:
    """Raise BadInput when `path` is a folder (pyarrow would read every
    Parquet file in it as one dataset): "PATH: is a folder, not a file;
    give `want`" (e.g. "one answers/NAME.parquet file")."""
    if Path(path).is_dir():
        raise BadInput(f"{path}: is a folder, not a file; give {want}")


def require_file(path: Path, flag: str = "") -> Path:
    """`path` if it is a file. Raises BadInput naming it (after `flag`, e.g.
    "--corpus", when given): "no such file", or "is a folder, not a file"."""
    where = f"{flag} {path}" if flag else str(path)
    if path.is_dir():
        raise BadInput(f"{where}: is a folder, not a file; give the path of a file")
    if not path.is_file():
        raise BadInput(f"{where}: no such file")
    return path


def text_lines(path: Path, flag: str = "", hint: str = "") -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) for every line of `path`
    (gzip when it ends in .gz). Raises BadInput naming it (after `flag`) when
    it is missing, a folder, or not UTF-8 (then followed by `hint`, if any)."""
    require_file(path, flag)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline=None) as f:
            for lineno, line in enumerate(f, 1):
                yield lineno, line.rstrip("\r\n")
    except UnicodeDecodeError as e:
        where = f"{flag} {path}" if flag else str(path)
        raise BadInput(f"{where}: not UTF-8 text ({e})" + (f"; {hint}" if hint else "")) from e
