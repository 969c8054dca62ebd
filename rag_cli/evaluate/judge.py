"""LLM-judged answer metrics: faithfulness and answer relevancy as RAGAS
defines them (Es, James, Espinosa-Anke, Schockaert, "RAGAS: Automated
Evaluation of Retrieval Augmented Generation", EACL 2024 demos,
arXiv:2309.15217), following the ragas project's implementation
(`ragas.metrics.collections.faithfulness` and `.answer_relevancy`).

* Faithfulness of an answer a to its context c: the judge breaks a into
  statements S (one prompt, few-shot, "no pronouns"); then, given c and the
  numbered statements (one prompt), it gives each a verdict 1 (it can be
  directly inferred from c) or 0. F = |supported| / |S|, in [0, 1]. The
  context is every chunk given to the generator (the answer row's
  `contexts`, not only the cited ones, as RAGAS judges against the retrieved
  contexts), in rank order, each the text the generator read (a small-to-big
  chunk's `context`, else its `text`), joined by newlines and cut to
  `context_tokens` (`prompt.estimate_tokens`) by dropping the lowest-ranked
  chunks first, as the LLM generators' prompts do (less the answer's
  estimated tokens, as its statements share the verdict prompt).
* Answer relevancy: the judge writes `n_questions` (RAGAS "strictness", 3)
  questions the answer answers, one prompt each, each with a noncommittal
  flag (1: evasive, vague, "I don't know"). AR = mean_i cos(E(q), E(q_i)),
  cos(x, y) = x.y / (|x| |y|), with E the project's bi-encoder (query
  encoding for the question and the generated questions alike). AR = 0 when
  every parsed generation is flagged noncommittal (ragas >= 0.3
  `np.all`; ragas 0.1-0.2 zeroed it when any was). Cosines can be negative.
* The answer is judged without its citation markers ("[1]").
* Refused answers are not judged (counted). A judge output that cannot be
  parsed (no statements, verdicts not one per statement, no question) is
  counted per kind and repeat, and that question's metric is left out of
  that repeat's mean (None in `per_query`); it never raises.
* Parsing takes JSON (a list, or an object with "statements" / "verdicts"
  / "question" and "noncommittal") or numbered / bulleted lines, so chat
  and base models both work; the prompts are completion prompts with
  few-shot examples ending in an open slot (ragas' own examples).
* Repeats: the caller passes one `complete` per repeat (e.g. sampling at a
  temperature > 0 with seed r); each repeat's metric is the mean over the
  questions it could score, and the report gives the mean and the sample
  standard deviation (ddof 1; 0.0 for one repeat) over the repeats.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

Complete = Callable[[str, int], str]
Encode = Callable[[list[str]], np.ndarray]

STATEMENTS_PROMPT = """Given a question and an answer, break each sentence of the answer down into one or more fully understandable statements, one per numbered line. Use no pronouns in any statement.

Question: Who was Albert Einstein and what is he best known for?
Answer: He was a German-born theoretical physicist, widely acknowledged to be one of the greatest physicists of all time. He was best known for developing the theory of relativity.
Statements:
1. Albert Einstein was a German-born theoretical physicist.
2. Albert Einstein is recognized as one of the greatest physicists of all time.
3. Albert Einstein was best known for developing the theory of relativity.

Question: {question}
Answer: {answer}
Statements:
"""

VERDICTS_PROMPT = """Judge the faithfulness of statements to a context. For each numbered statement give verdict 1 if it can be directly inferred from the context, 0 if it cannot.

Context: John is a student at XYZ University. He is pursuing a degree in Computer Science. He is enrolled in Data Structures, Algorithms and Database Management this semester. John is a diligent student and spends a lot of time studying.
Statements:
1. John is majoring in Biology.
2. John is taking a course on Artificial Intelligence.
3. John is a dedicated student.
Verdicts:
1. 0
2. 0
3. 1

Context: {context}
Statements:
{statements}
Verdicts:
"""

QUESTION_PROMPT = """Write a question that the answer answers, and whether the answer is noncommittal: 1 if it is evasive, vague or ambiguous ("I don't know", "I'm not sure", "It depends"), 0 if it is substantive.

