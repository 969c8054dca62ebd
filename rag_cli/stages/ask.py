"""`rag ask`: retrieve, number the evidence, answer with citations [n], or refuse.

Refusal: the answer is the refusal sentence in the question's language
("Not found in the sources." / "资料中未提及。") and `refused` is true when

* the best evidence's bi-encoder cosine with the question is below the
  question's threshold: `min_score` for a question with Chinese characters,
  `min_score_en` for any other (`rag_cli.generate.gate.min_score_for`;
  per-model thresholds: e5 cosines sit in about 0.7-1.0), or
* the evidence contains less than `min_coverage` of the question's
  idf-weighted BM25 terms (`SparseIndex.coverage`) and the cosine is below
  `strong_score` (a strong semantic match, e.g. across languages, needs no
  shared words), or
* no single piece of evidence holds `min_entity_coverage` of the question's
  key terms (its rarest terms: the subject it asks about) and the cosine is
  below `strong_score` (`rag_cli.generate.gate`; the text measured is the
  one the generator reads, with its title path; by default only for
  questions with CJK characters, `ask.entity_scope`), or
* with a reranker, the best cross-encoder score is below
  `min_rerank_score` (0 = off).

The decision is `rag_cli.generate.gate.gate_reason` of the measured
`GateSignals` (the entity coverage is measured for every question, in the
rule's scope or not, so that answers files record it). With `ask.gate`
"off" no rule refuses and the generator reads all the evidence; its own
refusal is recorded apart (`AskResult.generator_refused`).

Small-to-big: when a retrieved chunk has a `context` (the `sentence`
strategy's sentence window, the `parent-child` strategy's parent), the
generator reads that text in the chunk's place; the chunk keeps its number
[n], and citations and `contexts` name the retrieved chunk ids. The refusal
rules are unchanged: the cosine is the retrieved chunk's, and the coverage is
measured on the text the generator reads (a single sentence rarely holds
every term of a question; its window or parent does).

Only evidence at or above the question's threshold (`min_score` or
`min_score_en`, `AskResult.min_score_used`) is given to the generator; it
keeps its number [n]. (Measured cosines and coverages: docs/results.md.)

Citations: the text given to any generator has its citation-shaped brackets
neutralised (`[3]` -> `(3)`, `rag_cli.generate.citations.neutralise`), and
every marker of the answer is checked against the numbers of the evidence
the generator was actually shown: an LLM generator is shown only what fits
its token budget (`generator.context_tokens`, `prompt.shown_evidence`), and
a marker naming evidence left out of the prompt (`AskResult.left_out`) is
removed and counted like any other number not given
(`Answer.n_citations_removed`).

Rewriting (`ask.rewrite`, an LLM generator; `rag_cli.generate.rewrite`):
the chunks retrieved for each rewrite (a multi-query phrasing, searched as
a query; a HyDE passage, embedded as a passage) are fused with those of the
original question by RRF (`search.rrf_k`), the original always among the
fused lists; the evidence cosines are the original question's. `timings`
then has `rewrite_ms`, and `AskResult.rewrites` the rewrites.

Reranking: when a `reranker` is given (`model.reranker` is set), the best
`ask.rerank_candidates` chunks are retrieved, scored by the cross-encoder
(question, heading path + chunk text), and the best `k` by that score are
numbered [1]..[k] in its order (`Evidence.rerank_score`); the gate still
judges their bi-encoder cosines. `timings` then has `rerank_ms`.

Reader (`model.reader`, `reader`: `rag_cli.models.reader.Reader`): an
extractive QA model reads every piece of evidence (as the generator would)
for its best span and no-answer score; the gate refuses when the least
no-answer score beats the best span (`GateSignals.reader_null` > 0), and
with the extractive generator the answer is the best span among the given
evidence, cited, the sentence holding it kept as `Answer.support`
(`generator` "reader"). With an LLM generator the reader only gates.

Grading (`ask.grade = "llm"`, an LLM generator; `rag_cli.generate.grade`):
when the gate lets a question through, the generator is first asked whether
the sources contain the answer; "no" refuses with `grade.REASON`. `timings`
then has `grade_ms`, and `AskResult.grade` the grade.

Streaming (`on_text`): the answer text is passed to `on_text` as it is
written, plain (`safe_text.PlainStream`) and with its markers checked as
they close (`citations.CitationStream`); everything passed, concatenated,
is the text the answer would have without streaming (a refusal: the
refusal sentence, at once; a generator that cannot stream: its whole
answer, once). The model's text is made plain before its markers are
checked, streamed or not.

The question is normalised once, here (`prepare_query`), as `rag search`
normalises queries.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rag_cli.chunking import make_embed_text
from rag_cli.config import AskConfig, SearchConfig
from rag_cli.generate.base import Answer, Evidence, refusal, script_question
from rag_cli.generate.citations import CitationStream, check_answer, neutralise
from rag_cli.generate.gate import GateSignals, gate_reason, min_score_for, min_score_key, question_entity_coverage
from rag_cli.generate.prompt import shown_evidence
from rag_cli.generate.grade import REASON as GRADE_REASON, check_grader, grade as grade_evidence
from rag_cli.generate.rewrite import rewrite as write_rewrites
from rag_cli.index.fusion import rrf
from rag_cli.index.searcher import Searcher, check_query, prepare_query
from rag_cli.loaders.normalize import has_cjk
from rag_cli.progress import Progress
from rag_cli.safe_text import PlainStream, plain
from rag_cli.store.answers import write_answers

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder


@dataclass
class AskResult:
    """The answer to one question: `answer` (text, citations, refused,
    generator), the numbered `evidence` retrieved, the best evidence cosine,
    the term coverage (0-1), the latency (ms) and, when refused, why.
    `question` is as asked (the retrieval used its normalised form)."""

    question: str
    answer: Answer
    evidence: list[Evidence]
    best_score: float
    coverage: float
    latency_ms: float
    reason: str = ""
    n_queries_truncated: int = 0  # 1 when the question was cut to the bi-encoder's max_length
    max_length: int | None = None  # the bi-encoder's max_length (tokens)
    timings: dict = field(default_factory=dict)  # retrieve_ms, generate_ms, total_ms (float, milliseconds)
    given: list[Evidence] = field(default_factory=list)  # the evidence the generator was shown (as it read it)
    left_out: list[Evidence] = field(default_factory=list)  # evidence past the gate left out of the prompt (budget)
    signals: GateSignals | None = None  # every signal the gate judged (`rag_cli.generate.gate.GateSignals`)
    entity_coverage: float = 1.0  # the gate's entity coverage, in [0, 1] (rag_cli.generate.gate)
    rewrites: list[str] = field(default_factory=list)  # the generator's rewrites of the question (ask.rewrite)
    rerank_score: float | None = None  # the best cross-encoder score of the evidence; None without a reranker
    generator_refused: bool | None = None  # the generator's own refusal; None when the gate refused first
    grade: str = ""  # the generator's grade of the evidence (ask.grade = "llm"): yes | no | unclear; "" = not graded
    min_score_key: str = ""  # the [ask] key of the cosine threshold that judged the question: min_score | min_score_en
    min_score_used: float | None = None  # its value, a cosine in [-1, 1] (reported with the gate off too)

    @property
    def refused(self) -> bool:
        return self.answer.refused

    def to_dict(self) -> dict:
        """The result as `rag ask --json` prints it (`rag_cli.json_shapes.ask_json`: one JSON shape for
        the CLI, `rag serve` and Python), like the other results' `to_dict()` (`rag_cli.results`)."""
        from rag_cli.json_shapes import ask_json

        return ask_json(self)


_PICKERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def picker_for(searcher: Searcher, generator):
    """What ranks the candidate sentences of the evidence for the gate's
    per-sentence signals (`ExtractiveGenerator.rank` and `.signals`): the
    extractive generator itself, else one kept per searcher, over its
    bi-encoder and BM25 index."""
    if hasattr(generator, "rank") and hasattr(generator, "signals"):
        return generator
    picker = _PICKERS.get(searcher)
    if picker is None:
        from rag_cli.generate.extractive import ExtractiveGenerator
        from rag_cli.index.sparse import analyze

        emb = searcher.embedder
        picker = ExtractiveGenerator(lambda q: emb.encode_queries([q])[0],
                                     lambda ps: emb.query_encoder.encode_passages(ps), analyze, searcher.sparse.idf)
        _PICKERS[searcher] = picker
    return picker


def rerank_evidence(question: str, evidence: list[Evidence], reranker, k: int) -> list[Evidence]:
    """The best `k` of `evidence` by `reranker(question, texts)` ((n,) float
    cross-encoder scores, higher is better; ties keep the retrieval order),
    renumbered 1..k, each with its `rerank_score`."""
    if not evidence:
        return evidence
    scores = np.asarray(reranker(question, [make_embed_text(e.title_path, e.text) for e in evidence]),
                        dtype=np.float64)
    order = np.argsort(-scores, kind="stable")[:k]
    return [replace(evidence[i], number=n + 1, rerank_score=float(scores[i])) for n, i in enumerate(order)]


