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

The vocabulary comes from a cache file, `<cache>/query-vocab/KEY.qv` (KEY: a hash of
tokenizer.json's resolved path, size and modification time), written the first time a
tokenizer.json is used for queries and memory-mapped when read, so that a process decodes only
the pieces its query needs rather than all 250,002 into a dict (docs/startup.md). Layout
(`FORMAT` 3): 8 bytes `MAGIC`, a little-endian uint64 header length, a UTF-8 JSON header
{"meta": the normalizer, pre-tokenizer, specials, unk id, longest piece; "arrays": name ->
[dtype, shape, byte offset]}, then the arrays at 64-byte aligned offsets:
`scores` (V,) float64 by id; `blob` uint8, the UTF-8 pieces one after the other, piece i at
`blob[offsets[i]:offsets[i + 1]]` with `offsets` (V + 1,) int64; `keys` (V,) `S{w}` the pieces'
UTF-8 bytes sorted (w: the longest piece in bytes; NUL-padded, and no piece holds a NUL) with
`order` (V,) int32 the id of each sorted key (a stable sort, so of equal pieces the last id is
found last, the one `tokenizers`' map keeps). A lookup of all the query's substrings is one
`np.searchsorted` over `keys`, which reads a few pages of the file. The file is only ever replaced
(written beside and renamed), never rewritten in place: a mapped file cut short would end its
readers with SIGBUS.

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
FORMAT = 3
#: The first 8 bytes of a cache file.
MAGIC = b"RAGQV\x00\x00\x03"
#: A vocabulary with a piece holding it is not eligible (the sorted keys are NUL-padded).
SEP = "\x00"
_ALIGN = 64


def cache_path(tokenizer_path: Path) -> Path:
    """`<cache>/query-vocab/KEY.qv` for `tokenizer_path` (resolved; KEY from its path, size, mtime)."""
    from rag_cli.cache import cache_dir

    p = Path(tokenizer_path).resolve()
    st = p.stat()
    key = hashlib.sha256(f"{FORMAT}|{p}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
    return cache_dir() / "query-vocab" / f"{key}.qv"


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
    encoded = [p.encode("utf-8") for p, _ in vocab]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    keys = np.asarray(encoded, dtype=f"S{max(int(np.diff(offsets).max()), 1)}")
    order = np.argsort(keys, kind="stable").astype(np.int32)
    arrays = {"scores": scores, "offsets": offsets, "blob": np.frombuffer(b"".join(encoded), dtype=np.uint8),
              "keys": keys[order], "order": order}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest, suffix=".qv") as tmp:
        _write_arrays(tmp, meta, arrays)
    return True


def _write_arrays(path: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """The cache file's layout (module docstring): MAGIC, header length, JSON header, aligned arrays."""
    layout, offset = {}, 0
    for name, a in arrays.items():
        layout[name] = [a.dtype.str, list(a.shape), offset]
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"meta": meta, "arrays": layout}).encode("utf-8")
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    with open(path, "wb") as f:
        f.write(MAGIC + len(header).to_bytes(8, "little") + header)
        for name, a in arrays.items():
            f.seek(start + layout[name][2])
            f.write(np.ascontiguousarray(a).tobytes())
        f.truncate(start + offset)


def _read_arrays(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, name -> read-only array memory-mapped from `path`). Raises OSError, or ValueError for a
    file that is not a cache file of this `FORMAT` or is cut short."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")  # ValueError for an empty file
    if raw[:len(MAGIC)].tobytes() != MAGIC or len(raw) < len(MAGIC) + 8:
        raise ValueError(f"{path}: not a query vocabulary cache (format {FORMAT})")
    n = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 8].tobytes(), "little")
    head = json.loads(raw[len(MAGIC) + 8:len(MAGIC) + 8 + n].tobytes().decode("utf-8"))
    start = -(-(len(MAGIC) + 8 + n) // _ALIGN) * _ALIGN
    arrays = {}
    for name, (dtype, shape, offset) in head["arrays"].items():
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        lo = start + int(offset)
        if lo + size > len(raw):
            raise ValueError(f"{path}: cut short ({name})")
        arrays[name] = raw[lo:lo + size].view(dtype).reshape(shape)
    return head["meta"], arrays


class _Pieces:
    """The vocabulary's pieces by id, decoded from the cache's blob when read: `len()` and `[i]` -> str."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        self.blob, self.offsets = blob, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.blob[lo:hi].tobytes().decode("utf-8")


@dataclass
class QueryVocab:
    """A Unigram vocabulary read for queries from its memory-mapped cache file: `pieces[i]` (str),
    `scores` (V,) float64, `keys` (V,) sorted piece bytes with `order` (V,) int32 their ids."""

    pieces: _Pieces
    keys: np.ndarray
    order: np.ndarray
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
        """Open a cache file written by `write_cache` (memory-mapped; nothing decoded). Raises OSError /
        ValueError / KeyError when it is unreadable or damaged."""
        from tokenizers import Tokenizer

        meta, a = _read_arrays(Path(path))
        pieces, scores, keys, order = _Pieces(a["blob"], a["offsets"]), a["scores"], a["keys"], a["order"]
        if not len(pieces) or not len(scores) == len(pieces) == len(keys) == len(order) \
                or int(a["offsets"][-1]) != len(a["blob"]):
            raise ValueError(f"{path}: {len(pieces)} pieces, {len(scores)} scores, {len(keys)} keys")
        frame = Tokenizer.from_str(json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": meta["normalizer"], "pre_tokenizer": meta["pre_tokenizer"], "post_processor": None,
            "decoder": None, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}}))
        return cls(pieces, keys, order, scores, int(meta["unk_id"]), int(np.argmin(scores)), int(meta["max_chars"]),
                   list(meta["before"]), list(meta["after"]), list(meta["added"]), frame)

    def lookup(self, texts) -> np.ndarray:
        """Ids (m,) int64 of those of `texts` (str) that are pieces, each once; of equal pieces the last id."""
        width = self.keys.dtype.itemsize
        wanted = {b for b in (t.encode("utf-8") for t in texts) if b and len(b) <= width and b"\x00" not in b}
        if not wanted:
            return np.zeros(0, dtype=np.int64)
        q = np.asarray(sorted(wanted), dtype=self.keys.dtype)
        pos = np.searchsorted(self.keys, q, side="right") - 1
        hit = pos >= 0
        hit[hit] = self.keys[pos[hit]] == q[hit]
        return self.order[pos[hit]].astype(np.int64)

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
        subs = {w[i:j] for w in words for i in range(len(w))
                for j in range(i + 1, min(len(w), i + self.max_chars) + 1)}
        subset = sorted({self.unk_id, self.min_id, *self.lookup(subs).tolist()})
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
