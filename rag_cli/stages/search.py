"""`rag search`: one query, or every query of a file into a run.

Retrieval itself (dense, sparse, hybrid; query normalisation) is
`rag_cli.index.searcher.Searcher`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rag_cli.config import SearchConfig
from rag_cli.errors import BadInput
from rag_cli.index.searcher import Hit, Searcher, check_query
from rag_cli.progress import Progress
from rag_cli.store.runs import RunRow, trec_escaped, write_run

if TYPE_CHECKING:
    from rag_cli.project import Project


def search_one(searcher: Searcher, query: str, cfg: SearchConfig, mask: np.ndarray | None = None) -> list[Hit]:
    """One query with the `[search]` config (mode, k, candidates, rrf_k).

    Raises BadInput for an empty query or one that is not valid Unicode.
    """
    return searcher.search([check_query(query)], mode=cfg.mode, k=cfg.k, candidates=cfg.candidates,
                           rrf_k=cfg.rrf_k, mask=mask)[0]


def search_rows(searcher: Searcher, queries: list[tuple[str, str]], cfg: SearchConfig,
                mask: np.ndarray | None = None, *, batch: int = 64,
                progress: Progress | None = None) -> list[RunRow]:
    """Search (query_id, text) pairs, `batch` queries at a time; returns run rows.
    Progress: ("searching", queries done, queries)."""
    rows: list[RunRow] = []
    for start in range(0, len(queries), batch):
        part = queries[start:start + batch]
        results = searcher.search([t for _, t in part], mode=cfg.mode, k=cfg.k, candidates=cfg.candidates,
                                  rrf_k=cfg.rrf_k, mask=mask)
        for (qid, text), hits in zip(part, results):
            rows.extend(RunRow(qid, text, h.rank, h.chunk_id, h.doc_id, h.score, h.stage) for h in hits)
        if progress is not None:
            progress("searching", start + len(part), len(queries))
    return rows


def run_queries(project: "Project", searcher: Searcher, queries_path: Path, cfg: SearchConfig,
                mask: np.ndarray | None = None, *, path: Path, fmt: str = "parquet",
                progress: Progress | None = None) -> tuple[Path, list[str]]:
    """Search every query of `queries_path` and write the run (Parquet or TREC) to `path`.

    Returns (the path written, the ids a TREC run holds percent-encoded
    because they contain whitespace: `rag_cli.store.runs.trec_escaped`).
    Raises BadInput for a bad query file or `fmt`.
    """
    from rag_cli.evaluate.datasets import read_queries

    if fmt not in ("parquet", "trec"):
        raise BadInput(f"--format {fmt!r} is unknown; use parquet or trec")
    rows = search_rows(searcher, read_queries(queries_path), cfg, mask, progress=progress)
    write_run(path, rows, fmt=fmt)
    project.record(f"search:{Path(path).name}", params=dict(cfg.__dict__), inputs={"queries": str(queries_path)},
                   outputs=[str(path)], rows=len(rows), model_fingerprint=searcher.meta["model_fingerprint"])
    return Path(path), (trec_escaped(rows) if fmt == "trec" else [])
