"""Memory-mapped stores: a generation opens without reading its vectors, BM25 postings or chunk texts
whole (chunks.arrow, vectors.npy, faiss codes and bm25s arrays are mapped), and generations written
before (chunks.parquet, no backend in rag_dense.json) are still read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rag_cli import Project
from rag_cli.hashing import sha256_file
from rag_cli.index.searcher import Searcher
from rag_cli.store.index_folder import current_generation

DOCS = Path(__file__).resolve().parents[1] / "sample_corpus" / "docs"


@pytest.mark.parametrize("backend", ["hnswlib", "exact", "faiss"])
def test_a_generation_opens_memory_mapped(tmp_path, tiny_bi_encoder, backend, request):
    if backend == "faiss":
        request.getfixturevalue("faiss")
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)}, index={"backend": backend})
    p.build([DOCS])
    gen = current_generation(p.index_dir)
    assert (gen / "chunks.arrow").exists() and not (gen / "chunks.parquet").exists()
    import pyarrow as pa

    allocated = pa.total_allocated_bytes()
    s = Searcher.open(p.index_dir)
    assert s.meta["dense"]["backend"] == backend
    # the chunks are a memory-mapped Arrow table: opening allocated less than its texts take
    # (only docs.parquet, read whole, is allocated)
    assert pa.total_allocated_bytes() - allocated < s.chunks.column("text").nbytes / 2
    assert type(s.sparse.retriever.scores["data"]) is np.memmap  # bm25s loaded with mmap=True
    if backend != "hnswlib":
        assert type(s.dense.vecs) is np.memmap  # vectors.npy, mapped
    hits = s.search("reciprocal rank fusion", mode="hybrid", k=3,
                    query_vector=np.ones(s.meta["dim"], np.float32))
    assert len(hits) == 3 and all(h.text for h in hits)
    # the ids of the hits were read row by row: no column was turned into a Python list
    assert s._chunk_ids._list is None and s._doc_ids._list is None
    assert s.row_of(hits[0].chunk_id) == hits[0].row  # a lookup by id reads the column once


def test_a_generation_of_an_earlier_version_is_read(tmp_path, tiny_bi_encoder):
    """chunks.parquet in place of chunks.arrow, and rag_dense.json without `backend` (hnswlib)."""
    import pyarrow.parquet as pq

    from rag_cli.store.index_chunks import read_index_chunks

    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.build([DOCS])
    before = [(h.chunk_id, round(h.score, 5)) for h in p.search("bm25 term weighting", k=5)]
    gen = current_generation(p.index_dir)
    pq.write_table(read_index_chunks(gen), gen / "chunks.parquet", compression="zstd")
    (gen / "chunks.arrow").unlink()
    dense_json = gen / "dense" / "rag_dense.json"
    params = json.loads(dense_json.read_text())
    del params["backend"], params["build_seconds"]
    dense_json.write_text(json.dumps(params))
    listing = json.loads((gen / "files.json").read_text())
    del listing["files"]["chunks.arrow"]
    for rel in ("chunks.parquet", "dense/rag_dense.json"):
        listing["files"][rel] = {"size": (gen / rel).stat().st_size, "sha256": sha256_file(gen / rel)}
    (gen / "files.json").write_text(json.dumps(listing))
    from rag_cli.store.index_folder import switch_current

    switch_current(p.index_dir, gen.name)  # CURRENT records the sha256 of files.json
    again = Project.open(p.root)
    assert [(h.chunk_id, round(h.score, 5)) for h in again.search("bm25 term weighting", k=5)] == before
    again.index()  # the next writer writes the new layout
    assert (current_generation(p.index_dir) / "chunks.arrow").exists()


def test_a_search_process_never_imports_pandas(tmp_path, make_sample_project):
    """pyarrow imports pandas on its first conversion (`to_numpy`, `pa.array`) when pandas is installed
    (pymilvus and Ray bring it): half a second of a one-query process on a slow CPU. Opening a generation
    and searching it must not convert that way (`store.index_chunks.labels_of`). A finder records any
    attempt to import pandas, so this holds whether or not pandas is installed."""
    import subprocess
    import sys

    p = make_sample_project(tmp_path / "p")
    code = ("import sys\n"
            "tried = []\n"
            "class F:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'pandas': tried.append(name)\n"
            "sys.meta_path.insert(0, F())\n"
            "from rag_cli import Project\n"
            f"p = Project.open({str(p.root)!r})\n"
            "for mode in ('sparse', 'dense', 'hybrid'):\n"
            "    assert p.search('What does b control in BM25?', mode=mode, k=3).hits\n"
            "print(sorted(set(tried)))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
