"""Measuring spans in tokens or characters, and validating chunking flags."""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left
from collections.abc import Sequence

from ..errors import BadInput

__all__ = ["STRATEGIES", "UNITS", "validate", "load_tokenizer", "SpanCounter", "char_counter", "token_counters",
           "token_windows", "TOKEN_WINDOW", "BATCH_CHARS"]

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
    sorted sequence of token positions in the document (`token_counters`
    gives an `array('q')`: 8 bytes per token, where a list of ints takes
    about 36) and a span's count is the number of tokens starting inside it
    (additive: `count(a, b) + count(b, c) == count(a, c)`).
    """

    __slots__ = ("starts",)

    def __init__(self, starts: Sequence[int] | None):
        self.starts = starts

    def __call__(self, a: int, b: int) -> int:
        if self.starts is None:
            return b - a
        return bisect_left(self.starts, b) - bisect_left(self.starts, a)

    @property
    def is_chars(self) -> bool:
        return self.starts is None


char_counter = SpanCounter(None)


#: A text longer than this many characters is encoded in windows of at most
#: this many, cut where a whitespace run starts (see `token_windows`), so the
#: tokenizer's own memory is bounded by the window, not by the document
#: (an encoding and its offsets cost about 400 bytes a token: one 20 MB line
#: encoded whole needed 4.3 GiB; docs/inputs.md).
TOKEN_WINDOW = 100_000

#: At most this many characters of text (whole texts and windows) go into one
#: `encode_batch` call.
BATCH_CHARS = 1_000_000


def token_windows(text: str, window: int = TOKEN_WINDOW) -> list[tuple[int, int]]:
    """The `(start, end)` character spans, in order and covering `text`, that
    `token_counters` encodes one at a time: `[(0, len(text))]` when the text
    has at most `window` characters; otherwise spans of at most `window`
    characters, each (after the first) starting where a run of whitespace
    (space, tab, line break) starts, the last such start in the window's
    second half. A window whose second half has none is cut at its last
    character.

    Cut before a whitespace run, the tokens of common tokenizers (WordPiece,
    SentencePiece/Metaspace, byte-level BPE) are those of the whole text: a
    word's tokens, and a run's, never span the cut. A hard cut (no whitespace)
    can split a token in two or add a word-start `▁`, one token more or less
    per cut."""
    n = len(text)
    if window <= 0:
        raise ValueError(f"window must be > 0, got {window}")
    spans = []
    a = 0
    while n - a > window:
        lo, hi = a + max(window // 2, 1), a + window
        cut = max(text.rfind(c, lo, hi) for c in " \n\t")
        while cut > a and text[cut - 1] in " \n\t\u2581":
            cut -= 1  # the start of the run (SentencePiece's `▁` is one of its kind), so no run is split
        if cut <= a:
            cut = hi
        spans.append((a, cut))
        a = cut
    spans.append((a, n))
    return spans


def _token_starts(text: str, enc, shift: int):
    """Sorted token positions (int64 numpy array) of one encoding of `text`
    (see `token_counters`), plus `shift` (where `text` starts in its
    document)."""
    import numpy as np

    offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
    if len(offs) == 0:
        return offs[:, 0]
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
    return starts + shift if shift else starts


def token_counters(texts: list[str], tokenizer, batch_size: int = 256, *, window: int | None = None,
                   batch_chars: int | None = None) -> list[SpanCounter]:
    """One token `SpanCounter` per text, encoding each text once (without
    special tokens), in `encode_batch` calls of at most `batch_size` pieces
    and about `batch_chars` characters. A text of more than `window`
    characters is encoded in the pieces of `token_windows` and their offsets
    shifted by the piece's start, so memory is bounded by the window plus
    the positions kept (8 bytes per token); a text of at most `window`
    characters is encoded whole, as before windows. `window` and
    `batch_chars` default to `TOKEN_WINDOW` and `BATCH_CHARS` (read at each
    call).

    A token's position is its start offset, moved past one leading whitespace
    character when the token also covers more (SentencePiece's `▁word` tokens
    start at the space before the word), so a token counts where its word
    starts.
    """
    window = TOKEN_WINDOW if window is None else window
    batch_chars = BATCH_CHARS if batch_chars is None else batch_chars
    pieces = [(i, a, b) for i, text in enumerate(texts) for a, b in token_windows(text, window)]
    starts = [array("q") for _ in texts]
    for group in _groups(pieces, batch_size, batch_chars):
        batch = [texts[i] if (a, b) == (0, len(texts[i])) else texts[i][a:b] for i, a, b in group]
        encs = tokenizer.encode_batch(batch, add_special_tokens=False)
        for (i, a, _b), piece, enc in zip(group, batch, encs):
            starts[i].frombytes(_token_starts(piece, enc, a).tobytes())  # int64 into array("q")
    return [SpanCounter(s) for s in starts]


def _groups(pieces: list[tuple[int, int, int]], batch_size: int, batch_chars: int):
    """`pieces` `(text index, start, end)` in order, in lists of at most
    `batch_size` pieces and `batch_chars` characters (a longer piece alone)."""
    group, chars = [], 0
    for piece in pieces:
        n = piece[2] - piece[1]
        if group and (len(group) == batch_size or chars + n > batch_chars):
            yield group
            group, chars = [], 0
        group.append(piece)
        chars += n
    if group:
        yield group