def evidence_for(searcher: Searcher, question: str, *, k: int, mode: str, mask=None,
                 candidates: int = 100, rrf_k: int = 60, fusion: str = "rrf",
                 dense_weight: float = 0.5, rewrites: list[str] = (),
                 hyde: bool = False) -> tuple[list[Evidence], float]:
    """Top-`k` chunks as numbered evidence, each scored by its bi-encoder cosine
    with the question; returns (evidence, best cosine) (-1.0 when nothing was found).

    With `rewrites`, each is searched too (as a passage vector when `hyde`)
    and the top-`k` lists are fused with the question's by RRF (`rrf_k`)."""
    qv = searcher.encode_queries([question])  # once, for retrieval and the cosines
    opts = dict(mode=mode, k=k, candidates=candidates, rrf_k=rrf_k, mask=mask, fusion=fusion,
                dense_weight=dense_weight)
    hits = searcher.search(question, query_vector=qv[0], **opts)
    if rewrites:
        lists = [hits]
        for text in rewrites:
            vec = (searcher.embedder.encode_passages([text]) if hyde and mode != "sparse"
                   else None if mode == "sparse" else searcher.encode_queries([text]))
            lists.append(searcher.search(text, query_vector=None if vec is None else vec[0], **opts))
        by_row = {h.row: h for hs in reversed(lists) for h in hs}  # the question's own hit wins
        hits = [by_row[row] for row, _ in rrf([[h.row for h in hs] for hs in lists], k=rrf_k)[:k]]
    if not hits:
        return [], -1.0
    q = qv[0]
    vecs = searcher.vectors([h.row for h in hits])
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    cos = vecs @ (q / max(np.linalg.norm(q), 1e-12))
    columns = searcher.chunks.column_names
    evidence = [
        Evidence(number=i + 1, chunk_id=h.chunk_id, doc_id=h.doc_id, text=h.text,
                 score=float(cos[i]), title_path=list(searcher.chunks.column("title_path")[h.row].as_py() or [])
                 if "title_path" in columns else [],
                 context=searcher.text(h.row, "context") if "context" in columns else None)
        for i, h in enumerate(hits)
    ]
    return evidence, float(cos.max())


def _generate(generator, question: str, given: list[Evidence], on_text) -> tuple[Answer, list[Evidence]]:
    """The generator's answer, made plain and checked (`check_answer`)
    against the evidence it was shown (`prompt.shown_evidence`: what fits an
    LLM's token budget), and that evidence; with `on_text`, streamed through
    `PlainStream` and `CitationStream` when the generator streams. A marker
    naming evidence left out of the prompt is removed and counted like any
    number that was not given."""
    shown, n_cut = shown_evidence(generator, given)
    if on_text is None or not getattr(generator, "streams", False):
        answer = generator.generate(question, shown)
    else:
        checker = CitationStream({e.number for e in shown}, on_text)
        sanitiser = PlainStream(checker.feed)
        answer = generator.generate(question, shown, on_token=sanitiser.feed)
        sanitiser.close()
        checker.close()
    answer = replace(answer, text=plain(answer.text), n_evidence_cut=max(answer.n_evidence_cut, n_cut))
    return check_answer(answer, shown), shown


