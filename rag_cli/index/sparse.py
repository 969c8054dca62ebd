"""Sparse retrieval: BM25 with bm25s, for English and Chinese.

The analyzer splits text into runs of CJK ideographs and the rest. CJK runs
are segmented into words with jieba (default dictionary); other text is
lower-cased, split with bm25s's default token pattern ``\\b\\w\\w+\\b``,
English stopwords (bm25s's list) are dropped and the words are stemmed with
the Snowball English stemmer (PyStemmer). On English text this is exactly
``bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer("english"))``, so
SciFact reproduces the published bm25s baseline.

Scoring: BM25 with Lucene's idf (Robertson & Zaragoza 2009; Lucene's
``BM25Similarity``), k1 = 1.2 and b = 0.75 by default, as in Anserini.

bm25s builds and saves the index (its eager score matrix in CSC form); a search reads the saved
arrays with NumPy (`Bm25Arrays`, memory-mapped) and sums the query terms' columns as bm25s's
`get_scores` does, so a search process imports neither bm25s nor scipy (docs/startup.md).
The stopword list is a frozen copy of bm25s's English list (`STOPWORDS_EN`;
tests/test_sparse_numpy.py compares the two).
"""

from __future__ import annotations

import json
import logging
import re
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.index.selection import best_k
from rag_cli.loaders.normalize import CJK

_SPLIT = re.compile(rf"([{CJK}]+)")
_IS_CJK = re.compile(rf"[{CJK}]")
_WORD = re.compile(r"(?u)\b\w\w+\b")


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


#: bm25s's English stopwords (`bm25s.stopwords.STOPWORDS_EN`, 0.3.16), copied so that analysing a
#: query does not import bm25s (whose package imports scipy.sparse); a test checks they are equal.
STOPWORDS_EN = (
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
    "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this",
    "to", "was", "will", "with")


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    return frozenset(STOPWORDS_EN)


@lru_cache(maxsize=1)
def _jieba():
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


@lru_cache(maxsize=1 << 18)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def analyze(text: str) -> list[str]:
    """Text -> BM25 terms (list of str): jieba words for CJK, stemmed words otherwise."""
    terms: list[str] = []
    stop = _stopwords()
    for part in _SPLIT.split(text):
        if not part:
            continue
        if _IS_CJK.match(part):
            terms.extend(w for w in _jieba().lcut(part) if w.strip())
        else:
            for w in _WORD.findall(part.lower()):
                if w not in stop:
                    terms.append(_stem(w))
    return terms


class _DocTermIds(Sequence):
    """The term ids of each document, stored flat: document i is
    `ids[offsets[i]:offsets[i + 1]]`, handed out as a list of int when read."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        self.ids, self.offsets = ids, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.ids[self.offsets[i]:self.offsets[i + 1]].tolist()

    def __iter__(self):
        for start, end in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist()):
            yield self.ids[start:end].tolist()


@dataclass
class TermIds:
    """A corpus analysed for bm25s (its `Tokenized` shape: `ids` per document and `vocab`, term ->
    id in order of first appearance). Term ids are kept as one int32 array (4 bytes a term)
    rather than a Python list of lists of str (8 bytes a term for the pointer, and a list per
    document) that bm25s turns into lists of int objects (36 bytes a term): at a million chunks of
    about a hundred terms that was the bulk of `rag index`'s peak memory."""

    ids: _DocTermIds
    vocab: dict[str, int]

    @classmethod
    def analyze(cls, texts: Iterable[str]) -> "TermIds":
        """`analyze` every text (any iterable of str, read once)."""
        vocab: dict[str, int] = {}
        ids = array("i")
        offsets = array("q", [0])
        for text in texts:
            ids.extend([vocab.setdefault(t, len(vocab)) for t in analyze(text)])
            offsets.append(len(ids))
        if not vocab:  # no document has a term: bm25s needs a vocabulary (its empty term, as it adds one)
            vocab[""] = 0
        return cls(_DocTermIds(np.frombuffer(ids, dtype=np.int32) if ids else np.zeros(0, np.int32),
                               np.frombuffer(offsets, dtype=np.int64)), vocab)


