"""The query tokenizer's fast path (rag_cli.models.query_tokens) gives the ids and truncation of
the full `tokenizers` tokenizer: e5's tokenizer.json on random text in many scripts, and on
texts the fast path must hand back (added tokens)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_cli.models import query_tokens
from rag_cli.models.tokens import TextTokenizer, load_tokenizer

#: Characters the random texts are drawn from: Latin with accents, digits, punctuation, runs of
#: spaces, tabs and line ends, full-width forms, CJK, kana, hangul, Cyrillic, Arabic, Devanagari,
#: emoji, combining marks, control and zero-width characters, and letters rare enough to be unknown.
ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"()[]{}-_/\\@#$%^&*+=<>~`|"
            "éèêëàâäôöûüçñßøåæœ   \t\n\r ＨＮＳＷ１２３，。？！：；（）「」"
            "中文检索需要分词为什么的是在了不和有大这主要用于人们一二三四五六七八九十百千万"
            "ひらがなカタカナ한국어Русскийтекстالعربيةहिन्दी😀🚀👍🏽\u0301\u0308\u200b\u200d\u00ad\x00\x07\x1f"
            "ꙮ𓂀𝔘𝔫𝔦")
TEXT = st.text(alphabet=ALPHABET, min_size=0, max_size=60)


@pytest.fixture(scope="module")
def vocab_cache(e5_tokenizer_json, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("RAG_CACHE", str(tmp_path_factory.mktemp("qcache")))
    query_tokens._vocab.cache_clear()
    vocab = query_tokens.query_vocab(e5_tokenizer_json)
    assert vocab is not None and len(vocab.pieces) == 250002
    assert query_tokens.cache_path(e5_tokenizer_json).exists()
    return vocab


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def replace(dest, data: bytes) -> None:
    """Put `data` at `dest` as a new file (as write_cache does): rewriting the file in place would cut
    short the pages the module's vocabulary has memory-mapped (SIGBUS on its next read)."""
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(dest)


def full(path, text: str, max_length: int):
    enc = load_tokenizer(path, max_length).encode(text)
    return np.asarray(enc.ids, dtype=np.int64), len(enc.overflowing) > 0


@settings(max_examples=400, deadline=None)
@given(text=TEXT, max_length=st.sampled_from([512, 12, 5, 3]))
def test_fast_path_equals_the_full_tokenizer(vocab_cache, e5_tokenizer_json, text, max_length):
    got = vocab_cache.encode("query: " + text, max_length)
    want = full(e5_tokenizer_json, "query: " + text, max_length)
    assert got is not None
    assert got[0].tolist() == want[0].tolist() and got[1] == want[1]


@pytest.mark.parametrize("text", [
    "query: How does RRF work?", "query: 为什么中文检索需要分词？", "query: ＨＮＳＷ  graphs\tand   ef",
    "query: café naïve coöperate", "query: 😀🚀 emoji and ꙮ unknown ꙮꙮ letters", "", " ", "query:   ",
    "query: " + "long words " * 300])
def test_fast_path_equals_the_full_tokenizer_on_fixed_texts(vocab_cache, e5_tokenizer_json, text):
    got = vocab_cache.encode(text, 512)
    want = full(e5_tokenizer_json, text, 512)
    assert got[0].tolist() == want[0].tolist() and got[1] == want[1]


def test_added_tokens_and_many_texts_take_the_full_tokenizer(vocab_cache, e5_tokenizer_json):
    assert vocab_cache.encode("query: what is <mask> here", 512) is None
    assert query_tokens.tokenize_few(e5_tokenizer_json, ["a", "b <s> c"], 512) is None
    tok = TextTokenizer(e5_tokenizer_json, 512).tokenize(["what is <mask> here", "ok"], prefix="query: ")
    assert tok.ids[0].tolist() == full(e5_tokenizer_json, "query: what is <mask> here", 512)[0].tolist()
    assert tok.type_ids[1].tolist() == [0] * len(tok.ids[1])


