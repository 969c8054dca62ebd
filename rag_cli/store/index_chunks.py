"""`chunks.arrow` of an index generation: the chunk columns the searcher
reads (`INDEX_COLUMNS` present, plus `label`), as an Arrow IPC file.

The file is uncompressed and opened memory-mapped, so opening a generation
reads none of it: a search reads the pages of the rows it shows (their id,
document and text), a filter the columns it tests. At a million chunks the
texts alone are hundreds of megabytes, which a Parquet file would have to
decompress whole. It opens in pandas (`pd.read_feather`), Polars
(`pl.read_ipc`) and DuckDB (the arrow extension) like the Parquet files.

Generations written before it keep `chunks.parquet`, which is read whole.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

CHUNKS_FILE = "chunks.arrow"
LEGACY_CHUNKS_FILE = "chunks.parquet"

#: Rows per record batch: a row's text is found without scanning the others.
BATCH_ROWS = 65536


def write_index_chunks(table: pa.Table, folder: Path) -> Path:
    """Write `table` as `folder`/chunks.arrow (IPC file format, uncompressed). Returns the path."""
    path = Path(folder) / CHUNKS_FILE
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=BATCH_ROWS)
    return path


def read_index_chunks(gen: Path) -> pa.Table:
    """The chunks of generation `gen`: chunks.arrow memory-mapped (no data read yet), else the older
    chunks.parquet read whole. Raises FileNotFoundError when neither exists, pyarrow's errors when
    the file is damaged."""
    path = Path(gen) / CHUNKS_FILE
    if path.exists():
        return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    import pyarrow.parquet as pq

    return pq.ParquetFile(Path(gen) / LEGACY_CHUNKS_FILE).read()  # read_table would import pyarrow.dataset


def labels_of(chunks: pa.Table):
    """The `label` column of `chunks` as an int64 NumPy array of shape (rows,), or None when the
    table has none (older generations: the label is the row number).

    Read from the column's buffers rather than with `to_numpy()`: pyarrow's conversions import
    pandas when it is installed (pymilvus and Ray bring it), which costs a one-query process a
    large share of its start-up."""
    import numpy as np

    if "label" not in chunks.column_names:
        return None
    col = chunks.column("label")
    if col.null_count or not pa.types.is_integer(col.type):
        return col.to_numpy(zero_copy_only=False).astype(np.int64)
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(col.type) else 'u'}{col.type.bit_width // 8}")
    parts = [np.frombuffer(c.buffers()[1], dtype)[c.offset:c.offset + len(c)] for c in col.chunks]
    return (np.concatenate(parts) if parts else np.zeros(0, dtype)).astype(np.int64, copy=False)
