"""A query tokenizer that starts in milliseconds, for Unigram tokenizers such as e5's.

Building `tokenizers`' Unigram model of multilingual-e5-small's 250,002
pieces holds the GIL for about 0.6 s (half of a cold dense `rag search`,
docs/startup.md), and a query of ten words uses a few dozen of them. The
Viterbi segmentation of a pre-token only ever looks at the pieces that are
substrings of it, so this module builds `tokenizers`' own Unigram model over
just those pieces of the query (plus the unknown piece, and a piece of the
lowest score, which sets the unknown piece's penalty: the model's minimum
score less 10), behind the tokenizer's own normalizer and pre-tokenizer: the
same algorithm over the same candidates and scores, so the same pieces.
Piece positions in that small model are mapped back to the vocabulary's ids,
and the special tokens of the post-processor's single-sequence template
(`<s> $A </s>` for XLM-R and e5) are added as the full tokenizer adds them,
after cutting the text's own tokens to `max_length` less their number (the
full tokenizer's truncation of one sequence, `longest_first`, to the right).

The vocabulary comes from a compact cache, `<cache>/query-vocab/KEY.npz`
(KEY: a hash of tokenizer.json's resolved path, size and modification time;
the pieces as one UTF-8 blob separated by NUL, their float64 scores, and the normalizer,
pre-tokenizer and specials as JSON), written the first time a tokenizer.json
is used for queries. Reading it takes tens of milliseconds.

The fast path is taken only when it is exact: a Unigram model without byte
fallback, a `TemplateProcessing` post-processor (or none), and a text that
holds no added token's content (`<s>`, `<mask>`...: those the full tokenizer
splits out before normalising). Anything else returns None and the caller
uses the full tokenizer. `tests/test_query_tokens.py` checks equal ids and
truncation against `tokenizers` on random text in many scripts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

#: Version of the cache file's layout; a change makes every cache file stale.
FORMAT = 2
#: Separates the pieces in the cache's blob (a vocabulary with a piece holding it is not eligible).
SEP = "\x00"


def cache_path(tokenizer_path: Path) -> Path:
    """`<cache>/query-vocab/KEY.npz` for `tokenizer_path` (resolved; KEY from its path, size, mtime)."""
    from rag_cli.cache import cache_dir

    p = Path(tokenizer_path).resolve()
    st = p.stat()
    key = hashlib.sha256(f"{FORMAT}|{p}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
    return cache_dir() / "query-vocab" / f"{key}.npz"


def _eligible(spec: dict) -> dict | None:
    """The parts of a parsed tokenizer.json that the fast path needs, or None when it cannot be exact."""
    model = spec.get("model") or {}
    if model.get("type") != "Unigram" or model.get("byte_fallback") or model.get("unk_id") is None:
        return None
    post = spec.get("post_processor")
    specials_before: list[int] = []
    specials_after: list[int] = []
    if post is not None:
        if post.get("type") != "TemplateProcessing":
            return None
        ids = {name: tok.get("ids") for name, tok in (post.get("special_tokens") or {}).items()}
        seen_a = False
        for item in post.get("single") or []:
            if any(part.get("type_id", 0) != 0 for part in item.values()):
                return None  # the fast path gives type ids 0
            if "Sequence" in item:
                if item["Sequence"].get("id") != "A" or seen_a:
                    return None
                seen_a = True
            elif "SpecialToken" in item and ids.get(item["SpecialToken"]["id"]):
                (specials_after if seen_a else specials_before).extend(ids[item["SpecialToken"]["id"]])
            else:
                return None
        if not seen_a:
            return None
    return {"normalizer": spec.get("normalizer"), "pre_tokenizer": spec.get("pre_tokenizer"),
            "unk_id": int(model["unk_id"]), "before": specials_before, "after": specials_after,
            "added": [t["content"] for t in spec.get("added_tokens") or []]}


def write_cache(tokenizer_path: Path, dest: Path) -> bool:
    """Parse tokenizer.json and write its query cache to `dest` (atomically); False when the fast
    path does not apply to it (the reason is the tokenizer's kind, so nothing is written)."""
    from rag_cli.atomic import atomic_path

    spec = json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))
    meta = _eligible(spec)
    if meta is None:
        return False
    vocab = spec["model"]["vocab"]
    if not vocab or any(SEP in p for p, _ in vocab):
        return False
    scores = np.asarray([s for _, s in vocab], dtype=np.float64)
    meta["max_chars"] = max((len(p) for p, _ in vocab), default=1)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, blob=np.frombuffer(SEP.join(p for p, _ in vocab).encode("utf-8"), dtype=np.uint8),
                     scores=scores, meta=np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8))
    return True


