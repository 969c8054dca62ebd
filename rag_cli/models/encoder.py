"""Bi-encoder: texts -> vectors with any ONNX export of a sentence embedder.

The graph's `sentence_embedding` output is used when it has one (pooling
done inside the graph); otherwise `last_hidden_state` (or `token_embeddings`)
is pooled over the attention mask, mean or CLS as the model folder says.
Vectors are L2-normalised when the folder says `normalize` (the default for
embedders), so a dot product is the cosine similarity.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.models.folder import ModelFolder
from rag_cli.models.onnx_runtime import DEFAULT_BATCH_TOKENS, OnnxTextModel, Progress

POOLED_OUTPUTS = ("sentence_embedding",)
TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of token vectors over the mask.

    Args:
        hidden: (b, s, d) float32 token vectors.
        mask: (b, s) float32, 1 on tokens, 0 on padding.

    Returns:
        (b, d) float32.
    """
    with np.errstate(all="ignore"):  # inf/NaN from a broken graph: `bad_vector_rows` names them, numpy says nothing
        summed = np.einsum("bsd,bs->bd", hidden, mask, dtype=np.float32)
        counts = np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
        return (summed / counts).astype(np.float32, copy=False)


#: A pooled vector whose norm before normalisation is below this share of
#: its text's typical token-vector norm (the mean L2 norm of its token
#: vectors) is rounding noise: the token vectors cancelled. e5-small's pooled
#: vectors have 0.8-1.0 of their tokens' norm (4.5-5.5 against 4.8-5.6); the
#: float32 rounding of a mean of s tokens is about s * 6e-8 of it.
NEAR_ZERO_SHARE = 1e-4
#: ... and whatever the token vectors, a pooled norm below this (or a graph's
#: own pooled output below it) is taken as zero: real models give norms of
#: order 1 (1 exactly when the graph normalises).
NEAR_ZERO_NORM = 1e-6


