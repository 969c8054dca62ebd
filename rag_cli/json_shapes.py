"""The JSON of a search and of an answer, defined once: what `rag search
--json` and `rag ask --json` print and what `rag serve` answers (HTTP and
MCP), so the two can never drift apart.

- `search_json(query, result)`: {query, mode, results: [hit_json], n_queries_truncated};
- `ask_json(result)`: `answer_json` plus n_queries_truncated (`answer_json`
  names the cosine threshold that judged the question: `min_score_key`,
  "min_score" for a question with Chinese characters or "min_score_en", and
  its value `min_score_used`);
- `json_safe(obj)`: NaN and infinities as None (JSON has no such numbers).
"""

from __future__ import annotations

import math
from typing import Any


def hit_json(h) -> dict:
    """A hit (`rag_cli.store.runs.Hit`) as `--json` gives it (score rounded to 6 decimals)."""
    return {"rank": h.rank, "chunk_id": h.chunk_id, "doc_id": h.doc_id, "score": round(h.score, 6),
            "stage": h.stage, "text": h.text}


def search_json(query: str, res) -> dict:
    """A `SearchResult` of `query` as `rag search QUERY --json` prints it."""
    return {"query": query, "mode": res.mode, "results": [hit_json(h) for h in res.hits],
            "n_queries_truncated": res.n_queries_truncated}


def source_json(e) -> dict:
    """A cited source: its number, chunk, document (the path) and title (headings, or the doc id)."""
    return {"n": e.number, "chunk_id": e.chunk_id, "doc_id": e.doc_id,
            "title": " > ".join(e.title_path) if e.title_path else e.doc_id, "score": round(e.score, 6)}


def answer_json(res) -> dict:
    """An `AskResult` (`rag_cli.stages.ask`) as `rag ask --json` gives it, less n_queries_truncated."""
    from rag_cli.generate.citations import statements

    by_number = {e.number: e for e in res.evidence}
    cited = [by_number[n] for n in dict.fromkeys(n for st in statements(res.answer.text) for n in st.citations)
             if n in by_number] if not res.answer.refused else []
    return {
        "question": res.question,
        "answer": res.answer.text,
        "refused": res.answer.refused,
        "citations": res.answer.citations,
        **({"support": res.answer.support} if res.answer.support and not res.answer.refused else {}),
        "conflict": bool(getattr(res.answer, "conflict", False)) and not res.answer.refused,
        "statements": [] if res.answer.refused else [
            {"text": st.text, "citations": st.citations, "uncited": st.uncited}
            for st in statements(res.answer.text)],
        "sources": [source_json(e) for e in cited],
        "best_score": round(res.best_score, 6),
        "coverage": round(res.coverage, 6),
        "reason": res.reason,
        **({"min_score_key": res.min_score_key, "min_score_used": res.min_score_used}
           if res.min_score_used is not None else {}),
        "generator": res.answer.generator,
        "latency_ms": round(res.latency_ms, 1),
        "timings": {k: round(v, 1) for k, v in res.timings.items()},
        **({"rewrites": res.rewrites} if res.rewrites else {}),
        **({"grade": res.grade} if res.grade else {}),
        "n_citations_removed": res.answer.n_citations_removed,
        "n_evidence_cut": res.answer.n_evidence_cut,
        "left_out": [{"n": e.number, "chunk_id": e.chunk_id, "doc_id": e.doc_id} for e in res.left_out],
        "evidence": [{"n": e.number, "chunk_id": e.chunk_id, "doc_id": e.doc_id, "score": round(e.score, 6),
                      **({"rerank_score": round(e.rerank_score, 6)} if e.rerank_score is not None else {}),
                      "text": e.text, **({"context": e.context} if e.context else {})} for e in res.evidence],
    }


def ask_json(res) -> dict:
    """An `AskResult` as `rag ask QUESTION --json` prints it."""
    return {**answer_json(res), "n_queries_truncated": res.n_queries_truncated}


def json_safe(obj: Any) -> Any:
    """`obj` (typed results as their dicts) with every float NaN or +-inf replaced by None (JSON has no such
    numbers)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "to_dict"):
        return json_safe(obj.to_dict())
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
