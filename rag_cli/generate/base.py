"""The generator interface: numbered evidence in, a cited answer out.

A generator never retrieves and never decides to refuse on evidence strength:
`rag ask` does both, then hands the numbered evidence to a generator. An
LLM generator (an OpenAI-compatible server, a local GGUF) implements the same
`Generator` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rag_cli.loaders.normalize import has_cjk


REFUSAL = {"en": "Not found in the sources.", "zh": "资料中未提及。"}


def language(text: str) -> str:
    """'zh' if `text` contains a CJK ideograph, else 'en'."""
    return "zh" if has_cjk(text) else "en"


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


class Generator(Protocol):
    """A generator; one whose `streams` attribute is true also takes
    `generate(question, evidence, on_token=f)` and passes each piece of the
    raw answer text to `f` as the model writes it (the LLM generators)."""

    name: str

    def generate(self, question: str, evidence: list[Evidence]) -> Answer:
        """Answer `question` from `evidence` only, citing it as [n]."""
        ...