Answer: Albert Einstein was born in Germany.
Question: Where was Albert Einstein born?
Noncommittal: 0

Answer: I don't know about the groundbreaking feature of the smartphone invented in 2023 as I am unaware of information beyond 2022.
Question: What was the groundbreaking feature of the smartphone invented in 2023?
Noncommittal: 1

Answer: {answer}
Question:"""

_ITEM = re.compile(r"^\s*(?:\(?(\d{1,3})[.):]|[-*\u2022])\s*(.*\S)\s*$")
_LABEL = re.compile(r"^\s*(question|answer|context|statements|verdicts|noncommittal)\s*:", re.I)
_VERDICT = re.compile(r"\b(1|0|yes|no|true|false|supported|unsupported)\b", re.I)
_TRUE = {"1", "yes", "true", "supported"}
_MARKERS = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


def strip_citations(answer: str) -> str:
    """The answer without its citation markers "[1]", "[1, 2]" (they are not statements)."""
    return _MARKERS.sub("", answer).strip()


def _json(text: str):
    """The JSON value `text` starts with (after an optional ```json fence), or None."""
    body = re.sub(r"^\s*```(?:json)?\s*", "", text)
    if not body.startswith(("[", "{")):
        return None
    try:
        return json.JSONDecoder().raw_decode(body)[0]
    except ValueError:
        return None


def _items(text: str) -> list[tuple[int | None, str]]:
    """(number or None for a bullet, rest) of the leading run of numbered or
    bulleted lines; stops at a blank line or a label line after the first item."""
    out: list[tuple[int | None, str]] = []
    for line in text.splitlines():
        if out and (not line.strip() or _LABEL.match(line)):
            break
        m = _ITEM.match(line)
        if m:
            out.append((int(m.group(1)) if m.group(1) else None, m.group(2)))
        elif out:
            break
    return out


def parse_statements(text: str) -> list[str] | None:
    """Statements from a judge reply: a JSON list of strings, {"statements":
    [...]}, or numbered / bulleted lines. None when none are found."""
    data = _json(text)
    if isinstance(data, dict):
        data = data.get("statements")
    if isinstance(data, list) and data and all(isinstance(s, str) for s in data):
        out = [s.strip() for s in data if s.strip()]
        return out or None
    out = [s for _, s in _items(text) if s]
    return out or None


def _verdict(value) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str):
        m = _VERDICT.search(value)
        return int(m.group(1).lower() in _TRUE) if m else None
    if isinstance(value, dict):
        return _verdict(value.get("verdict"))
    return None


def parse_verdicts(text: str, n: int) -> list[int] | None:
    """One 0/1 verdict per statement (n of them) from a judge reply: JSON
    (a list of 0/1 or of {"verdict": 0/1}, or {"statements"|"verdicts":
    [...]}) or numbered lines "k. 1" (yes/no/true/false also read). None
    unless exactly statements 1..n each get one verdict."""
    data = _json(text)
    if isinstance(data, dict):
        data = data.get("verdicts", data.get("statements"))
    if isinstance(data, list) and len(data) == n:
        out = [_verdict(v) for v in data]
        if all(v is not None for v in out):
            return out  # type: ignore[return-value]
    found: dict[int, int] = {}
    for i, (num, rest) in enumerate(_items(text)):
        v = _verdict(rest.rsplit(":", 1)[-1]) if ":" in rest else _verdict(rest)
        k = num if num is not None else i + 1
        if v is not None and 1 <= k <= n and k not in found:
            found[k] = v
    return [found[k] for k in range(1, n + 1)] if len(found) == n else None


