"""`rag ask`: retrieve, number the evidence, answer with citations [n], or refuse.

Refusal: when the best evidence's bi-encoder cosine with the question is
below `min_score` (a per-model threshold; e5 cosines sit in about 0.7-1.0),
the answer is the refusal sentence in the question's language
("Not found in the sources." / "资料中未提及。") and `refused` is true.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rag_cli.generate.base import Answer, Evidence, refusal
from rag_cli.stages.search import Searcher


@dataclass
class AskResult:
    question: str
    answer: Answer
    evidence: list[Evidence]
    best_score: float
    latency_ms: float


def evidence_for(searcher: Searcher, question: str, *, k: int, mode: str, mask=None,
                 candidates: int = 100, rrf_k: int = 60) -> tuple[list[Evidence], float]:
    """Top-`k` chunks as numbered evidence, each scored by its bi-encoder cosine
    with the question; returns (evidence, best cosine) (-1.0 when nothing was found)."""
    hits = searcher.search([question], mode=mode, k=k, candidates=candidates, rrf_k=rrf_k, mask=mask)[0]
    if not hits:
        return [], -1.0
    q = searcher.embedder.encode_queries([question])[0]
    vecs = np.asarray(searcher.dense.index.get_items([h.row for h in hits]), dtype=np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    cos = vecs @ (q / max(np.linalg.norm(q), 1e-12))
    evidence = [
        Evidence(number=i + 1, chunk_id=h.chunk_id, doc_id=h.doc_id, text=searcher.text(h.row),
                 score=float(cos[i]), title_path=list(searcher.chunks.column("title_path")[h.row].as_py() or [])
                 if "title_path" in searcher.chunks.column_names else [])
        for i, h in enumerate(hits)
    ]
    return evidence, float(cos.max())


def ask(searcher: Searcher, generator, question: str, *, k: int = 5, mode: str = "hybrid",
        min_score: float = 0.82, mask=None) -> AskResult:
    """Answer `question` from the index only. See the module docstring for refusal."""
    t0 = time.perf_counter()
    evidence, best = evidence_for(searcher, question, k=k, mode=mode, mask=mask)
    if not evidence or best < min_score:
        answer = Answer(text=refusal(question), citations=[], refused=True, generator=generator.name)
    else:
        answer = generator.generate(question, evidence)
        if answer.refused:
            answer.text = refusal(question)
    return AskResult(question, answer, evidence, best, (time.perf_counter() - t0) * 1000.0)
