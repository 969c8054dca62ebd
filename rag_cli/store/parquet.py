"""Reading the project's Parquet files (docs, chunks, parents, embeddings,
runs) with one error policy: a missing, truncated or otherwise unreadable
file is bad input (`BadInput`, exit 2) whose message names the file, says
what is wrong and what to do (e.g. "run `rag chunk` again"), never a bare
`ArrowInvalid` (exit 1). What is read is validated in full (`validate(full=True)`),
so a flipped bit that leaves a string column without valid UTF-8 is
reported here, naming the file, not later as a bare UnicodeDecodeError."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from rag_cli.errors import BadInput
from rag_cli.textfiles import not_folder

__all__ = ["read_parquet", "open_parquet", "iter_parquet_batches", "rerun"]


def rerun(stage: str) -> str:
    """The usual remedy for a damaged stage output: "run `rag STAGE` again"."""
    return f"run `rag {stage}` again"


def _unreadable(path: Path, exc: Exception, remedy: str) -> BadInput:
    return BadInput(f"{path}: cannot be read as Parquet ({type(exc).__name__}: {exc}); {remedy}")


def _check_columns(path: Path, names: Sequence[str], required: Sequence[str], remedy: str) -> None:
    missing = [c for c in required if c not in names]
    if missing:
        raise BadInput(f"{path}: lacks the column(s) {', '.join(missing)} (has {', '.join(names) or 'none'}); {remedy}")


def read_parquet(path: str | Path, remedy: str, *, columns: Sequence[str] | None = None,
                 required: Sequence[str] = ()) -> pa.Table:
    """Read a whole Parquet file (or only `columns`) into a `pyarrow.Table`.

    Args:
        path: the file.
        remedy: what the user should do if it is unreadable, e.g. `rerun("chunk")`.
        columns: columns to read (all if None).
        required: columns the file must have.

    Raises:
        BadInput: the file is missing or a folder, is not Parquet (truncated, corrupt,
            another format) or lacks a `required` column; the message names
            `path` and ends with `remedy`.
    """
    path = Path(path)
    not_folder(path, f"one Parquet file; {remedy}")
    try:
        table = pq.read_table(path, columns=list(columns) if columns is not None else None)
        table.validate(full=True)  # e.g. strings that are not UTF-8
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise _unreadable(path, exc, remedy) from exc
    pa.default_memory_pool().release_unused()  # the pages and buffers of the read, kept by the allocator
    _check_columns(path, table.column_names, required, remedy)
    return table


def open_parquet(path: str | Path, remedy: str, *, required: Sequence[str] = ()) -> pq.ParquetFile:
    """Open a Parquet file for its schema or row groups without reading it.

    Raises:
        BadInput: as `read_parquet`, for an unreadable footer or a missing
            `required` column.
    """
    path = Path(path)
    not_folder(path, f"one Parquet file; {remedy}")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise _unreadable(path, exc, remedy) from exc
    _check_columns(path, pf.schema_arrow.names, required, remedy)
    return pf


def iter_row_groups(path: str | Path, remedy: str, columns: Sequence[str]) -> Iterator[pa.Table]:
    """Yield each row group of `columns` as a table, one at a time, single-threaded, giving the
    memory of the one before back to the system first: Arrow's allocator keeps freed buffers for
    reuse, and reading a large file whole held 2-3 times its decoded size at the peak (about
    2.4 GB for 600,000 384-dimension vectors, 0.9 GB of them; row group by row group, 1.4 GB).

    Raises:
        BadInput: as `read_parquet`, also for a data page that turns out to be damaged.
    """
    pf = open_parquet(path, remedy, required=columns)
    try:
        for i in range(pf.num_row_groups):
            table = pf.read_row_group(i, columns=list(columns), use_threads=False)
            table.validate(full=True)
            yield table
            del table
            pa.default_memory_pool().release_unused()
    except BadInput:
        raise
    except Exception as exc:  # damaged data pages surface only when read
        raise _unreadable(Path(path), exc, remedy) from exc
    finally:
        pf.close()


def iter_parquet_batches(path: str | Path, remedy: str, columns: Sequence[str],
                         batch_size: int) -> Iterator[pa.RecordBatch]:
    """Yield `RecordBatch`es of at most `batch_size` rows of `columns`.

    Raises:
        BadInput: as `read_parquet`, also for a data page that turns out to be
            damaged part-way through.
    """
    pf = open_parquet(path, remedy, required=columns)
    try:
        for batch in pf.iter_batches(batch_size=batch_size, columns=list(columns)):
            batch.validate(full=True)  # e.g. strings that are not UTF-8
            yield batch
    except Exception as exc:  # damaged data pages surface only when read
        raise _unreadable(Path(path), exc, remedy) from exc
    finally:
        pf.close()
