"""Measuring spans in tokens or characters, and validating chunking flags."""

from __future__ import annotations

import os
from bisect import bisect_left

from ..errors import BadInput

__all__ = ["STRATEGIES", "UNITS", "validate", "load_tokenizer", "SpanCounter", "char_counter", "token_counters"]

STRATEGIES = ("recursive", "fixed", "markdown", "code", "sentence", "parent-child", "semantic")
UNITS = ("tokens", "chars")


def validate(strategy: str, size, overlap, unit: str, tokenizer, *, context_sentences=2, parent_size=512,
             breakpoint_percentile=95.0) -> None:
    """Raise `BadInput` naming the flag (`--strategy`, `--size`, `--overlap`,
    `--unit`, `--context-sentences`, `--parent-size`,
    `--breakpoint-percentile`) when a chunking parameter is not valid.

    `context_sentences` (a whole number ≥ 0), `parent_size` (a whole number of
    `unit`) and `breakpoint_percentile` (a number in [0, 100]) are checked
    whatever the strategy; `parent_size > size` only for `parent-child`.
    """
    if strategy not in STRATEGIES:
        raise BadInput(f"--strategy {strategy!r} is not known; use one of: {', '.join(STRATEGIES)}")
    if unit not in UNITS:
        raise BadInput(f"--unit {unit!r} is not known; use one of: {', '.join(UNITS)}")
    if not _whole(size) or size <= 0:
        raise BadInput(f"--size {size!r} is not valid; give a whole number of {unit} greater than 0 (e.g. 256)")
    if not _whole(overlap) or overlap < 0:
        raise BadInput(f"--overlap {overlap!r} is not valid; give a whole number of {unit} ≥ 0 and smaller than --size")
    if overlap >= size:
        raise BadInput(f"--overlap {overlap} must be smaller than --size {size}; e.g. --overlap {size // 8}")
    if not _whole(context_sentences) or context_sentences < 0:
        raise BadInput(f"--context-sentences {context_sentences!r} is not valid; give a whole number ≥ 0 "
                       "of sentences on each side (e.g. 2)")
    if not _whole(parent_size) or parent_size <= 0:
        raise BadInput(f"--parent-size {parent_size!r} is not valid; give a whole number of {unit} greater than 0 (e.g. 512)")
    if strategy == "parent-child" and parent_size <= size:
        raise BadInput(f"--parent-size {parent_size} must be larger than --size {size} (the child size); "
                       f"e.g. --parent-size {size * 4}")
    if (isinstance(breakpoint_percentile, bool) or not isinstance(breakpoint_percentile, (int, float))
            or not 0 <= breakpoint_percentile <= 100):
        raise BadInput(f"--breakpoint-percentile {breakpoint_percentile!r} is not valid; give a number from 0 to 100 (e.g. 95)")
    if unit == "tokens" and tokenizer is None:
        raise BadInput("--unit tokens needs the embedder's tokenizer (tokenizer.json); give a model, or use --unit chars")


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_tokenizer(tokenizer):
    """A `tokenizers.Tokenizer` from a Tokenizer, or a path to `tokenizer.json`
    or to a model folder holding one. Truncation and padding are switched off
    (a Tokenizer object is copied, the caller's object is not changed; a path
    gives the process-wide shared instance of `rag_cli.models.tokens`).
    None stays None."""
    if tokenizer is None:
        return None
    if isinstance(tokenizer, (str, os.PathLike)):
        path = os.fspath(tokenizer)
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(path):
            raise BadInput(f"tokenizer {os.fspath(tokenizer)!r} not found; give a tokenizer.json or a model folder with one")
        from rag_cli.models.tokens import load_tokenizer as shared_tokenizer

        return shared_tokenizer(path, None)
    return _untruncated(tokenizer)


def _untruncated(tok):
    if getattr(tok, "truncation", None) is None and getattr(tok, "padding", None) is None:
        return tok
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tok.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


class SpanCounter:
    """Counts units in a span `[a, b)` of one document's text.

    With `starts=None` the unit is the character; otherwise `starts` is the
    sorted list of token start offsets of the whole-document encoding and a
    span's count is the number of tokens starting inside it (additive:
    `count(a, b) + count(b, c) == count(a, c)`).
    """

    __slots__ = ("starts",)

    def __init__(self, starts: list[int] | None):
        self.starts = starts

    def __call__(self, a: int, b: int) -> int:
        if self.starts is None:
            return b - a
        return bisect_left(self.starts, b) - bisect_left(self.starts, a)

    @property
    def is_chars(self) -> bool:
        return self.starts is None


char_counter = SpanCounter(None)


def token_counters(texts: list[str], tokenizer, batch_size: int = 256) -> list[SpanCounter]:
    """One token `SpanCounter` per text, encoding each text once (in batches,
    without special tokens).

    A token's position is its start offset, moved past one leading whitespace
    character when the token also covers more (SentencePiece's `▁word` tokens
    start at the space before the word), so a token counts where its word
    starts.
    """
    import numpy as np

    out: list[SpanCounter] = []
    for i in range(0, len(texts), batch_size):
        batch = texts[i:i + batch_size]
        encs = tokenizer.encode_batch(batch, add_special_tokens=False)
        for text, enc in zip(batch, encs):
            offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            if len(offs) == 0:
                out.append(SpanCounter([]))
                continue
            starts, ends = offs[:, 0], offs[:, 1]
            if text.isascii():
                cps = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
            else:
                cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            safe = np.minimum(starts, len(cps) - 1)
            c = cps[safe]
            ws = (c == 32) | (c == 10) | (c == 9)
            move = ws & (ends > starts + 1) & (starts < len(cps))
            starts = np.where(move, starts + 1, starts)
            starts.sort(kind="stable")
            out.append(SpanCounter(starts.tolist()))
    return out