@dataclass
class SparseIndex:
    """A bm25s index over chunks; row i of the index is chunk i of `chunks.parquet`."""

    retriever: "object"
    params: dict

    @classmethod
    def build(cls, texts: Iterable[str], *, k1: float = 1.2, b: float = 0.75, method: str = "lucene"
              ) -> "SparseIndex":
        """Index `texts` (n strings, any iterable). Raises BadInput for an unknown `method`."""
        import bm25s

        if method not in ("lucene", "robertson", "atire", "bm25l", "bm25+"):
            raise BadInput(f"--bm25-method {method!r} is unknown; use lucene, robertson, atire, bm25l or bm25+")
        t0 = time.perf_counter()
        retriever = bm25s.BM25(k1=k1, b=b, method=method)
        corpus = TermIds.analyze(texts)
        retriever.index(corpus, show_progress=False)
        return cls(retriever, {"k1": k1, "b": b, "method": method, "n_docs": len(corpus.ids),
                               "analyzer": "jieba+snowball-en", "build_seconds": round(time.perf_counter() - t0, 3)})

    def save(self, folder: Path) -> None:
        """Write the bm25s files into `folder` (which the caller renames into place)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)
        (folder / "rag_sparse.json").write_text(json.dumps(self.params), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> "SparseIndex":
        """Open `folder`'s bm25s index for search with NumPy (`Bm25Arrays.load`: score arrays
        memory-mapped, a query reads only the postings of its terms; no bm25s, no scipy).
        Raises OSError / ValueError for missing or damaged files."""
        retriever = Bm25Arrays.load(Path(folder))
        params = json.loads((Path(folder) / "rag_sparse.json").read_text(encoding="utf-8"))
        return cls(retriever, params)

    def idf(self, terms) -> dict[str, float]:
        """Lucene idf of each analyzed term: ln(1 + (N - df + 0.5) / (df + 0.5)).

        df is the number of indexed chunks containing the term (0 for a term
        the index has never seen, which gets the highest idf).
        """
        r = self.retriever
        n = int(r.scores["num_docs"])
        indptr = r.scores["indptr"]
        out = {}
        for t in terms:
            tid = r.vocab_dict.get(t)
            df = int(indptr[tid + 1] - indptr[tid]) if tid is not None and t else 0
            out[t] = float(np.log(1.0 + (n - df + 0.5) / (df + 0.5)))
        return out

    def coverage(self, query: str, texts: list[str]) -> float:
        """Share of the query's idf mass whose terms occur in `texts`, in [0, 1].

        ``sum(idf(t) for t in Q & T) / sum(idf(t) for t in Q)`` over the sets of
        analyzed terms of the query (Q) and of the texts (T); 0.0 when the query
        has no terms. Rare words weigh most, so a question whose rare words are
        nowhere in the evidence scores low even if "what", "的" or "是" match.
        """
        q = set(analyze(query))
        if not q:
            return 0.0
        found = set()
        for text in texts:
            found.update(analyze(text))
        idf = self.idf(q)
        total = sum(idf.values())
        return sum(v for t, v in idf.items() if t in found) / total if total > 0 else 0.0

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed chunk for `query`: (n,) float32."""
        terms = analyze(query)
        if not terms:
            return np.zeros(self.params["n_docs"], dtype=np.float32)
        return np.asarray(self.retriever.get_scores(terms), dtype=np.float32)

    def search(self, query: str, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` rows with a score > 0: (rows (m,) int64, scores (m,) float32), m <= k.

        `mask` (n,) bool keeps only rows where it is True (a `--filter`).
        """
        s = self.scores(query)
        if mask is not None:
            s = np.where(mask, s, 0.0)
        return top_k(s, k, min_exclusive=0.0)


#: bm25s's file names in a saved index folder (`bm25s.BM25.save`'s defaults).
BM25S_FILES = {"data": "data.csc.index.npy", "indices": "indices.csc.index.npy", "indptr": "indptr.csc.index.npy",
               "vocab": "vocab.index.json", "params": "params.index.json",
               "nonoccurrence": "nonoccurrence_array.index.npy"}
#: The bm25s methods whose score of a document adds the query terms' non-occurrence scores
#: (`bm25s.BM25.methods_requiring_nonoccurrence`: BM25L and BM25+ give a term a score in a document
#: without it, which the eager matrix stores as the difference from that score).
NONOCCURRENCE_METHODS = ("bm25l", "bm25+")


class Bm25Arrays:
    """A saved bm25s index read with NumPy, the part of `bm25s.BM25` that a search uses.

    `scores`: {"data": (nnz,) float32 score of each posting, "indices": (nnz,) int32 its document,
    "indptr": (V + 1,) int64 term t's postings are `[indptr[t], indptr[t + 1])` (CSC by term),
    "num_docs": int}, memory-mapped; `vocab_dict` term -> id (V entries, read whole at load);
    `nonoccurrence_array` (V,) float32 for bm25l / bm25+, else None; `method`, `dtype` from
    params.index.json. `get_scores` repeats `bm25s.BM25.get_scores` (bm25s 0.3.16, `get_scores_from_ids`
    and `_compute_relevance_from_scores`): a zero (num_docs,) array of `dtype`, then for each query
    term id in query order `np.add.at(scores, indices[s:e], data[s:e])`, then plus the sum of the
    non-occurrence scores of the ids; the same operations in the same order, so equal scores.
    """

    def __init__(self, folder: Path, scores: dict, params: dict, vocab: dict[str, int],
                 nonoccurrence: np.ndarray | None):
        self.folder, self.scores, self.params, self.vocab_dict = folder, scores, params, vocab
        self.method, self.dtype = params["method"], np.dtype(params.get("dtype", "float32"))
        self.int_dtype = np.dtype(params.get("int_dtype", "int32"))
        self.nonoccurrence_array = nonoccurrence

    @classmethod
    def load(cls, folder: Path) -> "Bm25Arrays":
        """Open the bm25s files in `folder` (`BM25S_FILES`). Raises OSError when one is missing,
        ValueError when the arrays do not fit together. Everything not memory-mapped is read now
        (the vocabulary too): a searcher keeps working on a generation whose folder a later
        `rag update` removes, as the mapped arrays outlive their files' names."""
        params = json.loads((folder / BM25S_FILES["params"]).read_text(encoding="utf-8"))
        arrays = {k: np.load(folder / BM25S_FILES[k], mmap_mode="r", allow_pickle=False)
                  for k in ("data", "indices", "indptr")}
        if len(arrays["data"]) != len(arrays["indices"]) or len(arrays["indptr"]) < 1 \
                or int(arrays["indptr"][-1]) != len(arrays["data"]):
            raise ValueError(f"{folder}: bm25s arrays of different lengths")
        nonocc = None
        if params["method"] in NONOCCURRENCE_METHODS:
            nonocc = np.load(folder / BM25S_FILES["nonoccurrence"], allow_pickle=False)
        vocab = json.loads((folder / BM25S_FILES["vocab"]).read_text(encoding="utf-8"))
        return cls(folder, {**arrays, "num_docs": int(params["num_docs"])}, params, vocab, nonocc)

    def get_tokens_ids(self, terms: list[str]) -> list[int]:
        """Ids of the terms the vocabulary has, in order, repeats kept (as bm25s)."""
        vocab = self.vocab_dict
        return [vocab[t] for t in terms if t in vocab]

    def get_scores(self, terms: list[str]) -> np.ndarray:
        """(num_docs,) `dtype` BM25 score of every document for the analysed query `terms` (list of str)."""
        data, indices, indptr = self.scores["data"], self.scores["indices"], self.scores["indptr"]
        ids = np.asarray(self.get_tokens_ids(terms), dtype=self.int_dtype)
        scores = np.zeros(self.scores["num_docs"], dtype=self.dtype)
        for start, end in zip(indptr[ids].tolist(), indptr[ids + 1].tolist()):
            np.add.at(scores, indices[start:end], data[start:end])
        if self.nonoccurrence_array is not None:
            scores += self.nonoccurrence_array[ids].sum()
        return scores

    def save(self, folder: str, show_progress: bool = False) -> None:
        """Write the index into `folder` in bm25s's layout (what `bm25s.BM25.save` wrote; a generation
        that keeps the sparse index of the one before it saves it again)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for k in ("data", "indices", "indptr"):
            np.save(folder / BM25S_FILES[k], np.asarray(self.scores[k]), allow_pickle=False)
        if self.nonoccurrence_array is not None:
            np.save(folder / BM25S_FILES["nonoccurrence"], self.nonoccurrence_array, allow_pickle=False)
        (folder / BM25S_FILES["vocab"]).write_text(json.dumps(self.vocab_dict, ensure_ascii=False), encoding="utf-8")
        (folder / BM25S_FILES["params"]).write_text(json.dumps(self.params, indent=4), encoding="utf-8")


def top_k(scores: np.ndarray, k: int, min_exclusive: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the `k` largest `scores`, best first; ties by lower index, also when a tie
    straddles the k-th place (the lowest indices of the tied values are kept).

    Only values > `min_exclusive` are kept when it is given.
    """
    idx = np.arange(len(scores)) if min_exclusive is None else np.flatnonzero(scores > min_exclusive)
    if len(idx) > k:
        idx = idx[best_k(scores[idx], idx, k)]
    order = np.lexsort((idx, -scores[idx]))
    idx = idx[order]
    return idx.astype(np.int64), scores[idx].astype(np.float32)
