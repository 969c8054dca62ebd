"""An extractive generator: the evidence sentences that best match the
question, each followed by its citation [n]. Needs no LLM and cannot say
anything the sources do not say.

Sentences are scored by the bi-encoder's cosine between the question (as a
query) and each sentence (as a passage), plus `lexical_weight` times the
idf-weighted share of the question's BM25 terms (stemmed words, jieba words)
that the sentence contains; the best `max_sentences` whose score is within
`margin` of the best one are kept, best first.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from rag_cli.generate.base import Answer, Evidence, language
from rag_cli.loaders.normalize import CJK

# Blocks: paragraphs, and lines that start a list item, heading or table row.
_BLOCK = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+>#|]|\d+[.)]\s))")
# A sentence ends at 。！？； or at . ! ? followed by white space or the end.
# A line break next to a CJK character (or CJK punctuation) joins without a space.
_CJK_BREAK = re.compile(rf"(?<=[{CJK}\u3000-\u303f\uff00-\uffef])\s*\n\s*|\s*\n\s*(?=[{CJK}])")
_END = re.compile(r"[。！？；.!?:：;]$")
_SENTENCE = re.compile(r".*?(?:[。！？；]|[.!?](?=\s|$)|$)", re.S)


def split_sentences(text: str, min_chars: int = 5) -> list[str]:
    """Split `text` into sentences (str), dropping those under `min_chars` characters.

    A single line break inside a paragraph (hard-wrapped text) does not end a
    sentence; a blank line, a list item, a heading or a table row does.
    Headings, table rows, code fences, lead-ins ending in a colon and short
    lines without final punctuation are not sentences and are dropped.
    """
    out = []
    for block in _BLOCK.split(text):
        block = " ".join(_CJK_BREAK.sub("", block).split())
        for m in _SENTENCE.finditer(block):
            s = m.group(0).strip()
            if len(s) < min_chars or s.startswith(("```", "#", "|")) or s.endswith((":", "：")):
                continue
            if len(s) < 40 and not _END.search(s):  # a bare heading or label
                continue
            out.append(s)
    return out


class ExtractiveGenerator:
    """Answer with verbatim evidence sentences, each cited.

    Args:
        encode_query: str -> (d,) float32 unit vector.
        encode_passages: list[str] -> (n, d) float32 unit vectors.
        coverage: (question, [sentence]) -> idf-weighted share of the question's
            terms in the sentence, in [0, 1] (`SparseIndex.coverage`).
        max_sentences: how many sentences at most.
        margin: keep sentences whose score >= best - margin.
        lexical_weight: weight of the share of question terms in a sentence.
        context: the cosine of a sentence is taken over it and the `context`
            sentences that follow it (a sentence alone is often too short for
            its meaning: "ef is the size of the candidate list ... It is the
            main knob for ..."); only the sentence itself is quoted.
    """

    name = "extractive"

    def __init__(self, encode_query: Callable[[str], np.ndarray],
                 encode_passages: Callable[[list[str]], np.ndarray],
                 coverage: Callable[[str, list[str]], float],
                 max_sentences: int = 3, margin: float = 0.03, lexical_weight: float = 0.15, context: int = 1):
        self.encode_query = encode_query
        self.encode_passages = encode_passages
        self.coverage = coverage
        self.max_sentences = max_sentences
        self.margin = margin
        self.lexical_weight = lexical_weight
        self.context = context

    def generate(self, question: str, evidence: list[Evidence]) -> Answer:
        candidates: list[tuple[str, Evidence]] = []
        windows: list[str] = []
        seen: set[str] = set()
        for ev in evidence:
            sentences = split_sentences(ev.text)
            for i, s in enumerate(sentences):
                if s not in seen:
                    seen.add(s)
                    candidates.append((s, ev))
                    windows.append(" ".join(sentences[i:i + 1 + self.context]))
        if not candidates:
            return Answer(text="", citations=[], refused=True, generator=self.name)
        q = self.encode_query(question)
        cos = self.encode_passages(windows) @ q
        cos = cos + self.lexical_weight * np.array(
            [self.coverage(question, [s]) for s, _ in candidates], dtype=np.float32)
        order = np.argsort(-cos, kind="stable")
        best = float(cos[order[0]])
        chosen = [i for i in order[: self.max_sentences] if cos[i] >= best - self.margin]
        joiner = "" if language(question) == "zh" else " "
        parts, citations = [], []
        for i in chosen:
            sentence, ev = candidates[i]
            parts.append(f"{sentence} [{ev.number}]")
            if ev.chunk_id not in citations:
                citations.append(ev.chunk_id)
        return Answer(text=joiner.join(parts), citations=citations, refused=False, generator=self.name)
