"""A made-unanswerable benchmark for `rag ask`'s refusal gate.

From the shared data, for CMRC 2018 trial and for SciFact:

* sample `--questions` questions (CMRC: whole passages at a time, so every
  question of a removed passage is made unanswerable; SciFact: test claims
  with their cited abstracts, in a subset of `--scifact-docs` documents);
* build two corpora: the full one and a copy without the sampled questions'
  gold documents; index both with the default pipeline (`Project.create`,
  chunk, embed, index; the default model);
* ask every sampled question in both with the configured generator
  (default: extractive) and report, on the tune and test halves (split by
  gold document, seeded) and on all:
  refusals on made-unanswerable questions, false refusals on answerable
  ones, gold document in the cited evidence, answer contains a gold answer
  (CMRC), citation validity (markers removed), latency p50/p95 (ms).

    nice python bench/refusal.py --out bench/results/refusal-gate.json
    nice python bench/refusal.py --work /tmp/refusal --gate off --out bench/results/refusal-before.json

`--generator llama-cpp` asks through the local GGUF (default Gemma 3 270M,
the llm extra) instead of the extractive generator.

`--limit N` asks only the first N sampled questions in the same corpora
(the made-unanswerable corpus still lacks every sampled question's passage).

`--work` keeps the projects between runs (they are rebuilt only when
missing); `--gate off` asks with the gate's entity rule switched off
(`ask.min_entity_coverage = 0`), the gate of before.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from _common import commit, machine
from rag_cli import Project
from rag_cli.evaluate.datasets import read_qrels
from rag_cli.loaders.normalize import normalize_text

DATA = Path(os.environ.get("RAG_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(path: Path, docs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path


def cmrc_sample(n_questions: int, seed: int) -> dict:
    """Whole passages, shuffled, until `n_questions` questions; the corpus is all 256 passages."""
    src = DATA / "cmrc2018-trial"
    docs = _jsonl(src / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in _jsonl(src / "queries.jsonl")}
    answers = {a["_id"]: a["answers"] for a in _jsonl(src / "answers.jsonl")}
    qrels = read_qrels(src / "qrels" / "test.tsv")
    by_doc = defaultdict(list)
    for qid, rel in qrels.items():
        by_doc[next(iter(rel))].append(qid)
    order = sorted(by_doc)
    random.Random(seed).shuffle(order)
    picked, qids = [], []
    for d in order:
        if len(qids) >= n_questions:
            break
        picked.append(d)
        qids.extend(sorted(by_doc[d]))
    return {"docs": docs, "questions": [(q, queries[q], set(qrels[q]), answers.get(q)) for q in qids],
            "removed": set(picked)}


def scifact_sample(n_questions: int, n_docs: int, seed: int) -> dict:
    """Test claims with their cited abstracts; the corpus is those abstracts, the
    abstracts of the other test claims, then the first others, up to `n_docs`."""
    src = DATA / "scifact"
    queries = {q["_id"]: q["text"] for q in _jsonl(src / "queries.jsonl")}
    qrels = read_qrels(src / "qrels" / "test.tsv")
    qids = sorted(qrels)
    random.Random(seed).shuffle(qids)
    qids = qids[:n_questions]
    gold = {d for q in qids for d in qrels[q]}
    keep = []
    for doc in _jsonl(src / "corpus.jsonl.gz"):
        if doc["_id"] in gold or len(keep) < n_docs - len(gold):
            keep.append(doc)
    return {"docs": keep, "questions": [(q, queries[q], set(qrels[q]), None) for q in qids], "removed": gold}


def build(root: Path, docs: list[dict]) -> Project:
    if (root / "p" / "rag.toml").exists() and (root / "p" / "index").exists():
        return Project.open(root / "p")
    corpus = _write(root / "corpus.jsonl", docs)
    p = Project.create(root / "p")
    p.chunk([corpus], format="beir")
    p.embed()
    p.index()
    return p


def ask_all(p: Project, questions, options: dict, generator: str = "extractive") -> list[dict]:
    from rag_cli.stages.ask import ask

    acfg, scfg, s, mask, gen = p._ask_setup(None, None, None, None, None, None, None, generator)
    from dataclasses import replace

    acfg = replace(acfg, **options)
    out = []
    for qid, text, gold_docs, gold_answers in questions:
        res = ask(s, gen, text, acfg, scfg, mask)
        cited_docs = {c.split("#")[0] for c in res.answer.citations}
        given_text = normalize_text(" ".join(e.text for e in res.given))
        cited_text = normalize_text(" ".join(e.text for e in res.given if e.chunk_id in res.answer.citations))
        gold_in_evidence = gold_in_cited = None
        if gold_answers:
            gold_in_evidence = any(normalize_text(a) in given_text for a in gold_answers)
            gold_in_cited = any(normalize_text(a) in cited_text for a in gold_answers)
        out.append({"id": qid, "question": text, "refused": res.refused, "reason": res.reason,
                    "answer": res.answer.text, "best_score": round(res.best_score, 4),
                    "coverage": round(res.coverage, 4), "entity_coverage": round(res.entity_coverage, 4),
                    "gold_doc_cited": bool(cited_docs & gold_docs),
                    "gold_answer_in_evidence": gold_in_evidence, "gold_answer_in_cited": gold_in_cited,
                    "answer_contains_gold": (any(normalize_text(a) in normalize_text(res.answer.text)
                                                 for a in gold_answers) if gold_answers else None),
                    "n_citations_removed": res.answer.n_citations_removed,
                    "n_citations": len(res.answer.citations),
                    "latency_ms": round(res.latency_ms, 1)})
    return out


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def summarise(answerable: list[dict], unanswerable: list[dict]) -> dict:
    answered = [r for r in answerable if not r["refused"]]
    lat = [r["latency_ms"] for r in answerable + unanswerable]
    out = {"n_questions": len(answerable),
           "refused_unanswerable": round(sum(r["refused"] for r in unanswerable) / max(1, len(unanswerable)), 4),
           "false_refusals_answerable": round(sum(r["refused"] for r in answerable) / max(1, len(answerable)), 4),
           "gold_doc_cited_answered": round(sum(r["gold_doc_cited"] for r in answered) / max(1, len(answered)), 4),
           "citations_removed": sum(r["n_citations_removed"] for r in answerable + unanswerable),
           "answered_with_citation": round(sum(r["n_citations"] > 0 for r in answered) / max(1, len(answered)), 4),
           "latency_ms_p50": _pct(lat, 0.5), "latency_ms_p95": _pct(lat, 0.95)}
    if answered and answered[0]["answer_contains_gold"] is not None:
        out["gold_answer_in_evidence_answered"] = round(
            sum(bool(r["gold_answer_in_evidence"]) for r in answered) / len(answered), 4)
        out["gold_answer_in_cited_answered"] = round(
            sum(bool(r["gold_answer_in_cited"]) for r in answered) / len(answered), 4)
        out["answer_contains_gold_answered"] = round(
            sum(bool(r["answer_contains_gold"]) for r in answered) / len(answered), 4)
    return out


def split(questions, seed: int) -> dict[str, str]:
    """qid -> 'tune' | 'test', by the first gold document (questions of one passage stay together)."""
    docs = sorted({min(g) for _, _, g, _ in questions})
    random.Random(seed + 1).shuffle(docs)
    tune = set(docs[: len(docs) // 2])
    return {q: ("tune" if min(g) in tune else "test") for q, _, g, _ in questions}


def run_set(name: str, sample: dict, work: Path, options: dict, seed: int, generator: str = "extractive",
            limit: int | None = None) -> dict:
    full = build(work / name / "full", sample["docs"])
    cut = build(work / name / "cut", [d for d in sample["docs"] if d["_id"] not in sample["removed"]])
    qs = sample["questions"][:limit]
    answerable = ask_all(full, qs, options, generator)
    unanswerable = ask_all(cut, qs, options, generator)
    halves = split(qs, seed)
    report = {"n_docs": len(sample["docs"]), "n_removed": len(sample["removed"])}
    for half in ("tune", "test"):
        ids = {q for q, h in halves.items() if h == half}
        report[half] = summarise([r for r in answerable if r["id"] in ids], [r for r in unanswerable if r["id"] in ids])
    report["all"] = summarise(answerable, unanswerable)
    report["questions"] = [{"half": halves[a["id"]], "answerable": a, "unanswerable": u}
                           for a, u in zip(answerable, unanswerable)]
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--scifact-questions", type=int, default=100)
    ap.add_argument("--scifact-docs", type=int, default=400)
    ap.add_argument("--sets", default="cmrc,scifact")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--gate", choices=("on", "off"), default="on")
    ap.add_argument("--generator", default="extractive", help="extractive | llama-cpp (in-process GGUF) | openai")
    ap.add_argument("--limit", type=int, help="ask only the first N sampled questions (same corpora)")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    options = {} if args.gate == "on" else {"min_entity_coverage": 0.0}
    result = {"command": "python bench/refusal.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k not in ("work", "out")),
        "generator": args.generator, "ask_options": options, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for name in args.sets.split(","):
            sample = (cmrc_sample(args.questions, args.seed) if name == "cmrc"
                      else scifact_sample(args.scifact_questions, args.scifact_docs, args.seed))
            result["sets"][name] = run_set(name, sample, work, options, args.seed, args.generator, args.limit)
            print(name, json.dumps({h: result["sets"][name][h] for h in ("tune", "test", "all")}, indent=1))
    result["machine"] = machine()
    result["commit"] = commit()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
