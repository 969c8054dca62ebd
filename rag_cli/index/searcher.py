"""Retrieval over a loaded index folder: dense (HNSW), sparse (BM25) or hybrid.

Hybrid takes the top `candidates` of each retriever and fuses them with the
configured fusion (`search.fusion`: RRF with k = 60 by default, Cormack,
Clarke & Büttcher, SIGIR 2009; or a weighted sum of normalised scores; see
`rag_cli.index.fusion`).

Queries are normalised here, in one place (`prepare_query`: a BOM dropped,
line ends unified, Unicode NFKC, as the documents were; a query typed all in
capitals in lower case), so `ＨＮＳＷ` and `HNSW` retrieve alike whichever
command or API call asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.store.embeddings import NAMED_IDS, bad_vector_rows
from rag_cli.index.fusion import fuse
from rag_cli.loaders.normalize import normalize_text
from rag_cli.index.generation import IndexFolder
from rag_cli.store.runs import Hit

MODES = ("dense", "sparse", "hybrid")


def check_query(query: str) -> str:
    """`query`, or BadInput if it is empty or not valid Unicode (e.g. Latin-1 bytes in a UTF-8 shell).

    Empty means no letter or digit of any script (`str.isalnum`: CJK characters are letters): a query of
    spaces, punctuation, control characters (`\\x07`, `\\x1b`, NUL) or format characters (U+200B) matches
    nothing the tokenizers keep, yet a bi-encoder would still return its nearest chunks."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"the query {query!r} is not valid UTF-8 text; check the terminal's encoding") from None
    if not any(ch.isalnum() for ch in query):
        shown = "" if not query.strip() else f" (it has no letter or digit: {query!r})"
        raise BadInput(f"the query is empty{shown}; give some words to search for")
    return query


def fold_shouting(query: str) -> str:
    """`query` in lower case when every letter in it is an upper-case letter
    (a query typed with caps lock; a query with a letter of a script without
    case, such as a Chinese one with a Latin acronym, is left alone), else
    unchanged. The e5 bi-encoders are case-sensitive and rank worse on
    all-capital text; BM25 lower-cases anyway, so this changes only the
    dense side. `MIT OPENCOURSEWARE指什么？` is kept as it is (docs/evaluation.md)."""
    letters = [ch for ch in query if ch.isalpha()]
    return query.lower() if letters and all(ch.isupper() for ch in letters) else query


def prepare_query(query: str) -> str:
    """A query as the index sees it: normalised like the documents
    (`normalize_text`), an all-capitals query in lower case (`fold_shouting`)."""
    return fold_shouting(normalize_text(query))


def check_mode(mode: str) -> str:
    """`mode`, or BadInput unless it is dense, sparse or hybrid."""
    if mode not in MODES:
        raise BadInput(f"--mode {mode!r} is unknown; use one of {', '.join(MODES)}")
    return mode


def check_index_embedder(path: Path, meta: dict, embedder) -> None:
    """Raise BadInput (saying what to do) when `embedder`'s fingerprint differs
    from the one the index generation at `path` (its meta.json `meta`) was built with."""
    if embedder.folder.fingerprint != meta["model_fingerprint"]:
        model = embedder.folder
        if meta.get("passage_fingerprint") != model.passage_fingerprint:
            what = ("set model.embedder and model.precision in rag.toml back to the ones the index was built "
                    "with, or rerun `rag embed` and `rag index`")
        else:  # the same graph, another query graph
            what = ("only the query graph differs: "
                    + (f"the folder now has {model.query_onnx_path}" if model.query_onnx_path is not None else
                       f"the folder no longer has the query graph the index was built with, beside "
                       f"{model.onnx_path}")
                    + ". Rerun `rag embed` (it reuses every cached vector) and `rag index`")
        dims = ""
        try:
            if embedder.dim != meta["dim"]:
                dims = (f" (the index holds {meta['dim']}-dimension vectors, the embedder gives "
                        f"{embedder.dim}-dimension ones)")
        except Exception:  # noqa: BLE001 - a graph that cannot say its size: the fingerprints say enough
            pass
        raise BadInput(f"the index in {path} was built with model {meta['model_fingerprint']} but the "
                       f"embedder is {model.fingerprint}{dims}; {what}")


