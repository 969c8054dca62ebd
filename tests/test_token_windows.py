"""Token counting of long texts in bounded windows (#31 item 12).

`token_counters` encodes a text longer than `TOKEN_WINDOW` characters in
pieces of at most that many (cut where a whitespace run starts), so one
50 MB line no longer goes to the tokenizer whole. Checked here:

- the tokenizer only ever gets pieces of at most `TOKEN_WINDOW` characters,
  at most about `BATCH_CHARS` per `encode_batch` call;
- the token positions, and so the chunks, of a ~200 KB text with spaces are
  those of one whole-text encoding (`whole_starts`, written out here from
  the tokenizer's own offsets, is the reference), in every strategy that
  counts tokens;
- a text of at most `TOKEN_WINDOW` characters is encoded whole, in one piece,
  exactly as before windows;
- `token_windows` itself: spans cover the text, none longer than the window,
  each after the first starts a whitespace run, a text without whitespace is
  cut every `window` characters.
"""

from __future__ import annotations

import random

import pytest

from rag_cli.chunking import chunk_document, load_tokenizer, units
from rag_cli.chunking.units import token_counters
from rag_cli.loaders import Document, normalize_text

#: The window docs/inputs.md states: no text longer than this goes to the tokenizer.
WINDOW = 100_000


class RecordingTokenizer:
    """A tokenizer that passes every call to `tok` and records the lengths of
    the texts given to `encode_batch`, one list per call."""

    truncation = None
    padding = None

    def __init__(self, tok):
        self.tok = tok
        self.calls: list[list[int]] = []

    def encode_batch(self, texts, **kwargs):
        self.calls.append([len(t) for t in texts])
        return self.tok.encode_batch(texts, **kwargs)

    def encode(self, text, **kwargs):
        raise AssertionError("token_counters should encode through encode_batch")


@pytest.fixture(scope="module")
def tok(e5_tokenizer_json):
    """multilingual-e5-small's tokenizer (SentencePiece: `▁` word starts)."""
    return load_tokenizer(str(e5_tokenizer_json))


def whole_starts(text: str, tok) -> list[int]:
    """Token positions of one whole-text encoding, as `token_counters` defines
    them: start offsets, moved past one leading space/tab/newline when the
    token covers more; sorted."""
    enc = tok.encode(text, add_special_tokens=False)
    out = []
    for a, b in enc.offsets:
        out.append(a + 1 if a < len(text) and text[a] in " \n\t" and b > a + 1 else a)
    return sorted(out)


def make_doc(text: str) -> Document:
    text = normalize_text(text)
    return Document(doc_id="long", path="long.txt", sha256="0" * 64, mtime=0.0, n_chars=len(text), title="long",
                    text=text, metadata={}, fmt="text")


def long_text(n_chars: int, seed: int = 0) -> str:
    """One line of random English, Chinese and digit words, at least `n_chars` long."""
    rng = random.Random(seed)
    words = ("the retrieval of passages is measured in tokens , not characters . "
             "检索 增强 生成 模型 文本 12345 e5-small API").split()
    parts, n = [], 0
    while n < n_chars:
        w = rng.choice(words)
        parts.append(w)
        n += len(w) + 1
    return " ".join(parts)


def test_long_text_encoded_in_bounded_pieces(tok):
    text = long_text(200_000)
    rec = RecordingTokenizer(tok)
    count = token_counters([text], rec)[0]
    lengths = [n for call in rec.calls for n in call]
    assert max(lengths) <= WINDOW
    assert units.TOKEN_WINDOW == WINDOW
    assert sum(lengths) == len(text)  # every character encoded once
    assert all(len(call) == 1 or sum(call) <= units.BATCH_CHARS for call in rec.calls)
    assert list(count.starts) == whole_starts(text, tok)


@pytest.mark.parametrize("strategy", ["recursive", "fixed", "sentence", "parent-child"])
def test_long_text_chunks_equal_whole_text_encoding(tok, monkeypatch, strategy):
    doc = make_doc(long_text(200_000, seed=1))
    windowed = chunk_document(doc, strategy=strategy, size=128, overlap=16, tokenizer=tok)
    monkeypatch.setattr(units, "TOKEN_WINDOW", len(doc.text) + 1)  # one piece: the whole-text encoding
    rec = RecordingTokenizer(tok)
    whole = chunk_document(doc, strategy=strategy, size=128, overlap=16, tokenizer=rec)
    assert rec.calls == [[len(doc.text)]]
    assert len(windowed) > 100
    assert windowed == whole


def test_short_texts_encoded_whole_as_before(tok):
    texts = ["", "   ", "中文 中文", "A short text.\n\nWith two paragraphs.", long_text(WINDOW - 1000, seed=2)]
    rec = RecordingTokenizer(tok)
    counts = token_counters(texts, rec)
    assert rec.calls == [[len(t) for t in texts]]  # one batch, each text whole
    assert [list(c.starts) for c in counts] == [whole_starts(t, tok) for t in texts]


def test_many_documents_batched_by_characters(tok):
    texts = [long_text(60_000, seed=s) for s in range(40)]
    rec = RecordingTokenizer(tok)
    counts = token_counters(texts, rec)
    assert len(rec.calls) > 1 and all(sum(call) <= 1_000_000 for call in rec.calls)
    assert [n for call in rec.calls for n in call] == [len(t) for t in texts]  # whole, in order
    assert [list(c.starts) for c in counts[:3]] == [whole_starts(t, tok) for t in texts[:3]]


def test_token_windows_cut_before_whitespace_runs():
    text = "aaaa  bbbb\n\ncc dddddd eeee"
    spans = units.token_windows(text, 8)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(b1 == a2 for (_a1, b1), (a2, _b2) in zip(spans, spans[1:]))
    assert all(b - a <= 8 for a, b in spans)
    for a, _b in spans[1:]:
        assert text[a] in " \n\t" and text[a - 1] not in " \n\t"  # a run's start, never inside one
    assert [text[a:b] for a, b in spans] == ["aaaa", "  bbbb", "\n\ncc", " dddddd", " eeee"]


def test_token_windows_short_text_and_no_whitespace():
    assert units.token_windows("", 5) == [(0, 0)]
    assert units.token_windows("abc def", 7) == [(0, 7)]
    assert units.token_windows("x" * 12, 5) == [(0, 5), (5, 10), (10, 12)]
    with pytest.raises(ValueError):
        units.token_windows("abc", 0)