def test_a_damaged_cache_falls_back_and_a_bpe_tokenizer_is_not_eligible(vocab_cache, e5_tokenizer_json, tmp_path):
    dest = query_tokens.cache_path(e5_tokenizer_json)
    replace(dest, b"not a cache file")
    query_tokens._vocab.cache_clear()
    assert query_tokens.query_vocab(e5_tokenizer_json) is None  # unreadable: the full tokenizer
    dest.unlink()
    query_tokens._vocab.cache_clear()
    assert query_tokens.query_vocab(e5_tokenizer_json) is not None  # written again
    assert query_tokens._eligible({"model": {"type": "BPE"}}) is None
    assert query_tokens._eligible({"model": {"type": "Unigram", "unk_id": 0, "byte_fallback": True}}) is None


def test_once_the_full_tokenizer_is_built_queries_use_it(vocab_cache, e5_tokenizer_json, monkeypatch):
    """A long-lived process (rag serve's WarmEngines.embedder calls load_full) tokenizes queries with
    the full tokenizer, which is faster per query once built; a one-shot command never builds it."""
    from rag_cli.models import tokens

    tok = TextTokenizer(e5_tokenizer_json, 512)
    calls = []
    real = query_tokens.tokenize_few
    monkeypatch.setattr(query_tokens, "tokenize_few", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(tokens, "_built", set())
    first = tok.tokenize(["vitamin D and bone density"], prefix="query: ")
    assert len(calls) == 1
    tok.load_full()
    again = tok.tokenize(["vitamin D and bone density"], prefix="query: ")
    assert len(calls) == 1 and again.ids[0].tolist() == first.ids[0].tolist()


def test_the_cache_is_memory_mapped_and_read_without_decoding_every_piece(vocab_cache, e5_tokenizer_json):
    """A process opens the cache (np.memmap) and decodes only the pieces it looks up: no 250k-entry
    dict is built at start (docs/startup.md, #33 item 4)."""
    assert isinstance(vocab_cache.keys, np.memmap) and isinstance(vocab_cache.scores, np.memmap)
    assert not any(isinstance(v, dict) and len(v) > 1000 for v in vars(vocab_cache).values())
    again = query_tokens.QueryVocab.read(query_tokens.cache_path(e5_tokenizer_json))
    assert len(again.pieces) == 250002 and again.pieces[again.unk_id] == "<unk>"


def test_lookup_finds_the_ids_of_the_full_tokenizer(vocab_cache, e5_tokenizer_json):
    """`lookup` (one searchsorted over the sorted piece bytes) gives `token_to_id` of the full model for
    pieces, and nothing for texts that are no piece (or hold a NUL, or are longer than any piece)."""
    full_tok = load_tokenizer(e5_tokenizer_json, 512)
    rng = np.random.default_rng(0)
    ids = rng.choice(250002, 500, replace=False).tolist() + [0, 1, 2, 3, 250001]
    pieces = [vocab_cache.pieces[i] for i in ids]
    assert [full_tok.token_to_id(p) for p in pieces] == ids
    assert sorted(vocab_cache.lookup(pieces).tolist()) == sorted(ids)
    got = set(vocab_cache.lookup(["▁the", "▁中文", "▁检索", "zzqqxx", "", "a\x00", "x" * 300]).tolist())
    want = (full_tok.token_to_id(p) for p in ["▁the", "▁中文", "▁检索", "zzqqxx"])
    assert got == {i for i in want if i is not None}


def test_a_cache_file_cut_short_falls_back(vocab_cache, e5_tokenizer_json):
    dest = query_tokens.cache_path(e5_tokenizer_json)
    data = dest.read_bytes()
    try:
        replace(dest, data[: len(data) // 2])
        query_tokens._vocab.cache_clear()
        assert query_tokens.query_vocab(e5_tokenizer_json) is None
        replace(dest, b"")
        query_tokens._vocab.cache_clear()
        assert query_tokens.query_vocab(e5_tokenizer_json) is None
    finally:
        replace(dest, data)
        query_tokens._vocab.cache_clear()