def read_evidence(reader, question: str, evidence: list[Evidence]) -> tuple[list, float | None]:
    """The reader's best span per piece of `evidence` (as the generator reads
    it: context or text) and the no-answer margin: the least no-answer score
    over the pieces minus the best span score (> 0: no-answer wins); None
    without evidence."""
    texts = [neutralise(e.context or e.text) for e in evidence]
    spans = reader.read(question, texts)
    scored = [sp for sp in spans if sp.text]
    if not spans:
        return spans, None
    best = max((sp.score for sp in scored), default=-1e9)
    return spans, float(min(sp.null_score for sp in spans) - best)


def reader_answer(spans, evidence: list[Evidence], given: list[Evidence]) -> Answer:
    """The answer of the reader: its best span among the `given` evidence,
    cited, with the sentence that holds it as `support`; a refusal when
    no span was found there."""
    from rag_cli.generate.extractive import split_sentences

    numbers = {e.number for e in given}
    best = max((sp for sp, e in zip(spans, evidence) if e.number in numbers and sp.text),
               key=lambda sp: sp.score, default=None)
    if best is None:
        return Answer(text="", citations=[], refused=True, generator="reader")
    ev = evidence[best.index]
    support = next((x for x in split_sentences(neutralise(ev.context or ev.text)) if best.text in x), best.text)
    return Answer(text=f"{best.text} [{ev.number}]", citations=[ev.chunk_id], refused=False, generator="reader",
                  support=f"{support} [{ev.number}]")


def ask(searcher: Searcher, generator, question: str, cfg: AskConfig, search: SearchConfig,
        mask=None, reranker=None, on_text=None, reader=None) -> AskResult:
    """Answer `question` from the index only, with the `[ask]` config `cfg`
    (k, thresholds, grade) and the retrieval of the `[search]` config (mode,
    candidates, rrf_k). See the module docstring for refusal, grading and
    streaming; `reranker`: (question, [text]) -> (n,) cross-encoder scores,
    or None; `on_text`: called with each piece of the answer text (str) as
    it is written, or None.

    Raises BadInput for an empty question, or ask.grade "llm" with a
    generator that cannot grade.
    """
    check_grader(generator, cfg.grade)
    asked, question = question, prepare_query(check_query(question))
    t0 = time.perf_counter()
    rewrites = write_rewrites(generator, question, cfg.rewrite)
    rewrite_ms = (time.perf_counter() - t0) * 1000.0
    depth = max(cfg.k, cfg.rerank_candidates) if reranker is not None else cfg.k
    evidence, best = evidence_for(searcher, question, k=depth, mode=search.mode, mask=mask,
                                  candidates=search.candidates, rrf_k=search.rrf_k, fusion=search.fusion,
                                  dense_weight=search.dense_weight, rewrites=rewrites,
                                  hyde=cfg.rewrite == "hyde")
    t_rerank = time.perf_counter()
    if reranker is not None and evidence:
        evidence = rerank_evidence(question, evidence, reranker, cfg.k)
        best = max(e.score for e in evidence)
    rerank_ms = (time.perf_counter() - t_rerank) * 1000.0
    read = [make_embed_text(e.title_path, e.context or e.text) for e in evidence]
    coverage = searcher.sparse.coverage(question, read) if evidence else 0.0
    entity = max((question_entity_coverage(script_question(question, [e.context or e.text]), [t], searcher.sparse,
                                           cfg.key_idf) for e, t in zip(evidence, read)), default=1.0)
    quoted = {}
    if evidence and (generator.name == "extractive" or cfg.refusal_weights or cfg.gate == "off"):
        picker = picker_for(searcher, generator)
        read_as = [replace(e, text=neutralise(e.context or e.text), context=None) for e in evidence]
        quoted = picker.signals(question, picker.rank(question, read_as))
    spans, reader_null = (read_evidence(reader, question, evidence) if reader is not None and evidence
                          else ([], None))
    signals = GateSignals(n_evidence=len(evidence), best_score=best, coverage=coverage, entity_coverage=entity,
                          cjk=has_cjk(question),
                          rerank_score=evidence[0].rerank_score if reranker is not None and evidence else None,
                          reader_null=reader_null, **quoted)
    reason = gate_reason(signals, cfg)
    threshold_key, threshold = min_score_key(signals.cjk), min_score_for(signals.cjk, cfg)
    t1 = time.perf_counter()
    given: list[Evidence] = []
    left_out: list[Evidence] = []
    generator_refused = None
    graded = ""
    if not reason:
        floor = threshold if cfg.gate == "on" else -math.inf  # with the gate off, all the evidence
        given = [replace(e, text=neutralise(e.context or e.text), context=None)
                 for e in evidence if e.score >= floor]
        if cfg.grade == "llm":
            graded = grade_evidence(generator, question, given)
            if graded == "no":
                reason, generator_refused = GRADE_REASON, True
    grade_ms = (time.perf_counter() - t1) * 1000.0
    if reason:
        answer = Answer(text=refusal(question), citations=[], refused=True, generator=generator.name)
        if on_text is not None:
            on_text(answer.text)
    elif reader is not None and generator.name == "extractive":  # the reader answers with its best span
        answer = check_answer(reader_answer(spans, evidence, given), given)
        left_out = []
        generator_refused = answer.refused
        if answer.refused:
            answer.text = refusal(question)
            reason = "the reader found no span in the evidence"
        if on_text is not None:
            on_text(answer.text)
    else:
        answer, shown = _generate(generator, question, given, on_text)
        shown_numbers = {e.number for e in shown}
        left_out = [e for e in given if e.number not in shown_numbers]
        given = shown
        generator_refused = answer.refused
        if answer.refused:
            answer.text = refusal(question)
            reason = ("the generator found no sentence to quote" if generator.name == "extractive"
                      else "the generator answered that the sources do not hold the answer")
        if on_text is not None and not getattr(generator, "streams", False):
            on_text(answer.text)  # a generator that cannot stream: its whole answer, once
    t2 = time.perf_counter()
    timings = {"retrieve_ms": (t1 - t0) * 1000.0 - rerank_ms - rewrite_ms,
               "generate_ms": (t2 - t1) * 1000.0 - grade_ms, "total_ms": (t2 - t0) * 1000.0}
    if cfg.grade != "off":
        timings["grade_ms"] = grade_ms
    if reranker is not None:
        timings["rerank_ms"] = rerank_ms
    if cfg.rewrite != "none":
        timings["rewrite_ms"] = rewrite_ms
    return AskResult(asked, answer, evidence, best, coverage, timings["total_ms"], reason,
                     timings=timings, given=given, entity_coverage=entity, rewrites=rewrites,
                     rerank_score=signals.rerank_score, generator_refused=generator_refused, grade=graded,
                     left_out=left_out, signals=signals, min_score_key=threshold_key, min_score_used=threshold)


