"""The project folder's files, one module per file format.

Each module holds its file's schema, its (atomic) writer, its reader and
its validation, so the format of a file is found by the file's name:

- `docs`: docs.parquet, one row per source document.
- `chunks`: chunks.parquet (and parents.parquet), one row per chunk.
- `embeddings`: embeddings.parquet and the vector cache under cache/vectors/.
- `index_folder`: index/ (hnswlib + bm25s + the chunk columns + meta.json).
- `runs`: runs/NAME.parquet and TREC run files.
- `answers`: answers/NAME.parquet.
- `eval_reports`: eval/NAME.json.
- `manifest`: manifest.json.
- `parquet`: the shared read policy (a damaged file is bad input naming it).

The layout and columns are described in docs/layout.md.
"""
