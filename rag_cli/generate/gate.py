"""The entity rule of the refusal gate: the question's rare terms must be in
one piece of evidence.

A question whose own passage is missing still retrieves passages about a
similar subject (another metro station, another footballer) with a high
cosine and most of the question's common words; what they lack is the
subject itself, the question's rarest terms. So:

* key terms: the question's analyzed BM25 terms (jieba words, stemmed
  English words; `rag_cli.index.sparse.analyze`) that are not question words
  (`QUESTION_WORDS`: 什么, 多少, 谁, 哪个, ...; English ones are BM25
  stopwords already), whose Lucene idf is at least `key_idf` times the idf of
  a term no chunk contains (the largest idf there is);
* entity coverage: the largest, over the evidence texts, idf-weighted share
  of the key terms that one text contains, in [0, 1]; 1.0 when the question
  has no key terms. A CJK term counts as contained when it is a substring of
  the text (jieba may cut the passage's words differently from the
  question's); other terms when they are among the text's analyzed terms.

`rag ask` refuses when the entity coverage is below `ask.min_entity_coverage`
and the best cosine is below `ask.strong_score` (a strong semantic match,
e.g. across languages, needs no shared words). The rule judges questions
with CJK characters only, unless `ask.entity_scope` is "all"
(`entity_rule_applies`).

The cosine threshold is per language (`min_score_for`): `ask.min_score`
judges a question with CJK characters (the test of the entity rule's scope,
`has_cjk`), `ask.min_score_en` every other question; the evidence given to
the generator is cut at the same threshold.

The whole gate decision is `gate_reason`, a pure function of the
question's `GateSignals` and the `[ask]` config: `rag ask` calls it on the
signals it measured, and `rag eval tune refusal` on the signals recorded
in answers/NAME.parquet, so the simulated decision is the real one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rag_cli.loaders.normalize import has_cjk, normalize_text

#: Chinese interrogatives and question fillers: rare in passages (a high idf), never the subject.
QUESTION_WORDS = frozenset(
    "什么 什么样 为何 为什么 怎样 怎么 怎么样 如何 谁 哪 哪里 哪儿 哪个 哪些 哪一 哪年 哪位 哪种 多少 几 几个 "
    "几年 何 何时 何处 何地 何种 时候 是否 多大 多久 多长 多高 多远 多重 吗 呢 啥".split())


def entity_rule_applies(question: str, cfg) -> bool:
    """Whether the entity rule judges `question` under the `[ask]` config `cfg`
    (`AskConfig`): it is on (min_entity_coverage > 0) and the question is in
    its scope (entity_scope "all", or "zh" and the question has CJK characters)."""
    return _entity_rule_on(has_cjk(question), cfg)


def _entity_rule_on(cjk: bool, cfg) -> bool:
    return cfg.min_entity_coverage > 0 and (cfg.entity_scope == "all" or cjk)


def min_score_key(cjk: bool) -> str:
    """The `[ask]` key of the cosine threshold that judges a question:
    "min_score" when it has CJK characters (`cjk`, `has_cjk` of the
    question, as for the entity rule's scope "zh"), else "min_score_en"."""
    return "min_score" if cjk else "min_score_en"


def min_score_for(cjk: bool, cfg) -> float:
    """The cosine threshold (in [-1, 1]) that judges a question with (`cjk`)
    or without CJK characters under the `[ask]` config `cfg` (`AskConfig`):
    its `min_score_key`'s value. The gate refuses below it, and only
    evidence at or above it is given to the generator."""
    return float(getattr(cfg, min_score_key(cjk)))


@dataclass(frozen=True)
class GateSignals:
    """What the gate judges of one question's evidence.

    n_evidence: chunks retrieved (0 = nothing found); best_score: the best
    evidence's bi-encoder cosine (-1.0 without evidence); coverage: the
    idf-weighted share of the question's BM25 terms in the evidence, [0, 1];
    entity_coverage: `question_entity_coverage`, [0, 1]; cjk: whether the
    question has CJK characters (the entity rule's scope); rerank_score: the
    best cross-encoder score of the evidence (raw logit), None without a
    reranker.
    """

    n_evidence: int
    best_score: float
    coverage: float
    entity_coverage: float
    cjk: bool
    rerank_score: float | None = None
    answer_terms: float | None = None
    answer_type: float | None = None
    sentence_score: float | None = None
    reader_null: float | None = None

    def to_row(self) -> dict:
        """The signals as answers-file columns (`rag_cli.store.answers`)."""
        return {k: getattr(self, k) for k in ROW_SIGNALS}


#: The signals an answers file records per question (besides n_evidence, from `contexts`, and cjk, from the question).
ROW_SIGNALS = ("best_score", "coverage", "entity_coverage", "rerank_score", "answer_terms", "answer_type",
               "sentence_score", "reader_null")

#: The features of the learned refusal, in the order of `ask.refusal_weights` (after the bias).
FEATURES = ("best_score", "coverage", "entity_coverage", "answer_terms", "answer_type_missing", "sentence_score",
            "rerank_score", "reader_null")


def features(s: GateSignals) -> list[float]:
    """The `FEATURES` of signals `s`: each signal as recorded (0.0 when
    missing: no reranker, no reader, no candidate sentence), and
    answer_type_missing = 1.0 when the question asks for a number or date
    that the sentence to be quoted lacks (answer_type 0.0), else 0.0."""
    def v(x) -> float:
        return 0.0 if x is None else float(x)

    return [v(s.best_score), v(s.coverage), v(s.entity_coverage), v(s.answer_terms),
            1.0 if s.answer_type == 0.0 else 0.0, v(s.sentence_score), v(s.rerank_score), v(s.reader_null)]


def learned_score(s: GateSignals, weights) -> float:
    """bias + sum(w_i * feature_i) of the learned refusal (`weights` = [bias,
    w per `FEATURES`]): the log-odds that the question is answerable, the
    decision threshold folded into the bias; it refuses below 0."""
    return float(weights[0]) + sum(float(w) * x for w, x in zip(weights[1:], features(s)))


def gate_reason(s: GateSignals, cfg) -> str:
    """Why the gate refuses a question with signals `s` under the `[ask]`
    config `cfg` (`AskConfig`), or "" when it lets it through. In order:
    no evidence; best cosine below the question's threshold
    (`min_score_for`: `min_score` with CJK characters, else
    `min_score_en`); with a reranker and
    `min_rerank_score` != 0, the best cross-encoder score below it; coverage
    below `min_coverage` and cosine below `strong_score`; the entity rule
    (when `_entity_rule_on`) below `min_entity_coverage` and cosine below
    `strong_score`; with a reader, its no-answer score above its best span's
    (`reader_null` > 0); with `refusal_weights` set, the learned refusal
    (`learned_score` < 0) for questions in `refusal_scope`. With `cfg.gate`
    "off" nothing is refused here (the generator may still refuse)."""
    if cfg.gate == "off":
        return ""
    best = s.best_score
    if s.n_evidence == 0:
        return "no evidence was retrieved"
    floor = min_score_for(s.cjk, cfg)
    if best < floor:
        return f"best evidence cosine {best:.3f} is below {min_score_key(s.cjk)} {floor}"
    if s.rerank_score is not None and cfg.min_rerank_score != 0 and s.rerank_score < cfg.min_rerank_score:
        return (f"best cross-encoder score {s.rerank_score:.3f} is below min_rerank_score "
                f"{cfg.min_rerank_score}")
    if s.coverage < cfg.min_coverage and best < cfg.strong_score:
        return (f"the evidence holds {s.coverage:.2f} of the question's terms (min_coverage {cfg.min_coverage}) "
                f"and its cosine {best:.3f} is below strong_score {cfg.strong_score}")
    if _entity_rule_on(s.cjk, cfg) and s.entity_coverage < cfg.min_entity_coverage and best < cfg.strong_score:
        return (f"no evidence holds the question's key terms: at most {s.entity_coverage:.2f} of them "
                f"(min_entity_coverage {cfg.min_entity_coverage}) and the cosine {best:.3f} is below "
                f"strong_score {cfg.strong_score}")
    if s.reader_null is not None and s.reader_null > 0:
        return (f"the reader's no-answer score beats its best span by {s.reader_null:.2f} "
                f"(model.reader)")
    weights = getattr(cfg, "refusal_weights", None)
    if weights and _learned_applies(s.cjk, cfg):
        z = learned_score(s, weights)
        if z < 0:
            return (f"the learned refusal (ask.refusal_weights) judges the sentence that would be quoted unlikely "
                    f"to answer: log-odds {z:.2f} < 0")
    return ""


def _learned_applies(cjk: bool, cfg) -> bool:
    """Whether the learned refusal judges a question: `ask.refusal_scope` all, or en / zh by its characters."""
    scope = getattr(cfg, "refusal_scope", "all")
    return scope == "all" or (scope == "zh") == cjk


def max_idf(n_docs: int) -> float:
    """The Lucene idf of a term no chunk contains: ln(1 + (N + 0.5) / 0.5)."""
    return math.log(1.0 + (n_docs + 0.5) / 0.5)


def key_terms(idf: dict[str, float], n_docs: int, key_idf: float) -> dict[str, float]:
    """The terms of `idf` ({term: idf}) that are not `QUESTION_WORDS` and whose
    idf is >= `key_idf` * `max_idf(n_docs)`, with their idf."""
    floor = key_idf * max_idf(n_docs)
    return {t: v for t, v in idf.items() if t not in QUESTION_WORDS and v >= floor}


def holds_term(term: str, low: str, terms: set[str]) -> bool:
    """Whether a text holds an analyzed `term`: a CJK term as a substring of
    the text's normalised lower-case form `low`, another term as one of the
    text's analyzed `terms`."""
    return term in low if has_cjk(term) else term in terms


def entity_coverage(key: dict[str, float], texts: Iterable[str],
                    analyze: Callable[[str], list[str]]) -> float:
    """The largest idf-weighted share of the `key` terms ({term: idf}) found in
    one of `texts`, in [0, 1] (see the module docstring); 1.0 when `key` is
    empty, 0.0 when there are no texts."""
    total = sum(key.values())
    if total <= 0:
        return 1.0
    best = 0.0
    for text in texts:
        low = normalize_text(text).lower()
        terms = set(analyze(low))
        found = sum(v for t, v in key.items() if holds_term(t, low, terms))
        best = max(best, found / total)
    return best


def question_entity_coverage(question: str, texts: list[str], sparse, key_idf: float) -> float:
    """`entity_coverage` of `question`'s key terms in `texts`, with the idf of
    the `SparseIndex` `sparse` (its `idf`, its chunk count)."""
    from rag_cli.index.sparse import analyze

    terms = sorted(set(analyze(question)))
    n_docs = int(sparse.retriever.scores["num_docs"])
    return entity_coverage(key_terms(sparse.idf(terms), n_docs, key_idf), texts, analyze)
