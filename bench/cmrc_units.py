"""How much of a Chinese answer to quote, measured on CMRC 2018 trial (the sample of `bench/refusal.py`).

Asks every sampled question once in the full project of `bench/refusal.py` (same --work, built by
it), records the candidate sentences of the evidence the extractive generator is given, and scores
ways of quoting from the sentence it chooses, per half (split by passage, as bench/refusal.py does):
the clause of a date or number (`answer_span`) as before, the sentence always, the clause only from
a sentence longer than N characters (`spans.ZH_CLAUSE_CHARS`), and a second sentence within a margin
of the best. "contains": a gold answer is in the answer (normalised), of the answered questions;
F1 / EM: SQuAD's (character tokens), over all questions (a refusal scores 0).

    RAG_DATA=../shared/data nice python bench/refusal.py --sets cmrc --work /tmp/ref2/work --out ...
    RAG_DATA=../shared/data nice python bench/cmrc_units.py --work /tmp/ref2/work --out bench/results/cmrc-units.json
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from _common import commit, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def record(work: Path, seed: int = 13) -> list[dict]:
    import refusal as rb

    from rag_cli import Project
    from rag_cli.generate.citations import neutralise
    from rag_cli.generate.gate import min_score_for
    from rag_cli.index.searcher import prepare_query
    from rag_cli.loaders.normalize import has_cjk
    from rag_cli.stages.ask import evidence_for

    sample = rb.cmrc_sample(200, seed, work / "cmrc-units-sample")
    halves = rb.split(sample["questions"], seed)
    p = Project.open(work / "cmrc" / "full" / "p")
    acfg, scfg, s, _, gen = p._ask_setup({"generator": "extractive"}, None, None)
    rows = []
    for qid, text, _, gold in sample["questions"]:
        q = prepare_query(text)
        ev, _ = evidence_for(s, q, k=acfg.k, mode=scfg.mode, candidates=scfg.candidates, rrf_k=scfg.rrf_k,
                             fusion=scfg.fusion, dense_weight=scfg.dense_weight)
        given = [replace(e, text=neutralise(e.context or e.text), context=None) for e in ev
                 if e.score >= min_score_for(has_cjk(q), acfg)]
        row = {"id": qid, "question": text, "gold": gold, "half": halves[qid], "refused": not given}
        if given:
            r = gen.rank(q, given)
            row.update(sentences=r.sentences, scores=r.scores.tolist(), chosen=int(r.order[0]))
        rows.append(row)
    return rows


def measure(rows: list[dict], answer_of) -> dict:
    from rag_cli.evaluate.answers import exact_match, f1_score
    from rag_cli.loaders.normalize import normalize_text

    answered = [r for r in rows if not r["refused"]]
    texts = [answer_of(r) for r in answered]
    contains = sum(any(normalize_text(g) in normalize_text(t) for g in r["gold"]) for r, t in zip(answered, texts))
    n = max(1, len(rows))
    return {"n": len(rows), "answered": len(answered), "contains_gold_answered": round(contains / max(1, len(answered)), 4),
            "f1": round(sum(f1_score(t, r["gold"]) for r, t in zip(answered, texts)) / n, 4),
            "em": round(sum(exact_match(t, r["gold"]) for r, t in zip(answered, texts)) / n, 4),
            "median_chars": statistics.median(len(t) for t in texts) if texts else None}


def main() -> None:
    from rag_cli.generate.spans import answer_span, answer_unit
    from rag_cli.index.sparse import analyze

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True, help="bench/refusal.py's --work (the CMRC projects)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    cached = args.work / "cmrc-units.pkl"
    rows = pickle.loads(cached.read_bytes()) if cached.exists() else record(args.work)
    cached.write_bytes(pickle.dumps(rows))

    def sent(r):
        return r["sentences"][r["chosen"]]

    def second(r, margin):
        order = np.argsort(-np.array(r["scores"]), kind="stable")
        sc = np.array(r["scores"])
        return "".join(r["sentences"][i] for i in order[:2] if sc[i] >= sc[order[0]] - margin)

    ways = {"clause of a date / number (before)": lambda r: answer_span(r["question"], sent(r), analyze) or sent(r),
            "sentence": sent,
            "answer_unit (after)": lambda r: answer_unit(r["question"], sent(r), analyze)}
    for n in (20, 30, 40, 50, 60):
        ways[f"clause only from a sentence > {n} chars"] = (
            lambda r, n=n: (answer_span(r["question"], sent(r), analyze) if len(sent(r)) > n else None) or sent(r))
    for m in (0.005, 0.01, 0.02):
        ways[f"second sentence within {m}"] = lambda r, m=m: second(r, m)
    result = {"command": "python bench/cmrc_units.py " + " ".join(sys.argv[1:]), "results": {}}
    for half in ("tune", "test", "all"):
        part = [r for r in rows if half == "all" or r["half"] == half]
        result["results"][half] = {name: measure(part, f) for name, f in ways.items()}
        for name, v in result["results"][half].items():
            print(f"{half:5s} {name:40s} {v}")
    result["machine"], result["commit"] = machine(), commit()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
