"""`rag ask`: retrieve, number the evidence, answer with citations [n], or refuse.

Refusal: the answer is the refusal sentence in the question's language
("Not found in the sources." / "资料中未提及。") and `refused` is true when

* the best evidence's bi-encoder cosine with the question is below
  `min_score` (a per-model threshold; e5 cosines sit in about 0.7-1.0), or
* the evidence contains less than `min_coverage` of the question's
  idf-weighted BM25 terms (`SparseIndex.coverage`) and the cosine is below
  `strong_score` (a strong semantic match, e.g. across languages, needs no
  shared words).

Small-to-big: when a retrieved chunk has a `context` (the `sentence`
strategy's sentence window, the `parent-child` strategy's parent), the
generator reads that text in the chunk's place; the chunk keeps its number
[n], and citations and `contexts` name the retrieved chunk ids. The refusal
rules are unchanged: the cosine is the retrieved chunk's, and the coverage is
measured on the text the generator reads (a single sentence rarely holds
every term of a question; its window or parent does).

Measured on sample_corpus (multilingual-e5-small, int8): the 8 answerable
questions have cosine 0.86-0.93 and coverage 0.49-1.0; off-topic questions
("今天天气怎么样？", "hello", "?", "Who won the FIFA World Cup in 1998?")
have cosine 0.76-0.84 and coverage 0.0-0.21. Only evidence at or above
`min_score` is given to the generator; it keeps its number [n].
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from rag_cli.chunking import make_embed_text
from rag_cli.generate.base import Answer, Evidence, refusal
from rag_cli.stages.search import Searcher


@dataclass
class AskResult:
    question: str
    answer: Answer
    evidence: list[Evidence]
    best_score: float
    coverage: float
    latency_ms: float
    reason: str = ""


def evidence_for(searcher: Searcher, question: str, *, k: int, mode: str, mask=None,
                 candidates: int = 100, rrf_k: int = 60) -> tuple[list[Evidence], float]:
    """Top-`k` chunks as numbered evidence, each scored by its bi-encoder cosine
    with the question; returns (evidence, best cosine) (-1.0 when nothing was found)."""
    qv = searcher.encode_queries([question])  # once, for retrieval and the cosines
    hits = searcher.search([question], mode=mode, k=k, candidates=candidates, rrf_k=rrf_k, mask=mask,
                           query_vectors=qv)[0]
    if not hits:
        return [], -1.0
    q = qv[0]
    vecs = np.asarray(searcher.dense.index.get_items([h.row for h in hits]), dtype=np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    cos = vecs @ (q / max(np.linalg.norm(q), 1e-12))
    columns = searcher.chunks.column_names
    evidence = [
        Evidence(number=i + 1, chunk_id=h.chunk_id, doc_id=h.doc_id, text=searcher.text(h.row),
                 score=float(cos[i]), title_path=list(searcher.chunks.column("title_path")[h.row].as_py() or [])
                 if "title_path" in columns else [],
                 context=searcher.text(h.row, "context") if "context" in columns else None)
        for i, h in enumerate(hits)
    ]
    return evidence, float(cos.max())


def ask(searcher: Searcher, generator, question: str, *, k: int = 5, mode: str = "hybrid",
        min_score: float = 0.82, min_coverage: float = 0.3, strong_score: float = 0.9, mask=None,
        candidates: int = 100, rrf_k: int = 60) -> AskResult:
    """Answer `question` from the index only. See the module docstring for refusal.
    `candidates` and `rrf_k` are the hybrid retrieval's (`search.candidates`, `search.rrf_k`).

    Raises BadInput for an empty question.
    """
    from rag_cli.stages.search import check_query

    check_query(question)
    t0 = time.perf_counter()
    evidence, best = evidence_for(searcher, question, k=k, mode=mode, mask=mask, candidates=candidates,
                                  rrf_k=rrf_k)
    coverage = searcher.sparse.coverage(question, [make_embed_text(e.title_path, e.context or e.text)
                                                   for e in evidence]) if evidence else 0.0
    reason = ""
    if not evidence:
        reason = "no evidence was retrieved"
    elif best < min_score:
        reason = f"best evidence cosine {best:.3f} is below min_score {min_score}"
    elif coverage < min_coverage and best < strong_score:
        reason = (f"the evidence holds {coverage:.2f} of the question's terms (min_coverage {min_coverage}) "
                  f"and its cosine {best:.3f} is below strong_score {strong_score}")
    if reason:
        answer = Answer(text=refusal(question), citations=[], refused=True, generator=generator.name)
    else:
        answer = generator.generate(question, [replace(e, text=e.context) if e.context else e
                                               for e in evidence if e.score >= min_score])
        if answer.refused:
            answer.text = refusal(question)
            reason = "the generator found no sentence to quote"
    return AskResult(question, answer, evidence, best, coverage, (time.perf_counter() - t0) * 1000.0, reason)


def answer_queries(project, searcher: Searcher, generator, queries_path, cfg: dict, mode: str, mask=None,
                   name: str | None = None, candidates: int = 100, rrf_k: int = 60):
    """Answer every question of a query file into `answers/NAME.parquet`
    (`cfg`: the `[ask]` config; `candidates`, `rrf_k`: as in `ask`).

    Returns (path, n answers, n refused).
    """
    import pyarrow as pa

    from rag_cli import atomic
    from rag_cli.evaluate.datasets import read_queries
    from rag_cli.loaders.normalize import normalize_text
    from rag_cli.project import file_stem

    rows = []
    for qid, text in read_queries(queries_path):
        res = ask(searcher, generator, normalize_text(text), k=cfg["k"], mode=mode, min_score=cfg["min_score"],
                  min_coverage=cfg["min_coverage"], strong_score=cfg["strong_score"], mask=mask,
                  candidates=candidates, rrf_k=rrf_k)
        rows.append({"query_id": qid, "question": text, "answer": res.answer.text,
                     "citations": res.answer.citations, "contexts": [e.chunk_id for e in res.evidence],
                     "refused": res.answer.refused, "generator": res.answer.generator,
                     "latency_ms": res.latency_ms, "best_score": res.best_score, "coverage": res.coverage})
    schema = pa.schema([("query_id", pa.string()), ("question", pa.string()), ("answer", pa.string()),
                        ("citations", pa.list_(pa.string())), ("contexts", pa.list_(pa.string())),
                        ("refused", pa.bool_()), ("generator", pa.string()), ("latency_ms", pa.float64()),
                        ("best_score", pa.float64()), ("coverage", pa.float64())])
    path = project.answers_path(name or file_stem(queries_path))
    atomic.write_parquet(path, pa.Table.from_pylist(rows, schema=schema))
    project.record(f"ask:{path.name}", params=dict(cfg, mode=mode), inputs={"queries": str(queries_path)},
                   outputs=[str(path)], rows=len(rows))
    return path, len(rows), sum(r["refused"] for r in rows)
