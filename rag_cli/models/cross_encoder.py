"""Cross-encoder: score (query, passage) pairs with any ONNX export of a
sequence-classification reranker (e.g. ms-marco-MiniLM, bge-reranker).

Score scale: raw logits (log-odds of "relevant"), unbounded, higher is more
relevant. For a 1-logit head the score is that logit. For a 2-logit head
(classes [not relevant, relevant]) it is logit[1] - logit[0], the log-odds of
the softmax: `sigmoid(score)` equals softmax(logits)[1], so the two head
shapes give scores on the same scale. Use `sigmoid` for a probability in [0, 1].
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rag_cli.errors import BadInput
from rag_cli.models.folder import ModelFolder
from rag_cli.models.onnx_runtime import DEFAULT_BATCH_TOKENS, OnnxTextModel, Progress


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), elementwise, overflow-safe: logits -> probabilities,
    float64 (in float32 every logit above about 17 would give exactly 1.0;
    float64 keeps logits up to about 36 apart)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def logits_to_scores(logits: np.ndarray) -> np.ndarray:
    """(b,), (b, 1) or (b, 2) float logits -> (b,) float32 scores (see module doc).

    Raises:
        BadInput: more than 2 logits per pair (a multi-class head, not a reranker).
    """
    if logits.ndim == 1:
        return logits.astype(np.float32, copy=False)
    if logits.ndim == 2 and logits.shape[1] == 1:
        return logits[:, 0].astype(np.float32, copy=False)
    if logits.ndim == 2 and logits.shape[1] == 2:
        return (logits[:, 1] - logits[:, 0]).astype(np.float32, copy=False)
    raise BadInput(
        f"cross-encoder output has shape {logits.shape}; a reranker needs 1 logit per pair "
        "(or 2: not relevant, relevant)"
    )


class CrossEncoder(OnnxTextModel):
    """Score passages against a query, reading both together.

    Args:
        folder: a cross-encoder model folder (`ModelFolder.load`).
        threads: CPU cores to use (that many batches at once on the CPU);
            default all usable cores.
        providers: onnxruntime execution providers; default CPU.
        parallel_batches: True, False or None (by the CPU), see `OnnxTextModel`.

    Pairs are tokenized as (query, passage); only the passage is cut to fit
    `folder.max_length` tokens (the query is cut too only when it alone
    leaves no room). After each call `n_truncated` / `truncated` ((n,) bool)
    say which pairs were cut.

    Raises:
        BadInput: the folder is an embedder.
    """

    def __init__(self, folder: ModelFolder, threads: int | None = None, providers: Sequence[str] | None = None,
                 parallel_batches: bool | None = None):
        if folder.kind != "cross-encoder":
            raise BadInput(
                f"model {folder.path} is an {folder.kind}, not a cross-encoder; use a reranker "
                "(sequence classification) model here, or set kind to cross-encoder in rag_model.json"
            )
        super().__init__(folder, threads, providers, parallel_batches)
        self.output = "logits" if "logits" in self.outputs else next(iter(self.outputs))

    def score(
        self,
        query: str,
        passages: Sequence[str],
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        progress: Progress | None = None,
    ) -> np.ndarray:
        """Scores of each passage for one query.

        Returns:
            (n,) float32 raw logits, higher is more relevant (scale: module doc).
        """
        if isinstance(passages, str):
            raise TypeError("passages must be a sequence of strings, not one string")
        return self.score_pairs([(query, p) for p in passages], batch_tokens, progress)

    def score_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        progress: Progress | None = None,
    ) -> np.ndarray:
        """Scores of (query, passage) pairs, batched across queries (for a
        whole run file at once).

        Args:
            pairs: n (query, passage) tuples.
            batch_tokens: padded tokens per onnxruntime batch.
            progress: progress(done, n) after each batch, in pairs.

        Returns:
            (n,) float32 raw logits in input order.
        """
        tok = self.tokenizer.tokenize_pairs(pairs)
        if len(tok) == 0:
            self.truncated, self.n_truncated = tok.truncated, 0
            return np.zeros(0, dtype=np.float32)
        return self.run_batched(tok, self.output, lambda out, mask: logits_to_scores(out), batch_tokens, progress)