def token_scale(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(b,) float32 mean L2 norm of each text's token vectors (over the mask)."""
    with np.errstate(all="ignore"):
        norms = np.sqrt(np.einsum("bsd,bsd->bs", hidden, hidden, dtype=np.float32))
        return (np.einsum("bs,bs->b", norms, mask) / np.maximum(mask.sum(axis=1), 1.0)).astype(np.float32)


def near_zero_rows(pooled: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """(b,) bool: rows of `pooled` (b, d) whose L2 norm (in float64) is below
    NEAR_ZERO_NORM, or below NEAR_ZERO_SHARE x `scale` (each text's mean
    token-vector norm, `token_scale`; None for a graph's pooled output). Rows
    with NaN/inf are not near zero (`bad_vector_rows` names those)."""
    with np.errstate(all="ignore"):
        norms = np.linalg.norm(pooled.astype(np.float64), axis=1)
        floor = np.full(len(norms), NEAR_ZERO_NORM)
        if scale is not None:
            floor = np.fmax(floor, NEAR_ZERO_SHARE * np.asarray(scale, np.float64))
        return np.isfinite(norms) & (norms < floor)


def cls_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The first token's vector ([CLS] / <s>). (b, s, d) -> (b, d) float32."""
    return np.ascontiguousarray(hidden[:, 0, :], dtype=np.float32)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero). (n, d) -> (n, d) float32.

    The norms are taken in float64 (a row of float32 values near 3e38 has a
    norm past float32's range, and would become a zero row). A row with
    inf/NaN becomes NaN without a numpy RuntimeWarning: the callers check
    the vectors (`bad_vector_rows`) and say which texts gave them."""
    with np.errstate(all="ignore"):
        norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
        return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


_POOLERS = {"mean": mean_pool, "cls": cls_pool}


class BiEncoder(OnnxTextModel):
    """Encode texts to (n, d) float32 vectors.

    Args:
        folder: an embedder model folder (`ModelFolder.load`).
        threads: CPU cores to use (that many batches at once on the CPU);
            default all usable cores.
        providers: onnxruntime execution providers; default CPU.
        parallel_batches: True, False or None (by the CPU), see `OnnxTextModel`.

    Queries go through the folder's query graph when it has one
    (`query_encoder`; `rag_cli.models.folder`), passages through its graph;
    each graph is loaded on first use.

    After each `encode*` call, `n_truncated` (int) and `truncated` ((n,)
    bool) say which texts were longer than `folder.max_length` tokens and
    were cut; the caller reports them.

    Raises:
        BadInput: the folder is a cross-encoder, or the graph has no output
            this class can use.
    """

    def __init__(self, folder: ModelFolder, threads: int | None = None, providers: Sequence[str] | None = None,
                 parallel_batches: bool | None = None):
        if folder.kind != "embedder":
            raise BadInput(
                f"model {folder.path} is a {folder.kind}, not an embedder; "
                "use a bi-encoder (sentence embedding) model here, or set kind to embedder in rag_model.json"
            )
        super().__init__(folder, threads, providers, parallel_batches)
        self._output: tuple[str, bool] | None = None
        self._queries: BiEncoder | None = None
        self.use_query_graph = True  # False: queries run this graph too (`rag serve --query-graph passage`)
        self._probed_dim: int | None = None

    @property
    def output(self) -> str:
        """The graph output used: `sentence_embedding`, else token vectors (loads the graph)."""
        if self._output is None:
            self._output = self._pick_output()
        return self._output[0]

    @property
    def pooled(self) -> bool:
        """True when `output` is already one vector per text (no pooling here)."""
        self.output  # noqa: B018  (picks it)
        return self._output[1]

    def _pick_output(self) -> tuple[str, bool]:
        for name in POOLED_OUTPUTS:
            if name in self.outputs:
                return name, True
        for name in TOKEN_OUTPUTS:
            if name in self.outputs:
                return name, False
        if len(self.outputs) == 1:
            (out,) = self.outputs.values()
            return out.name, len(out.shape) == 2
        raise BadInput(
            f"{self.folder.onnx_path}: graph outputs are {', '.join(self.outputs)}; a bi-encoder needs "
            f"one of {', '.join(POOLED_OUTPUTS + TOKEN_OUTPUTS)} (export with task feature-extraction)"
        )

    @property
    def dim(self) -> int:
        """Vector size d: the graph output's static last dimension, else the
        folder's (`ModelFolder.config_dim`), else the size of a probe text's
        vector (encoded once)."""
        last = self.outputs[self.output].shape[-1]
        if isinstance(last, int) and last > 0:
            return int(last)
        if self.folder.config_dim is not None:
            return self.folder.config_dim
        if self._probed_dim is None:
            self._probed_dim = int(self.encode(["probe"]).shape[1])
        return self._probed_dim

    @property
    def query_encoder(self) -> "BiEncoder":
        """What encodes queries: a `BiEncoder` on the folder's query graph
        (`ModelFolder.query_onnx_path`, loaded on first use, same threads and
        providers), or this one when the folder has none or `use_query_graph`
        is False. The fingerprint stays the folder's either way: the
        passages' graph and vectors are the same, only the queries' vectors
        differ (slightly: see docs/models.md)."""
        if self.folder.query_onnx_path is None or not self.use_query_graph:
            return self
        if self._queries is None:
            self._queries = BiEncoder(self.folder.query_folder(), self.threads, self.providers,
                                      self.parallel_batches)
        return self._queries

    def check_query_graph(self, keep: bool = False) -> None:
        """Load the folder's query graph, if it has one, and check that it
        gives vectors of this graph's size, so that a damaged or foreign
        query graph fails before a long `rag embed` rather than at search
        time. Encodes one probe text with each graph; frees the query
        graph's session afterwards unless `keep` (the caller encodes
        queries next).

        Raises:
            BadInput: the query graph cannot be loaded or run, or its
                vectors have another size; the message names the file.
        """
        if self.folder.query_onnx_path is None:
            return
        try:
            d_query = self.query_encoder.encode(["probe"], self.folder.query_prefix).shape[1]
        finally:
            if not keep:
                self._queries = None
        d = self.encode(["probe"], self.folder.passage_prefix).shape[1]
        if d_query != d:
            q = self.folder.query_onnx_path
            raise BadInput(
                f"{q}: the query graph gives {d_query}-dimension vectors but {self.folder.onnx_path.name} gives "
                f"{d}; a query graph must come from the same model (delete {q.name}, or write both again "
                "with `rag models quantize`)"
            )

    def encode_queries(self, texts: Sequence[str], **kwargs) -> np.ndarray:
        """Encode search queries (with the folder's `query_prefix`) with the
        query graph when the folder has one (`query_encoder`): (n, d)
        float32. Sets `truncated` / `n_truncated` as `encode` does."""
        enc = self.query_encoder
        vectors = enc.encode(texts, self.folder.query_prefix, **kwargs)
        self.truncated, self.n_truncated = enc.truncated, enc.n_truncated
        return vectors

    def encode_passages(self, texts: Sequence[str], **kwargs) -> np.ndarray:
        """Encode passages / chunks (with the folder's `passage_prefix`): (n, d) float32."""
        return self.encode(texts, self.folder.passage_prefix, **kwargs)

    def encode(
        self,
        texts: Sequence[str],
        prefix: str = "",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        progress: Progress | None = None,
    ) -> np.ndarray:
        """Encode `prefix + text` for each text.

        Args:
            texts: n strings.
            prefix: put before every text (usually use `encode_queries` /
                `encode_passages`, which pass the folder's prefixes).
            batch_tokens: padded tokens per onnxruntime batch (batch size x
                longest sequence); larger uses more memory.
            progress: progress(done, n) after each batch, in texts.

        Returns:
            (n, d) float32, row i for texts[i]; unit rows if `normalize`.
            Texts longer than max_length tokens are cut, flagged in
            `self.truncated` and counted in `self.n_truncated`.

        Raises:
            TypeError: `texts` is a single string.
        """
        n = len(texts) if not isinstance(texts, str) else 0
        vectors: np.ndarray | None = None
        done = 0
        for idx, part in self.iter_encode(texts, prefix, batch_tokens):
            if vectors is None:
                vectors = np.empty((n, part.shape[1]), dtype=np.float32)
            vectors[idx] = part
            done += len(idx)
            if progress is not None:
                progress(done, n)
        return vectors if vectors is not None else np.zeros((0, self.dim), dtype=np.float32)

    def iter_encode(
        self,
        texts: Sequence[str],
        prefix: str = "",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        length_sorted: bool = True,
        batches: Sequence[np.ndarray] | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Encode `prefix + text` batch by batch, for callers that store
        vectors as they come (`rag embed`).

        The texts are tokenized first (setting `truncated` / `n_truncated` as
        `encode` does), then run in length-sorted token-budget batches
        (in input order if not `length_sorted`; see `plan_batches`), or in
        `batches` (index arrays into `texts`) when given.

        Yields:
            `(idx, vectors)`: idx (b,) int64 positions in `texts`, vectors
            (b, d) float32 (unit rows if `normalize`). A vector whose norm
            before normalisation is near zero (`near_zero_rows`: its
            direction is rounding noise) is a zero row, which callers refuse
            as they refuse any zero vector (`bad_vector_rows`).

        Raises:
            TypeError: `texts` is a single string.
            BadInput: the graph's output is not (batch, tokens, d) or (batch, d).
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        tok = self.tokenizer.tokenize(texts, prefix)
        self.truncated, self.n_truncated = tok.truncated, tok.n_truncated
        pool = _POOLERS[self.folder.pooling]

        def reduce(out: np.ndarray, mask: np.ndarray) -> np.ndarray:
            vectors = out if self.pooled else pool(out, mask)
            near_zero = near_zero_rows(vectors, None if self.pooled else token_scale(out, mask))
            if near_zero.any():  # rounding noise, not a direction: a zero row, refused by `bad_vector_rows`
                vectors = vectors.copy()
                vectors[near_zero] = 0.0
            return vectors

        for idx, part in self.iter_batched(tok, self.output, reduce, batch_tokens, length_sorted, batches):
            if part.ndim != 2:
                raise BadInput(
                    f"{self.folder.onnx_path}: output {self.output!r} gives {part.ndim}-d results per text; "
                    "a bi-encoder needs (batch, tokens, d) token vectors or (batch, d) sentence vectors"
                )
            yield idx, (l2_normalize(part) if self.folder.normalize else part)

    def iter_encode_groups(
        self,
        groups: Iterable[tuple[Sequence[str], Sequence[str], np.ndarray]],
        prefix: str = "",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> Iterator[tuple[list[str], np.ndarray]]:
        """Encode groups of texts, each as `iter_encode` does (its own
        length-sorted token-budget batches), for `rag embed`, which hands
        over the texts to embed one window of chunks.parquet at a time.
        `RayEncoder` (`rag_cli.models.ray_encoder`) runs the same batches on
        a Ray cluster.

        Args:
            groups: (keys, texts, lengths) triples: n keys (any strings,
                e.g. the sha256 of each text), the n texts, and (n,) int
                their tokens as this model sees them (`prefix` and special
                tokens included, at most max_length), which `RayEncoder`
                plans the batches with (here the texts are tokenized anyway).
            prefix, batch_tokens: as for `iter_encode`.

        Yields:
            `(keys, vectors)` per batch: the keys of its texts, and (b, d)
            float32 vectors (as `iter_encode` yields them), groups in order.
        """
        for keys, texts, _ in groups:
            for idx, vectors in self.iter_encode(texts, prefix, batch_tokens):
                yield [keys[i] for i in idx], vectors
