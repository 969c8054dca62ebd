"""Answer metrics: exact match, F1, has-answer, citation precision and
recall, refusal rate, latency percentiles.

* Exact match and F1 are those of the SQuAD v1.1 evaluation script
  (`evaluate-v1.1.py`, Rajpurkar et al., "SQuAD: 100,000+ Questions for
  Machine Comprehension of Text", EMNLP 2016): both strings normalised
  (`normalize_answer`: Unicode NFKC first, as the loaders normalise
  document text, so "km²" in a gold answer matches the "km2" of a chunk;
  then lower case, punctuation removed, the English articles
  a/an/the removed, whitespace collapsed); EM = 1 if they are equal; F1 = the
  harmonic mean of token precision and recall over the bag of shared tokens
  (`collections.Counter` intersection); the maximum over the gold answers.
  Two extensions for Chinese text, as the CMRC 2018 evaluation script
  (Cui et al., "A Span-Extraction Dataset for Chinese Machine Reading
  Comprehension", EMNLP 2019) does: punctuation is every Unicode punctuation
  character (categories P*), not only ASCII; and each CJK character is a
  token of its own (character-level F1), while runs of other characters are
  split on whitespace as in SQuAD. (The CMRC script scores F1 by the
  longest common substring; this module keeps SQuAD's bag of tokens.)
* The answer is scored as it is read (`answer_text`): its citation markers
  (`[n]`, `[n, m]`, `【n】`, `［n］`: `rag_cli.generate.citations.MARKER`)
  and any support line (a line starting "support:" or "依据：", the
  sentence an answer is cut from) are removed first, so "10th century [1]"
  scores EM 1 against "10th century" (the SQuAD and CMRC scripts score the
  bare answer string); citations are scored from the `citations` column.
* A refused question answers "" (EM 0, F1 0); `em`/`f1` are over every
  question with gold answers, `em_answered`/`f1_answered` over those not
  refused.
* A chunk holds the answer when a normalised gold answer is a substring of
  its normalised text. has-answer: the share of answered questions whose
  cited chunks hold a gold answer. Citation precision (per question with a
  citation): cited chunks holding an answer / cited chunks. Citation recall
  (per question whose evidence has a chunk holding an answer): answer-holding
  evidence chunks that were cited / answer-holding evidence chunks. Both are
  macro means over the questions where they are defined (their counts given).
* Latency p50/p95: `numpy.percentile` with linear interpolation between
  order statistics (Hyndman & Fan 1996, definition 7), in milliseconds.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
#: A support line under an answer: "support:" / "Support -" / "依据：" at a line start.
_SUPPORT_LINE = re.compile(r"^\s*(?:support|依据|支持)\s*[:：\-–—]", re.I)


def _is_punct(ch: str) -> bool:
    return ch in string.punctuation or unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0xF900 <= cp <= 0xFAFF or 0x3040 <= cp <= 0x30FF or 0xAC00 <= cp <= 0xD7AF)


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 `normalize_answer` (lower case, punctuation and the articles
    a/an/the removed, whitespace collapsed), after Unicode NFKC (the loaders'
    normalisation of document text), punctuation extended to Unicode."""
    s = "".join(ch for ch in unicodedata.normalize("NFKC", s).lower() if not _is_punct(ch))
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def answer_text(answer: str) -> str:
    """The answer a reader reads, as scored: `answer` (str) without its
    citation markers (`rag_cli.generate.citations.MARKER`) and without any
    support line (from the first line that starts "support:" or "依据：" on),
    whitespace collapsed. "10th century [1]" -> "10th century"."""
    from rag_cli.generate.citations import MARKER

    lines = []
    for line in (answer or "").splitlines():
        if _SUPPORT_LINE.match(line):
            break
        lines.append(line)
    return " ".join(MARKER.sub(" ", "\n".join(lines)).split())