def parse_question(text: str) -> tuple[str, int] | None:
    """(question, noncommittal 0/1) from a judge reply: JSON {"question",
    "noncommittal"} or the question on the first line and an optional
    "Noncommittal: 0|1" line (missing: 0). None when there is no question."""
    data = _json(text)
    if isinstance(data, dict) and isinstance(data.get("question"), str) and data["question"].strip():
        return data["question"].strip(), _verdict(data.get("noncommittal")) or 0
    lines = [ln.strip() for ln in text.splitlines()]
    question, noncommittal = "", 0
    for ln in lines:
        low = ln.lower()
        if low.startswith("noncommittal"):
            noncommittal = _verdict(ln.split(":", 1)[-1]) or 0
            break
        if not ln:
            if question:
                break
            continue
        if low.startswith("answer:"):
            break
        if not question:
            question = re.sub(r"^question\s*:\s*", "", ln, flags=re.I).strip()
    return (question, noncommittal) if question else None


def fit_context(texts: Sequence[str], context_tokens: int) -> str:
    """The rank-ordered `texts` joined by newlines, the lowest-ranked dropped
    so that the rest fit `context_tokens` (`estimate_tokens`); the first is
    always kept, cut to the budget when it alone is too long."""
    from rag_cli.generate.prompt import estimate_tokens

    kept, used = [], 0
    for t in texts:
        cost = estimate_tokens(t) + 1
        if kept and used + cost > context_tokens:
            break
        kept.append(t)
        used += cost
    if kept and used > context_tokens:
        kept[0] = kept[0][:max(1, int(len(kept[0]) * context_tokens / used))]
    return "\n".join(kept)


def faithfulness(complete: Complete, question: str, answer: str, context: str) -> dict:
    """RAGAS faithfulness of one answer. Returns {"score": float in [0, 1] or
    None, "statements": [str], "verdicts": [0/1] or None, "error": None |
    "statements" | "verdicts" (what could not be parsed)}."""
    from rag_cli.generate.prompt import estimate_tokens

    budget = min(512, 2 * estimate_tokens(answer) + 48)  # the statements restate the answer
    statements = parse_statements(complete(STATEMENTS_PROMPT.format(question=question, answer=answer), budget))
    if not statements:
        return {"score": None, "statements": [], "verdicts": None, "error": "statements"}
    numbered = "\n".join(f"{i}. {s}" for i, s in enumerate(statements, 1))
    reply = complete(VERDICTS_PROMPT.format(context=context, statements=numbered), 6 * len(statements) + 16)
    verdicts = parse_verdicts(reply, len(statements))
    if verdicts is None:
        return {"score": None, "statements": statements, "verdicts": None, "error": "verdicts"}
    return {"score": sum(verdicts) / len(statements), "statements": statements, "verdicts": verdicts, "error": None}


def cosines(question_vec: np.ndarray, generated: np.ndarray) -> np.ndarray:
    """cos(q, g_i) = q.g_i / (|q| |g_i|) for (d,) `question_vec` and (n, d)
    `generated`; (n,) float64 (0 where a norm is 0)."""
    q = np.asarray(question_vec, dtype=np.float64).reshape(-1)
    g = np.asarray(generated, dtype=np.float64).reshape(-1, q.size)
    norm = np.linalg.norm(g, axis=1) * np.linalg.norm(q)
    return np.divide(g @ q, norm, out=np.zeros(len(g)), where=norm > 0)


def answer_relevancy(complete: Complete, encode: Encode, question: str, answer: str, n_questions: int = 3) -> dict:
    """RAGAS answer relevancy of one answer. Returns {"score": float in
    [-1, 1] or None, "questions": [str], "noncommittal": [0/1],
    "n_unparsed": generations without a question, "error": None |
    "questions" (none parsed)}."""
    parsed = [parse_question(complete(QUESTION_PROMPT.format(answer=answer), 64)) for _ in range(n_questions)]
    good = [p for p in parsed if p is not None]
    out = {"questions": [q for q, _ in good], "noncommittal": [n for _, n in good],
           "n_unparsed": len(parsed) - len(good)}
    if not good:
        return {**out, "score": None, "error": "questions"}
    vecs = np.asarray(encode([question, *out["questions"]]), dtype=np.float32)
    score = float(cosines(vecs[0], vecs[1:]).mean()) * (not all(out["noncommittal"]))
    return {**out, "score": score, "error": None}