def answer_queries(project: "ProjectFolder", searcher: Searcher, generator, queries_path: Path, cfg: AskConfig,
                   search: SearchConfig, mask=None, *, path: Path, reranker=None,
                   progress: Progress | None = None, reader=None) -> tuple[Path, int, int]:
    """Answer every question of a query file into `path` (answers/NAME.parquet).
    Progress: ("answering", questions done, questions).

    Returns (path, n answers, n refused).
    """
    from rag_cli.evaluate.datasets import read_queries

    rows, evidence = [], {}
    queries = read_queries(queries_path)
    for i, (qid, text) in enumerate(queries):
        res = ask(searcher, generator, text, cfg, search, mask, reranker, reader=reader)
        evidence.update((e.chunk_id, e.text) for e in res.evidence)
        rows.append({"query_id": qid, "question": text, "answer": res.answer.text,
                     "citations": res.answer.citations, "contexts": [e.chunk_id for e in res.evidence],
                     "refused": res.answer.refused, "generator": res.answer.generator,
                     "latency_ms": res.latency_ms, **res.signals.to_row(),
                     "reason": res.reason, "generator_refused": res.generator_refused})
        if progress is not None:
            progress("answering", i + 1, len(queries))
    write_answers(path, rows, evidence)
    project.record(f"ask:{path.name}", params=dict(cfg.__dict__, mode=search.mode, reranked=reranker is not None),
                   inputs={"queries": str(queries_path)}, outputs=[str(path)], rows=len(rows))
    return path, len(rows), sum(r["refused"] for r in rows)
