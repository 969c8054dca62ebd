"""Which unit to answer with (phrase, clause, sentence), measured on SQuAD 2.0's tune split.

The extractive generator chooses a sentence of the evidence, then the span
answerer may quote a part of it (`rag_cli.generate.spans.answer_span`). This
script asks every answerable question of a split once, through `rag ask`'s
stage with the evidence cached by `bench/squad_answers.py` (same --work), and
records, per question, the candidate sentences (their cosine with the
question, their share of its terms, ...) of the evidence the generator is
given. Then it scores ways of answering without asking again:

* sentence choice: the top sentence by the generator's score ("sentence");
* the unit: for the chosen sentence, the answer of the span answerer of
  before (`answer_span`, else the sentence) and of each `spans.answer_unit`
  mode, and of "auto" with other `min_margin` and `weak` units: holds gold
  (of the answered), SQuAD F1 (over all, a refusal scoring 0), median words.

    nice python bench/answer_units.py --work /tmp/squad-answers --split tune --out bench/results/answer-units-tune.json

Design on tune only; `bench/squad_answers.py` reports the chosen default once on test.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from _common import commit, machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def record(work: Path, split: str, limit: int | None, group: str = "answerable") -> list[dict]:
    """Per answerable question of `split`: {id, question, gold, sentences, cos, shares, subject, typed, number,
    doc_id, chosen (the generator's), support (its sentence), answer (the generator's answer)}."""
    import squad_answers as sa

    import rag_cli.stages.ask as stage
    from rag_cli.generate.citations import neutralise
    from rag_cli.generate.gate import min_score_for
    from rag_cli.index.searcher import prepare_query
    from rag_cli.loaders.normalize import has_cjk

    p, acfg, scfg, s, gen, cache, vec_path, reranker = sa.setup(work)
    out = []
    qs = [q for q in sa.questions() if q["split"] == split and bool(q["gold"]) == (group != "unanswerable")][:limit]
    doc_ids = np.array(s.chunks.column("doc_id").to_pylist())
    t0 = time.time()
    for q in qs:
        question = q["text"]
        prepared = prepare_query(question)
        cache.key = q["paragraph"] if group == "removed" else ""
        mask = doc_ids != q["paragraph"] if group == "removed" else None
        ev, best = stage.evidence_for(s, prepared, k=acfg.k, mode=scfg.mode, mask=mask, candidates=scfg.candidates,
                                      rrf_k=scfg.rrf_k, fusion=scfg.fusion, dense_weight=scfg.dense_weight)
        floor = min_score_for(has_cjk(prepared), acfg)  # the gate's threshold for this question's language
        given = [replace(e, text=neutralise(e.context or e.text), context=None) for e in ev if e.score >= floor]
        row = {"id": q["id"], "question": question, "gold": q["gold"] or [], "best": best, "refused": not given,
               "group": group}
        from rag_cli.generate.extractive import content_terms

        terms = content_terms(prepared, gen.analyze)
        row["term_idf"] = gen.idf(terms) if terms else {}
        if given:
            ranked = gen.rank(prepared, given)
            answer = gen.generate(prepared, given)
            windows_cos = ranked.scores - gen.lexical_weight * ranked.shares  # what the rest adds is re-derived below
            row.update(sentences=ranked.sentences, scores=ranked.scores.tolist(), shares=ranked.shares.tolist(),
                       numbers=[e.number for e in ranked.evidence], ev_scores=[e.score for e in ranked.evidence],
                       doc_ids=[e.doc_id for e in ranked.evidence], chosen=int(ranked.order[0]),
                       answer=answer.text, support=answer.support, rest=windows_cos.tolist())
        out.append(row)
    print(f"recorded {len(out)} questions in {time.time() - t0:.0f}s", file=sys.stderr)
    return out, p


def measure(rows: list[dict], answer_of) -> dict:
    """holds gold / F1 / median words of answer_of(row) (str, or None: refused) over the rows."""
    from rag_cli.evaluate.answers import f1_score, holds_answer

    answered, holds, f1, words = 0, 0, [], []
    for r in rows:
        a = None if r["refused"] else answer_of(r)
        if a is None:
            f1.append(0.0)
            continue
        answered += 1
        holds += holds_answer(a, r["gold"])
        f1.append(f1_score(a, r["gold"]))
        words.append(len(a.split()))
    return {"n": len(rows), "answered": answered, "holds_gold_answered": round(holds / max(1, answered), 4),
            "f1": round(float(np.mean(f1)), 4), "median_words": statistics.median(words) if words else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--split", default="tune")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--group", default="answerable", help="answerable | unanswerable | removed (the paragraph masked)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--reuse", action="store_true", help="the questions recorded by the last run (WORK/units-SPLIT.pkl)")
    args = ap.parse_args()
    from rag_cli.generate.spans import answer_span, answer_unit
    from rag_cli.index.sparse import analyze

    t0 = time.time()
    cached = args.work / f"units-{args.split}{'' if args.group == 'answerable' else '-' + args.group}.pkl"
    if args.reuse and cached.exists():
        rows = pickle.loads(cached.read_bytes())[:args.limit]
    else:
        rows, _ = record(args.work, args.split, args.limit, args.group)
        cached.write_bytes(pickle.dumps(rows))

    if args.group != "answerable":  # recorded for the refusal signals (bench/refusal_signals.py)
        return

    def sentence(r):
        return r["sentences"][r["chosen"]]

    results = {"sentence": measure(rows, sentence),
               "phrase or sentence (before: answer_span)": measure(
                   rows, lambda r: answer_span(r["question"], sentence(r), analyze) or sentence(r))}
    for mode in ("phrase", "clause", "window", "auto"):
        results[f"answer_unit {mode}"] = measure(rows, lambda r, m=mode: answer_unit(r["question"], sentence(r),
                                                                                     analyze, mode=m))
    for weak in ("clause", "window"):
        for margin in (0.0, 0.15, 0.4, 0.8, 1e9):
            results[f"answer_unit auto weak={weak} min_margin={margin:g}"] = measure(
                rows, lambda r, w=weak, m=margin: answer_unit(r["question"], sentence(r), analyze, weak=w,
                                                              min_margin=m))
    result = {"command": "python bench/answer_units.py " + " ".join(sys.argv[1:]), "split": args.split,
              "results": results, "seconds": round(time.time() - t0, 1), "machine": machine(), "commit": commit()}
    for k, v in results.items():
        print(f"{k:32s} {v}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
