"""Tokenizing for the ONNX models: single texts, (query, passage) pairs, and
token counts, with the model folder's `tokenizer.json` (HF `tokenizers`).

Truncation is never silent: every text (or pair) longer than the model's
`max_length` is flagged in `Tokenized.truncated` so the caller can report it.
Padding set in tokenizer.json is switched off; batches are padded later, to
the longest sequence of each batch.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer

from rag_cli.errors import BadInput

# Texts are tokenized this many at a time, so the tokenizer's Encoding objects
# (offsets, overflow...) never pile up for a whole corpus; only ids are kept.
_SLICE = 4096


@dataclass
class Tokenized:
    """Token ids of n texts (or pairs), unpadded.

    Attributes:
        ids: n int64 arrays of token ids, special tokens included.
        type_ids: n int64 arrays, same lengths (segment ids: 0 query, 1 passage).
        truncated: (n,) bool, True where the input was longer than max_length
            and was cut.
    """

    ids: list[np.ndarray]
    type_ids: list[np.ndarray]
    truncated: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """(n,) int64: tokens per text after truncation."""
        return np.fromiter((len(a) for a in self.ids), dtype=np.int64, count=len(self.ids))

    @property
    def n_truncated(self) -> int:
        """How many inputs were cut to max_length."""
        return int(self.truncated.sum())

    def __len__(self) -> int:
        return len(self.ids)


#: At most this many texts are tokenized by the query fast path (`TextTokenizer.tokenize`).
FEW = 8


def _loaded(path: str | os.PathLike) -> bool:
    """Whether this process has built the full tokenizer of `path` already (then it is the fastest)."""
    p = Path(path).resolve()
    try:
        key = (str(p), p.stat().st_mtime_ns)
    except OSError:
        return False
    return key in _built


_built: set[tuple[str, int]] = set()


@functools.lru_cache(maxsize=8)
def _shared_tokenizer(path: str, _mtime_ns: int) -> Tokenizer:
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises plain Exception
        raise BadInput(f"{path}: not a Hugging Face tokenizers file ({e}); save it with tokenizer.save()") from None
    tok.no_padding()
    return tok


def load_tokenizer(path: str | os.PathLike, max_length: int | None = None, strategy: str = "longest_first") -> Tokenizer:
    """The process-wide `tokenizers.Tokenizer` of `tokenizer.json`, padding off,
    truncation set as asked.

    Loading a large tokenizer (e5's 250k pieces) takes seconds, so one instance
    per file is shared: callers set truncation right before each encode (as
    `TextTokenizer` does through this function) and never rely on settings
    made earlier.

    Args:
        path: the tokenizer.json file.
        max_length: cut to this many tokens (special tokens included);
            None turns truncation off.
        strategy: truncation strategy (`longest_first`, `only_second`).

    Raises:
        BadInput: the file is not a tokenizers file.
    """
    p = Path(path).resolve()
    key = (str(p), p.stat().st_mtime_ns)
    tok = _shared_tokenizer(*key)
    _built.add(key)
    if max_length is None:
        if tok.truncation is not None:
            tok.no_truncation()
    else:
        cur = tok.truncation
        if cur is None or cur.get("max_length") != max_length or cur.get("strategy") != strategy:
            tok.enable_truncation(max_length, strategy=strategy)
    return tok


def _encoding_arrays(encs) -> tuple[list[np.ndarray], list[np.ndarray], list[bool]]:
    ids = [np.asarray(e.ids, dtype=np.int64) for e in encs]
    types = [np.asarray(e.type_ids, dtype=np.int64) for e in encs]
    cut = [len(e.overflowing) > 0 for e in encs]
    return ids, types, cut


def _slices(items: Sequence, size: int = _SLICE) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class TextTokenizer:
    """The tokenizer of a model folder, set up for its `max_length`.

    Args:
        tokenizer_path: the folder's tokenizer.json.
        max_length: tokens (special tokens included) per text or pair.
    """

    def __init__(self, tokenizer_path: str | os.PathLike, max_length: int):
        self.path = Path(tokenizer_path)
        self.max_length = int(max_length)

    def load_full(self) -> None:
        """Build the full tokenizer now. For a long-lived process (`rag serve`): once built it tokenizes
        a query several times faster than the query fast path, which a one-shot command takes because
        it skips the build (about 0.6 s for e5's 250k pieces)."""
        load_tokenizer(self.path, self.max_length)

    def count(self, texts: Sequence[str], prefix: str = "", add_special_tokens: bool = True) -> np.ndarray:
        """(n,) int64: tokens per `prefix + text`, without truncation.

        With `add_special_tokens` (default) the count is what the model would
        need, so `count(texts) > max_length` says which texts get cut.
        """
        out = np.empty(len(texts), dtype=np.int64)
        pos = 0
        for part in _slices(list(texts)):
            encs = load_tokenizer(self.path, None).encode_batch([prefix + t for t in part], add_special_tokens=add_special_tokens)
            out[pos : pos + len(encs)] = [len(e.ids) for e in encs]
            pos += len(encs)
        return out

    def tokenize(self, texts: Sequence[str], prefix: str = "") -> Tokenized:
        """Token ids of `prefix + text` for each text, cut to max_length
        (flagged in `truncated`).

        Up to `FEW` texts (queries) go through `rag_cli.models.query_tokens` (the same ids without
        building a large Unigram model) unless the full tokenizer is loaded already or the fast path
        does not apply."""
        if len(texts) <= FEW and not _loaded(self.path):
            from rag_cli.models.query_tokens import tokenize_few

            few = tokenize_few(self.path, [prefix + s for s in texts], self.max_length)
            if few is not None:
                return Tokenized(few[0], [np.zeros(len(i), np.int64) for i in few[0]], np.asarray(few[1], dtype=bool))
        ids: list[np.ndarray] = []
        types: list[np.ndarray] = []
        cut: list[bool] = []
        for part in _slices(list(texts)):
            i, t, c = _encoding_arrays(load_tokenizer(self.path, self.max_length).encode_batch([prefix + s for s in part]))
            ids += i
            types += t
            cut += c
        return Tokenized(ids, types, np.asarray(cut, dtype=bool))

    def tokenize_pairs(self, pairs: Sequence[tuple[str, str]]) -> Tokenized:
        """Token ids of (query, passage) pairs, type ids 0 for the query and 1
        for the passage. Only the passage is cut to fit max_length; if the
        query alone leaves no room, both are cut (longest first). Either way
        the pair is flagged in `truncated`."""
        ids: list[np.ndarray] = []
        types: list[np.ndarray] = []
        cut: list[bool] = []
        for part in _slices([(q, p) for q, p in pairs]):
            try:
                encs = load_tokenizer(self.path, self.max_length, strategy="only_second").encode_batch(part)
            except Exception:  # "Sequence to truncate too short": a query too long
                encs = [self._encode_pair(q, p) for q, p in part]
            i, t, c = _encoding_arrays(encs)
            ids += i
            types += t
            cut += c
        return Tokenized(ids, types, np.asarray(cut, dtype=bool))

    def _encode_pair(self, query: str, passage: str):
        try:
            return load_tokenizer(self.path, self.max_length, strategy="only_second").encode(query, passage)
        except Exception:
            return load_tokenizer(self.path, self.max_length, strategy="longest_first").encode(query, passage)


def count_tokens(model, texts: Sequence[str], prefix: str = "", add_special_tokens: bool = True) -> np.ndarray:
    """(n,) int64: tokens per `prefix + text` with a model's tokenizer, no truncation.

    Args:
        model: a `ModelFolder`, a model folder path, or a tokenizer.json path.
        texts: the texts.
        prefix: put before each text (e.g. the folder's passage_prefix).
        add_special_tokens: count [CLS]/[SEP]-like tokens too (default), so
            the count compares with `max_length`.

    Raises:
        BadInput: the folder or tokenizer file is missing or unreadable.
    """
    from rag_cli.models.folder import ModelFolder

    if isinstance(model, ModelFolder):
        path = model.tokenizer_path
    else:
        p = Path(model)
        path = p if p.is_file() else ModelFolder.load(p).tokenizer_path
    resolved = Path(path).resolve()
    return _counter(str(resolved), resolved.stat().st_mtime_ns).count(texts, prefix, add_special_tokens)


@functools.lru_cache(maxsize=4)
def _counter(path: str, _mtime_ns: int) -> TextTokenizer:
    return TextTokenizer(path, max_length=1 << 30)
