"""`rag search`: one query, or every query of a file into a run.

Retrieval itself (dense, sparse, hybrid; query normalisation) is
`rag_cli.index.searcher.Searcher`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rag_cli.config import SearchConfig
from rag_cli.errors import BadInput
from rag_cli.index.searcher import Searcher
from rag_cli.progress import Progress
from rag_cli.store.runs import Hit, RunRow, trec_escaped, write_run

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder


def _distinct_docs(hits: list[Hit], k: int) -> tuple[list[Hit], int]:
    """The hits up to (and with) the first chunk of the k-th distinct document,
    and the number of distinct documents in them."""
    seen: set[str] = set()
    for i, h in enumerate(hits):
        seen.add(h.doc_id)
        if len(seen) == k:
            return hits[:i + 1], k
    return hits, len(seen)


def search_deep(searcher: Searcher, texts: list[str], cfg: SearchConfig, mask: np.ndarray | None = None) -> list[list[Hit]]:
    """Per query, the top chunks that hold `cfg.k` distinct documents (fewer
    only when the index, or the filter, or BM25's matching chunks run out).

    Searches `cfg.k` chunks first, then twice as deep for the queries still
    short of k documents, until every query has them or nothing more comes
    back; query vectors are computed once. The hits keep their chunk order,
    cut after the first chunk of the k-th document, so the run's MaxP document
    ranking has exactly k documents at the depth asked for.
    """
    from rag_cli.index.searcher import prepare_query

    k = cfg.k
    vectors = None
    if cfg.mode != "sparse":
        vectors = searcher.encode_queries([prepare_query(t) for t in texts])
    n_chunks = searcher.chunks.num_rows
    out: list[list[Hit]] = [[] for _ in texts]
    todo = list(range(len(texts)))
    depth = k
    while todo:
        results = searcher.batch_search([texts[i] for i in todo], **{**asdict(cfg), "k": depth}, mask=mask,
                                        query_vectors=None if vectors is None else vectors[todo])
        short = []
        for i, hits in zip(todo, results):
            out[i], n_docs = _distinct_docs(hits, k)
            if n_docs < k and len(hits) == depth and depth < n_chunks:
                short.append(i)
        todo, depth = short, min(depth * 2, n_chunks)
    return out


def doc_rows(rows: list[RunRow]) -> list[RunRow]:
    """A document-level run from chunk rows (MaxP): per query, each document
    once with its best chunk's score, ranked by that score (ties by doc id,
    descending, as trec_eval orders them); `chunk_id` is the doc id."""
    from rag_cli.store.runs import trec_order

    best: dict[tuple[str, str], RunRow] = {}
    for r in rows:
        key = (r.query_id, r.doc_id)
        if key not in best or r.score > best[key].score:
            best[key] = r._replace(chunk_id=r.doc_id)
    out: list[RunRow] = []
    for group in trec_order(best.values()).values():
        out.extend(r._replace(rank=i) for i, r in enumerate(group, 1))
    return out


def search_rows(searcher: Searcher, queries: list[tuple[str, str]], cfg: SearchConfig,
                mask: np.ndarray | None = None, *, batch: int = 64, distinct_docs: bool = True,
                progress: Progress | None = None) -> list[RunRow]:
    """Search (query_id, text) pairs, `batch` queries at a time; returns run rows.

    With `distinct_docs` a query's rows hold `cfg.k` distinct documents (see
    `search_deep`); otherwise they are its top `cfg.k` chunks.
    Progress: ("searching", queries done, queries)."""
    rows: list[RunRow] = []
    for start in range(0, len(queries), batch):
        part = queries[start:start + batch]
        texts = [t for _, t in part]
        if distinct_docs:
            results = search_deep(searcher, texts, cfg, mask)
        else:
            results = searcher.batch_search(texts, **asdict(cfg), mask=mask)
        for (qid, text), hits in zip(part, results):
            rows.extend(h._replace(query_id=qid, query=text, row=None, cosine=None, text="") for h in hits)
        if progress is not None:
            progress("searching", start + len(part), len(queries))
    return rows


def run_queries(project: "ProjectFolder", searcher: Searcher, queries_path: Path, cfg: SearchConfig,
                mask: np.ndarray | None = None, *, path: Path, fmt: str = "parquet", level: str = "chunk",
                progress: Progress | None = None) -> tuple[Path, list[str]]:
    """Search every query of `queries_path` down to `cfg.k` distinct documents
    and write the run (Parquet or TREC) to `path`: chunk rows (`level`
    "chunk") or one row per document, MaxP (`level` "doc", see `doc_rows`).

    Returns (the path written, the ids a TREC run holds percent-encoded
    because they contain whitespace: `rag_cli.store.runs.trec_escaped`).
    Raises BadInput for a bad query file, `fmt` or `level`.
    """
    from rag_cli.evaluate.datasets import read_queries

    if fmt not in ("parquet", "trec"):
        raise BadInput(f"--format {fmt!r} is unknown; use parquet or trec")
    if level not in ("chunk", "doc"):
        raise BadInput(f"--level {level!r} is unknown; use chunk (one row per chunk) or doc (one per document, MaxP)")
    rows = search_rows(searcher, read_queries(queries_path), cfg, mask, progress=progress)
    if level == "doc":
        rows = doc_rows(rows)
    write_run(path, rows, fmt=fmt)
    project.record(f"search:{Path(path).name}", params={**cfg.__dict__, "level": level},
                   inputs={"queries": str(queries_path)}, outputs=[str(path)], rows=len(rows),
                   model_fingerprint=searcher.meta["model_fingerprint"])
    return Path(path), (trec_escaped(rows) if fmt == "trec" else [])
