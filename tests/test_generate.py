"""Unit tests of the generator interface and the extractive generator (fake encoders)."""

import numpy as np

from rag_cli.generate.base import Evidence, language, refusal
from rag_cli.generate.extractive import ExtractiveGenerator, split_sentences


def test_language_and_refusal():
    assert language("What is BM25?") == "en" and language("什么是 BM25？") == "zh"
    assert refusal("Who won?") == "Not found in the sources."
    assert refusal("谁赢了？") == "资料中未提及。"


def test_split_sentences_joins_hard_wrapped_lines_and_drops_headings():
    text = "# Title\n\nThe first sentence is\nwrapped over two lines. A second one!\n\n- a list item that is long enough to be kept here\n\n中文第一句\n在这里。中文第二句！"
    assert split_sentences(text) == [
        "The first sentence is wrapped over two lines.",
        "A second one!",
        "- a list item that is long enough to be kept here",
        "中文第一句在这里。",
        "中文第二句！",
    ]


def _fake_encoders(vocab):
    """Bag-of-words unit vectors over `vocab`: cosine = word overlap."""

    def vec(text):
        v = np.array([1.0 if w in text.lower() else 0.0 for w in vocab], dtype=np.float32) + 1e-3
        return v / np.linalg.norm(v)

    return (lambda q: vec(q)), (lambda ps: np.stack([vec(p) for p in ps]))


def _word_share(question, texts):
    q = set(question.lower().strip("?").split())
    t = set(" ".join(texts).lower().split())
    return len(q & t) / len(q) if q else 0.0


def test_extractive_cites_the_best_sentences_with_their_evidence_number():
    eq, ep = _fake_encoders(["hnsw", "ef", "query", "bm25", "stemming"])
    gen = ExtractiveGenerator(eq, ep, _word_share, max_sentences=2, margin=0.5)
    evidence = [
        Evidence(1, "bm25.md#0", "bm25.md", "BM25 uses stemming of words. It is lexical.", 0.9),
        Evidence(2, "hnsw.txt#3", "hnsw.txt", "The ef parameter sets the HNSW query beam. Unrelated words here.", 0.88),
    ]
    answer = gen.generate("What does ef do in HNSW queries?", evidence)
    assert not answer.refused
    assert answer.text.startswith("The ef parameter sets the HNSW query beam. [2]")
    assert answer.citations[0] == "hnsw.txt#3"
    assert answer.generator == "extractive"


def test_extractive_with_no_sentences_refuses():
    eq, ep = _fake_encoders(["a"])
    answer = ExtractiveGenerator(eq, ep, _word_share).generate("q?", [Evidence(1, "d#0", "d", "# only a heading", 0.9)])
    assert answer.refused and answer.citations == []