def answer_tokens(s: str) -> list[str]:
    """Tokens of a normalised answer: each CJK character alone, other runs split on whitespace."""
    out: list[str] = []
    for word in s.split():
        run = ""
        for ch in word:
            if _is_cjk(ch):
                if run:
                    out.append(run)
                    run = ""
                out.append(ch)
            else:
                run += ch
        if run:
            out.append(run)
    return out


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold answer, else 0.0."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD token F1 (character tokens for CJK), the maximum over `golds`; 0.0 when nothing is shared."""
    best = 0.0
    p_tokens = answer_tokens(normalize_answer(prediction))
    for g in golds:
        g_tokens = answer_tokens(normalize_answer(g))
        common = Counter(p_tokens) & Counter(g_tokens)
        same = sum(common.values())
        if same == 0:
            continue
        precision, recall = same / len(p_tokens), same / len(g_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def holds_answer(text: str, golds: Sequence[str]) -> bool:
    """Whether a normalised gold answer (non-empty) is a substring of the normalised `text`."""
    t = normalize_answer(text)
    return any((g := normalize_answer(gold)) and g in t for gold in golds)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def answer_metrics(rows: Sequence[Mapping], gold: Mapping[str, Sequence[str]],
                   texts: Mapping[str, str]) -> dict:
    """Score answer rows against gold answers.

    `rows`: dicts with query_id, answer (str), citations and contexts (lists
    of chunk ids), refused (bool) and optionally latency_ms (float, ms), as in
    answers/NAME.parquet. `gold`: {query_id: [answer, ...]}. `texts`:
    {chunk_id: chunk text} for the cited and evidence chunks (a chunk not
    there holds no answer). Only rows whose query has gold answers are scored.

    Returns {"metrics": {em, f1, em_answered, f1_answered, has_answer,
    citation_precision, citation_recall, refusal_rate, latency_p50_ms,
    latency_p95_ms} (None where no question defines it), "counts": {...},
    "per_query": {query_id: {...}}, "missing_answers": [gold query ids with no
    answer row], "no_gold": [answer query ids without gold]}.
    """
    per_query: dict[str, dict] = {}
    em, f1, em_a, f1_a, has, c_prec, c_rec, latencies = [], [], [], [], [], [], [], []
    refused_n = 0
    no_gold = []
    for row in rows:
        qid = str(row["query_id"])
        if qid not in gold:
            no_gold.append(qid)
            continue
        golds = gold[qid]
        refused = bool(row["refused"])
        answer = "" if refused else answer_text(row.get("answer") or "")
        cited = list(dict.fromkeys(row.get("citations") or []))
        evidence = list(dict.fromkeys(row.get("contexts") or []))
        q = {"refused": refused, "em": exact_match(answer, golds) if answer else 0.0,
             "f1": f1_score(answer, golds) if answer else 0.0}
        em.append(q["em"])
        f1.append(q["f1"])
        refused_n += refused
        if not refused:
            em_a.append(q["em"])
            f1_a.append(q["f1"])
            holding_cited = [c for c in cited if holds_answer(texts.get(c, ""), golds)]
            q["has_answer"] = float(bool(holding_cited))
            has.append(q["has_answer"])
            if cited:
                q["citation_precision"] = len(holding_cited) / len(cited)
                c_prec.append(q["citation_precision"])
            holding_evidence = [c for c in evidence if holds_answer(texts.get(c, ""), golds)]
            if holding_evidence:
                q["citation_recall"] = sum(c in cited for c in holding_evidence) / len(holding_evidence)
                c_rec.append(q["citation_recall"])
        latency = row.get("latency_ms")
        if latency is not None:
            q["latency_ms"] = float(latency)
            latencies.append(float(latency))
        per_query[qid] = q
    n = len(per_query)
    lat = np.asarray(latencies, dtype=np.float64)
    metrics = {
        "em": _mean(em), "f1": _mean(f1), "em_answered": _mean(em_a), "f1_answered": _mean(f1_a),
        "has_answer": _mean(has), "citation_precision": _mean(c_prec), "citation_recall": _mean(c_rec),
        "refusal_rate": refused_n / n if n else None,
        "latency_p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
        "latency_p95_ms": float(np.percentile(lat, 95)) if lat.size else None,
    }
    counts = {"n_questions": n, "n_refused": refused_n, "n_answered": n - refused_n,
              "n_with_citations": len(c_prec), "n_evidence_holds_answer": len(c_rec)}
    return {"metrics": metrics, "counts": counts, "per_query": per_query,
            "missing_answers": [q for q in gold if q not in per_query], "no_gold": no_gold}


def refusal_rates(answerable: Sequence[bool], unanswerable: Sequence[bool]) -> dict:
    """Refusal rates from the `refused` flags of answers to answerable
    questions and to made-unanswerable ones (their gold documents removed,
    `rag_cli.evaluate.unanswerable`): refusal_unanswerable = refused share of
    the made-unanswerable ones, false_answer_rate = 1 - that, and
    false_refusal_rate = refused share of the answerable ones (None where
    there are no questions), with the counts."""
    n_a, n_u = len(answerable), len(unanswerable)
    r_a, r_u = int(sum(map(bool, answerable))), int(sum(map(bool, unanswerable)))
    refusal = r_u / n_u if n_u else None
    return {"refusal_unanswerable": refusal, "false_answer_rate": None if refusal is None else 1.0 - refusal,
            "false_refusal_rate": r_a / n_a if n_a else None, "n_answerable": n_a, "n_refused_answerable": r_a,
            "n_unanswerable": n_u, "n_refused_unanswerable": r_u}