@dataclass
class QueryVocab:
    """A Unigram vocabulary read for queries: `index` piece -> id, `scores` (V,) float64."""

    pieces: list[str]
    index: dict[str, int]
    scores: np.ndarray
    unk_id: int
    min_id: int  # a piece of the lowest score (it sets the unknown piece's penalty)
    max_chars: int  # the longest piece, in characters
    before: list[int]  # special token ids put before the text (the template's)
    after: list[int]  # and after it
    added: list[str]  # contents of the added tokens: a text holding one takes the full tokenizer
    frame: "object"  # a tokenizers.Tokenizer with the normalizer and pre-tokenizer (and a one-piece model)

    @classmethod
    def read(cls, path: Path) -> "QueryVocab":
        """Read a cache file written by `write_cache`. Raises OSError / ValueError / KeyError when it is
        unreadable or damaged."""
        from tokenizers import Tokenizer

        with np.load(path, allow_pickle=False) as z:
            pieces, scores = z["blob"].tobytes().decode("utf-8").split(SEP), z["scores"]
            meta = json.loads(z["meta"].tobytes().decode("utf-8"))
        if len(pieces) != len(scores) or not pieces:
            raise ValueError(f"{path}: {len(pieces)} pieces but {len(scores)} scores")
        frame = Tokenizer.from_str(json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": meta["normalizer"], "pre_tokenizer": meta["pre_tokenizer"], "post_processor": None,
            "decoder": None, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}}))
        index = dict(zip(pieces, range(len(pieces))))  # the last of equal pieces, as the model's map keeps
        return cls(pieces, index, scores, int(meta["unk_id"]), int(np.argmin(scores)), int(meta["max_chars"]),
                   list(meta["before"]), list(meta["after"]), list(meta["added"]), frame)

    def encode(self, text: str, max_length: int | None) -> tuple[np.ndarray, bool] | None:
        """(ids (m,) int64 with the template's special tokens, truncated) of `text`, or None when the
        text holds an added token's content (the caller uses the full tokenizer)."""
        from tokenizers import Tokenizer
        from tokenizers.models import Unigram

        if any(a and a in text for a in self.added):
            return None
        frame = self.frame
        normalized = frame.normalizer.normalize_str(text) if frame.normalizer is not None else text
        words = ([w for w, _ in frame.pre_tokenizer.pre_tokenize_str(normalized)]
                 if frame.pre_tokenizer is not None else [normalized])
        wanted = {self.unk_id, self.min_id}
        for w in words:
            for i in range(len(w)):
                for j in range(i + 1, min(len(w), i + self.max_chars) + 1):
                    got = self.index.get(w[i:j])
                    if got is not None:
                        wanted.add(got)
        subset = sorted(wanted)
        tok = Tokenizer(Unigram([(self.pieces[i], float(self.scores[i])) for i in subset],
                                unk_id=subset.index(self.unk_id), byte_fallback=False))
        tok.normalizer = frame.normalizer
        tok.pre_tokenizer = frame.pre_tokenizer
        ids = np.asarray(subset, dtype=np.int64)[np.asarray(tok.encode(text, add_special_tokens=False).ids,
                                                            dtype=np.int64)]
        truncated = False
        if max_length is not None:
            room = max(max_length - len(self.before) - len(self.after), 0)
            truncated = len(ids) > room
            ids = ids[:room]
        return np.concatenate([np.asarray(self.before, np.int64), ids, np.asarray(self.after, np.int64)]), truncated


@functools.lru_cache(maxsize=4)
def _vocab(path: str, _size: int, _mtime_ns: int) -> QueryVocab | None:
    p = Path(path)
    try:
        dest = cache_path(p)
        if not dest.exists() and not write_cache(p, dest):
            return None
        return QueryVocab.read(dest)
    except (OSError, ValueError, KeyError):  # a cache that cannot be written or read: the full tokenizer
        return None


def query_vocab(tokenizer_path: str | os.PathLike) -> QueryVocab | None:
    """The process-wide `QueryVocab` of a tokenizer.json (written to the cache on first use), or None
    when the fast path does not apply to it or its cache cannot be written or read."""
    p = Path(tokenizer_path).resolve()
    st = p.stat()
    return _vocab(str(p), st.st_size, st.st_mtime_ns)


def tokenize_few(tokenizer_path: str | os.PathLike, texts: Sequence[str], max_length: int | None
                 ) -> tuple[list[np.ndarray], list[bool]] | None:
    """(ids per text, truncated per text) for a few texts (queries) without building the full
    model, or None when any text needs the full tokenizer."""
    vocab = query_vocab(tokenizer_path)
    if vocab is None:
        return None
    out = [vocab.encode(t, max_length) for t in texts]
    if any(o is None for o in out):
        return None
    return [o[0] for o in out], [o[1] for o in out]