def _summary(values: list[float]) -> dict:
    """{"mean", "sd" (ddof 1; 0.0 for one value), "repeats"} of per-repeat
    means (None entries: a repeat with nothing scored, left out)."""
    got = [v for v in values if v is not None]
    return {"mean": float(np.mean(got)) if got else None,
            "sd": (float(np.std(got, ddof=1)) if len(got) > 1 else 0.0) if got else None,
            "repeats": values}


def judge_answers(rows: Sequence[Mapping], texts: Mapping[str, str], completes: Sequence[Complete],
                  encode: Encode, *, n_questions: int = 3, context_tokens: int = 2048,
                  progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Faithfulness and answer relevancy of answer rows, once per `completes`
    entry (one per repeat).

    `rows`: dicts with query_id, question, answer, contexts (chunk ids, rank
    order), refused, as in answers/NAME.parquet. `texts`: {chunk_id: the
    text the generator read}. `encode(texts) -> (n, d) float32` query
    vectors. `progress(task, done, total)` after each question.

    Returns {"metrics": {"faithfulness": {mean, sd, repeats}, "answer_relevancy":
    {...}}, "counts": {n_questions, n_refused, n_judged, n_repeats,
    unparsed: {statements, verdicts, questions: [per repeat]},
    question_generations_unparsed: [per repeat], noncommittal: [per repeat],
    missing_contexts: chunks not in `texts`}, "per_query": {query_id:
    {faithfulness: [per repeat], answer_relevancy: [...], statements,
    verdicts, questions (of the first repeat)}}}.
    """
    from rag_cli.generate.prompt import estimate_tokens

    judged = [r for r in rows if not bool(r["refused"]) and (r.get("answer") or "").strip()]
    n_refused = len(rows) - len(judged)
    per_query: dict[str, dict] = {str(r["query_id"]): {"faithfulness": [], "answer_relevancy": []} for r in judged}
    missing = sorted({c for r in judged for c in (r.get("contexts") or []) if c not in texts})
    unparsed = {"statements": [], "verdicts": [], "questions": []}
    gens_unparsed, noncommittal, faith_means, rel_means = [], [], [], []
    for rep, complete in enumerate(completes):
        bad = {"statements": 0, "verdicts": 0, "questions": 0}
        f_scores, r_scores, g_bad, nc = [], [], 0, 0
        for i, row in enumerate(judged):
            qid, question = str(row["query_id"]), str(row.get("question") or "")
            answer = strip_citations(str(row["answer"]))
            budget = max(64, context_tokens - estimate_tokens(answer))  # the statements share the prompt
            context = fit_context([texts[c] for c in dict.fromkeys(row.get("contexts") or []) if c in texts],
                                  budget)
            f = faithfulness(complete, question, answer, context)
            r = answer_relevancy(complete, encode, question, answer, n_questions)
            for res in (f, r):
                if res["error"]:
                    bad[res["error"]] += 1
            g_bad += r["n_unparsed"]
            nc += bool(r["noncommittal"]) and all(r["noncommittal"])
            q = per_query[qid]
            q["faithfulness"].append(f["score"])
            q["answer_relevancy"].append(r["score"])
            if rep == 0:
                q.update(statements=f["statements"], verdicts=f["verdicts"], questions=r["questions"])
            if f["score"] is not None:
                f_scores.append(f["score"])
            if r["score"] is not None:
                r_scores.append(r["score"])
            if progress is not None:
                progress(f"judge {rep + 1}/{len(completes)}", i + 1, len(judged))
        for k, v in bad.items():
            unparsed[k].append(v)
        gens_unparsed.append(g_bad)
        noncommittal.append(nc)
        faith_means.append(float(np.mean(f_scores)) if f_scores else None)
        rel_means.append(float(np.mean(r_scores)) if r_scores else None)
    return {"metrics": {"faithfulness": _summary(faith_means), "answer_relevancy": _summary(rel_means)},
            "counts": {"n_questions": len(rows), "n_refused": n_refused, "n_judged": len(judged),
                       "n_repeats": len(completes), "unparsed": unparsed,
                       "question_generations_unparsed": gens_unparsed, "noncommittal": noncommittal,
                       "missing_contexts": missing},
            "per_query": per_query}
