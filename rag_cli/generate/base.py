"""The generator interface: numbered evidence in, a cited answer out.

A generator never retrieves and never decides to refuse on evidence strength:
`rag ask` does both, then hands the numbered evidence to a generator. An
LLM generator (an OpenAI-compatible server, a local GGUF) implements the same
`Generator` protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from rag_cli.loaders.normalize import CJK, has_cjk


REFUSAL = {"en": "Not found in the sources.", "zh": "资料中未提及。"}


def language(text: str) -> str:
    """'zh' if `text` contains a CJK ideograph, else 'en'."""
    return "zh" if has_cjk(text) else "en"


_CJK_RUN = re.compile(rf"[{CJK}]+")
_NAME_TOKEN = re.compile(r"[A-Za-z]*\d[\w.-]*|\b[A-Z][A-Za-z]*[A-Z][\w-]*")  # BM25, X200, nDCG, HNSW, 2.0


def _mostly_cjk(text: str) -> bool:
    """Whether `text` is written in Chinese: at least 30% of its letters are CJK characters (an English
    passage under a Chinese heading, or naming one Chinese term, is English)."""
    cjk = len(_CJK_RUN.findall(text)) and sum(len(r) for r in _CJK_RUN.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text)) / 4  # about four letters to a word, one character to a word
    return bool(cjk) and cjk >= 0.3 * (cjk + latin)


def script_question(question: str, texts: list[str]) -> str:
    """The part of `question` whose key terms the evidence `texts` could hold in their own language (`ask`
    takes the entity coverage of each evidence text with its own): the question itself when it and some
    text share a language; across languages (a Chinese question, no text
    with CJK characters; an English question, every text with them) only its names and numbers ("nDCG 的折扣
    是怎么计算的？" over English sources -> "nDCG"): the question's other words are in another language
    than the sources, and their absence says nothing about whether the sources answer it. "" when none
    is left (then `entity_coverage` is 1.0: the rule does not judge)."""
    if not texts:
        return question
    zh_q = has_cjk(question)
    zh_texts = [_mostly_cjk(t) for t in texts]
    if zh_q and not any(zh_texts):
        return " ".join(_CJK_RUN.sub(" ", question).split())
    if not zh_q and all(zh_texts):
        return " ".join(_NAME_TOKEN.findall(question))
    return question


def refusal(question: str) -> str:
    """The refusal sentence in the question's language."""
    return REFUSAL[language(question)]


def is_refusal(text: str) -> bool:
    """Whether a generated `text` is a refusal: it starts with a refusal
    sentence of either language (without its final punctuation, case and
    surrounding quotes ignored)."""
    head = text.strip().strip("\"'*“”「」").lower()
    return any(head.startswith(r.rstrip(".。").lower()) for r in REFUSAL.values())


@dataclass
class Evidence:
    """One numbered piece of evidence; `number` is the n of a citation `[n]` (1-based).

    `text` is the retrieved chunk's text; `context` is the text around it
    that the generator should read instead (a sentence window, a parent
    chunk), or None when the chunk is its own context. `score` is the
    bi-encoder cosine with the question; `rerank_score` the cross-encoder
    logit when `rag ask` reranked the evidence, else None.
    """

    number: int
    chunk_id: str
    doc_id: str
    text: str
    score: float
    title_path: list[str] = field(default_factory=list)
    context: str | None = None
    rerank_score: float | None = None


@dataclass
class Answer:
    """A generated answer; `citations` are chunk ids cited in `text`, in order of first citation.

    `n_evidence_cut`: evidence left out of the prompt to fit the generator's
    token budget (lowest-ranked first); `n_citations_removed`: cited numbers
    that were not among the evidence given, removed from `text`
    (`rag_cli.generate.citations.check_answer`). `support`: the full
    supporting sentences, with their citations, of an extractive or reader
    answer (the text itself when no phrase was taken); "" for the LLM generators.
    """

    text: str
    citations: list[str]
    refused: bool
    generator: str
    n_evidence_cut: int = 0
    n_citations_removed: int = 0
    support: str = ""  # the full sentences an extractive answer quotes from, cited ("" for an LLM answer)
    signals: dict = field(default_factory=dict)  # what the generator measured of its answer (extractive: `signals`)
    conflict: bool = False  # the evidence holds two different values for what was asked; both are quoted


class Generator(Protocol):
    """A generator; one whose `streams` attribute is true also takes
    `generate(question, evidence, on_token=f)` and passes each piece of the
    raw answer text to `f` as the model writes it (the LLM generators)."""

    name: str

    def generate(self, question: str, evidence: list[Evidence]) -> Answer:
        """Answer `question` from `evidence` only, citing it as [n]."""
        ...