@dataclass(eq=False)  # a loaded index is itself: hashed and compared by identity (kept in weak maps)
class Searcher:
    """A loaded index. `embedder` is needed for dense and hybrid modes only.

    `n_queries_truncated` counts the queries, since the index was opened, that
    were longer than the bi-encoder's max_length tokens and were cut before
    encoding (every query encoding goes through `encode_queries`); callers
    report it, as the contract asks.
    """

    index_dir: Path
    meta: dict
    chunks: "object"  # pyarrow.Table of the index's chunk columns
    dense: "object"  # DenseIndex, None unless loaded (`open`'s parts)
    sparse: "object"  # SparseIndex, None unless loaded
    embedder: object | None = None
    docs: "object" = None  # pyarrow.Table of the generation's documents (INDEX_DOC_COLUMNS), or None
    _chunk_ids: "Column" = field(default_factory=lambda: Column(None))
    _doc_ids: "Column" = field(default_factory=lambda: Column(None))
    n_queries_truncated: int = 0
    generation_key: tuple | None = None  # `IndexFolder.key`: which generation this is (never repeats)

    @classmethod
    def open(cls, index_dir: Path, embedder=None, project_root: Path | None = None,
             parts: tuple[str, ...] = ("dense", "sparse")) -> "Searcher":
        """Load the index folder, with the indexes in `parts` ("dense",
        "sparse"; see `IndexFolder.open`). Raises BadInput if it is missing or
        unreadable, or if `embedder`'s fingerprint differs from the one the
        index was built with."""
        folder = IndexFolder.open(index_dir, project_root, parts)
        meta = folder.meta
        if embedder is not None:
            check_index_embedder(folder.path, meta, embedder)
        s = cls(folder.path, meta, folder.chunks, folder.dense, folder.sparse, embedder, folder.docs)
        s._chunk_ids = Column(folder.chunks.column("chunk_id"))
        s._doc_ids = Column(folder.chunks.column("doc_id"))
        s.generation_key = folder.key
        return s

    def mask(self, exprs: str | list[str] | None) -> np.ndarray | None:
        """`--filter` expressions (one or a list, combined with AND) -> (n,)
        bool over the index's chunks, or None when there are none.

        Fields are chunk columns (doc_id, chunk_id, ...), document fields
        (path, title, n_chars) and metadata keys; see `rag_cli.index.filters`
        for the forms (glob, equality, `in`, numeric and date ranges).
        Raises BadInput for a bad expression or an unknown field (listing the fields).
        """
        from rag_cli.index.filters import chunk_mask

        return chunk_mask(exprs, self.chunks, self.docs)

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        """(q, d) float32 bi-encoder vectors of `queries` (normalised first);
        adds the number of queries cut to the model's max_length (tokens) to
        `n_queries_truncated`. Raises BadInput when no embedder is loaded, or
        when the vectors are not of the index's size (a foreign query graph);
        WorkFailed when a vector has NaN/inf or norm zero (names the queries)."""
        if self.embedder is None:
            raise BadInput("dense search needs the embedder the index was built with")
        vectors = self.embedder.encode_queries([prepare_query(q) for q in queries])
        self.n_queries_truncated += int(self.embedder.n_truncated)
        if vectors.shape[1] != self.meta["dim"]:
            folder = self.embedder.folder
            graph = folder.query_onnx_path or folder.onnx_path
            raise BadInput(
                f"{graph} gives {vectors.shape[1]}-dimension query vectors but the index in {self.index_dir} "
                f"holds {self.meta['dim']}-dimension vectors; the query graph must come from the "
                "same model as the graph that embedded the chunks"
            )
        bad = bad_vector_rows(vectors)
        if bad.size:
            graph = self.embedder.folder.query_onnx_path or self.embedder.folder.onnx_path
            raise WorkFailed(f"{graph} gives a query vector with NaN/inf or of norm zero (or near zero) for "
                             + ", ".join(repr(queries[i]) for i in bad[:NAMED_IDS])
                             + "; the model's graph is broken for these texts: use another export of the model")
        return vectors

    def search(self, query: str, *, mode: str = "hybrid", k: int = 10, candidates: int = 100,
               rrf_k: int = 60, mask: np.ndarray | None = None, query_vector: np.ndarray | None = None,
               fusion: str = "rrf", dense_weight: float = 0.5) -> list[Hit]:
        """One query: up to `k` hits, best first (see `batch_search`;
        `query_vector` is its (d,) float32 bi-encoder vector when the caller has it)."""
        return self.batch_search([query], mode=mode, k=k, candidates=candidates, rrf_k=rrf_k, mask=mask,
                                 query_vectors=None if query_vector is None else query_vector.reshape(1, -1),
                                 fusion=fusion, dense_weight=dense_weight)[0]

    def batch_search(self, queries: list[str], *, mode: str = "hybrid", k: int = 10, candidates: int = 100,
                     rrf_k: int = 60, mask: np.ndarray | None = None,
                     query_vectors: np.ndarray | None = None, fusion: str = "rrf",
                     dense_weight: float = 0.5) -> list[list[Hit]]:
        """Rank chunks for each query (normalised first); returns per query up
        to `k` hits, best first (in the manner of Pyserini's `batch_search`).

        `query_vectors` ((q, d) float32) are the queries' bi-encoder vectors
        when the caller has them already; otherwise they are computed here.
        Hybrid fuses the two candidate lists with `fusion` (rrf | minmax |
        zscore, `rag_cli.index.fusion`; `dense_weight` for the weighted sums).
        Raises BadInput for an unknown `mode` or k < 1.
        """
        check_mode(mode)
        if k < 1:
            raise BadInput(f"-k {k}: must be at least 1")
        queries = [prepare_query(q) for q in queries]
        depth = max(k, candidates) if mode == "hybrid" else k
        dense_res: list = [None] * len(queries)
        if mode in ("dense", "hybrid"):
            qv = self.encode_queries(queries) if query_vectors is None else query_vectors
            dense_res = self.dense.search(qv, depth, mask=mask)
        out = []
        for qi, query in enumerate(queries):
            cos = {}
            if dense_res[qi] is not None:
                rows, sims = dense_res[qi]
                cos = {int(r): float(s) for r, s in zip(rows, sims)}
            if mode == "dense":
                ranked = [(int(r), float(s)) for r, s in zip(*dense_res[qi])]
            elif mode == "sparse":
                rows, scores = self.sparse.search(query, depth, mask=mask)
                ranked = [(int(r), float(s)) for r, s in zip(rows, scores)]
            else:
                sparse_res = self.sparse.search(query, depth, mask=mask)
                ranked = fuse(dense_res[qi], sparse_res, fusion=fusion, dense_weight=dense_weight, rrf_k=rrf_k)
            out.append([
                Hit(query=query, rank=i + 1, row=r, chunk_id=self._chunk_ids[r], doc_id=self._doc_ids[r], score=s,
                    stage=mode, cosine=cos.get(r), text=self.text(r))
                for i, (r, s) in enumerate(ranked[:k])
            ])
        return out

    def vectors(self, rows: list[int]) -> np.ndarray:
        """(len(rows), d) float32 stored vectors of index rows (`DenseIndex.vectors`)."""
        return self.dense.vectors(rows)

    def text(self, row: int, column: str = "text") -> str:
        """The `column` (text, embed_text, context) of index row `row`, read from the memory-mapped
        chunks (only that row's pages); `text` as search and ask show it (`shown_text`: with a split
        table's header)."""
        row = int(row)
        value = self.chunks.column(column)[row].as_py()
        if column == "text" and "embed_text" in self.chunks.column_names:
            from rag_cli.store.chunks import shown_text

            paths = self.chunks.column("title_path")[row].as_py() if "title_path" in self.chunks.column_names else None
            value = shown_text(value, self.chunks.column("embed_text")[row].as_py(), paths)
        return value

    def row_of(self, chunk_id: str) -> int | None:
        """The index row of `chunk_id`, or None if it is not in the index."""
        if not hasattr(self, "_row_of"):
            self._row_of = {c: i for i, c in enumerate(self._chunk_ids)}
        return self._row_of.get(chunk_id)


class Column(Sequence):
    """One column of a generation's chunks (a pyarrow ChunkedArray, memory-mapped) as a sequence:
    `col[row]` reads that row only; iterating (or `tolist`) reads the column once and keeps it. A
    search of a million chunks thus reads the ids of its hits, not a million ids."""

    def __init__(self, array):
        self._array = array
        self._list: list | None = None

    def tolist(self) -> list:
        if self._list is None:
            self._list = [] if self._array is None else self._array.to_pylist()
        return self._list

    def __getitem__(self, i):
        if self._list is not None or isinstance(i, slice):
            return self.tolist()[i]
        return self._array[int(i)].as_py()

    def __len__(self) -> int:
        return 0 if self._array is None else len(self._array)

    def __iter__(self):
        return iter(self.tolist())
