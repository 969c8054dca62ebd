"""What separates answerable from unanswerable questions in English (SQuAD 2.0, four dev articles)?

Reads the candidates recorded by `bench/answer_units.py --group answerable|unanswerable|removed`
(WORK/units-SPLIT[-GROUP].pkl: the sentences of the evidence the generator is given, scored) and
computes, per question the gate lets through, signals of the sentence the extractive generator
would quote; reports each one's ROC AUC of answerable against real unanswerable and against
passage-removed questions, per split, and a logistic regression of all of them fitted on tune
(`rag_cli.evaluate.gate_tuning._logistic`) scored on test. With `--rows` (bench/squad_answers.py's
WORK/rows.json) and `--scifact` (a bench/refusal.py report), it also simulates an English
`min_score` with the gate's cosine and coverage rules on the recorded signals.

    for s in tune test; do for g in answerable unanswerable removed; do
      nice python bench/answer_units.py --work /tmp/sa2 --split $s --group $g; done; done
    python bench/refusal_signals.py --work /tmp/sa2 --rows /tmp/sa2/rows-baseline.json \
        --scifact bench/results/answers-units-before-scifact.json --out bench/results/refusal-signals.json
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import sys
from pathlib import Path

import numpy as np

from _common import commit, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def auc(pos, neg) -> float:
    """P(a random positive scores above a random negative), ties counting half."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def signals(r: dict) -> dict:
    """Signals of the sentence that would be quoted (the best candidate) for one recorded question."""
    import rag_cli.generate.spans as sp
    from rag_cli.index.sparse import analyze
    from rag_cli.loaders.normalize import normalize_text

    q = r["question"]
    scores = np.array(r["scores"])
    order = np.argsort(-scores, kind="stable")
    s = r["sentences"][order[0]]
    low = normalize_text(s).lower()
    held = set(analyze(low))
    idf = r["term_idf"]
    out = {"sentence_score": float(scores[order[0]]),
           "margin_over_second": float(scores[order[0]] - scores[order[1]]) if len(order) > 1 else 0.3}
    if idf:
        rare = max(idf, key=idf.get)
        total = sum(idf.values())
        out["rarest_term_held"] = float(rare in held or rare in low)
        out["term_share"] = sum(v for t, v in idf.items() if t in held) / total
    else:
        out["rarest_term_held"], out["term_share"] = 1.0, 1.0
    names = [w for i, w in enumerate(re.findall(r"[\w'-]+", q)) if i > 0 and w[:1].isupper()
             and w.lower() not in sp._FUNCTION]
    out["names_held"] = float(np.mean([w.lower() in low for w in names])) if names else 1.0
    words = sp._words(s)
    q_lower = {w[2].lower() for w in sp._words(q)} - sp._FUNCTION
    q_terms = set(analyze(q.lower()))
    q_mask = [sp._is_question_word(w[2], q_terms, q_lower, analyze) and w[2].lower() not in sp._FUNCTION
              for w in words]
    q_pos = [i for i, h in enumerate(q_mask) if h]
    kind = sp.question_kind(q)
    sure = 0.0
    if kind in ("date", "number"):
        sure = float(bool(sp._typed_span(q, s, kind, words, q_pos)))
    elif kind in ("entity", "person", "place"):
        sure = float(bool((kind == "entity" and sp._type_of_span(q, s, words, q_mask, analyze))
                          or sp._cue_span(q, s, words, q_mask, analyze)))
    out["sure_phrase"] = sure
    got: list = []
    if kind in ("entity", "person", "place"):
        sp._entity_span(q, s, kind, words, q_pos, q_mask, got)
    out["phrase_margin"] = got[0] - got[1] if len(got) == 2 and got[1] > -1e8 else 1.0
    return out


def load(work: Path, split: str) -> dict[str, list[dict]]:
    out = {}
    for group in ("answerable", "unanswerable", "removed"):
        path = work / (f"units-{split}.pkl" if group == "answerable" else f"units-{split}-{group}.pkl")
        out[group] = [signals(r) for r in pickle.loads(path.read_bytes()) if not r["refused"]]
    return out


def simulate_min_score(rows: list[dict], m: float, min_coverage: float = 0.3, strong: float = 0.9) -> float:
    """Refused share with the cosine and coverage rules of the gate at an English min_score `m`."""
    return float(np.mean([r["best_score"] < m or (r["coverage"] < min_coverage and r["best_score"] < strong)
                          for r in rows])) if rows else 0.0


def main() -> None:
    from rag_cli.evaluate.gate_tuning import _logistic

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rows", type=Path, help="bench/squad_answers.py's WORK/rows.json (the gate's signals)")
    ap.add_argument("--scifact", type=Path, help="a bench/refusal.py report with the SciFact set")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = {split: load(args.work, split) for split in ("tune", "test")}
    keys = list(data["tune"]["answerable"][0])
    result = {"command": "python bench/refusal_signals.py " + " ".join(sys.argv[1:]), "auc": {}, "combined": {}}
    for split, d in data.items():
        result["auc"][split] = {k: {neg: round(auc([x[k] for x in d["answerable"]], [x[k] for x in d[neg]]), 3)
                                    for neg in ("unanswerable", "removed")} for k in keys}
        result["n"] = {s: {g: len(v) for g, v in dd.items()} for s, dd in data.items()}

    def X(rows):
        return np.array([[x[k] for k in keys] for x in rows], float)

    for neg in ("unanswerable", "removed"):
        t, e = data["tune"], data["test"]
        b, w = _logistic(np.vstack([X(t["answerable"]), X(t[neg])]),
                         np.r_[np.ones(len(t["answerable"])), np.zeros(len(t[neg]))])
        z = {s: {g: b + X(data[s][g]) @ w for g in ("answerable", neg)} for s in ("tune", "test")}
        thr = float(np.quantile(z["tune"]["answerable"], 0.05))  # 5% false refusals on tune (of those let through)
        result["combined"][neg] = {
            "auc_tune": round(auc(z["tune"]["answerable"], z["tune"][neg]), 3),
            "auc_test": round(auc(z["test"]["answerable"], z["test"][neg]), 3),
            "at_5pct_false_refusals_on_tune": {
                "tune_refused": round(float(np.mean(z["tune"][neg] < thr)), 3),
                "test_false_refusals": round(float(np.mean(z["test"]["answerable"] < thr)), 3),
                "test_refused": round(float(np.mean(z["test"][neg] < thr)), 3)}}
    if args.rows:
        rows = json.loads(args.rows.read_text())
        sci = None
        if args.scifact:
            qs = json.loads(args.scifact.read_text())["sets"]["scifact"]["questions"]
            sci = {"answerable": [q["answerable"] for q in qs], "unanswerable": [q["unanswerable"] for q in qs]}
        table = {}
        for m in (0.78, 0.79, 0.80, 0.805, 0.81, 0.815, 0.82):
            row = {f"{s}_{g}": round(simulate_min_score(rows[s][g], m), 4) for s in ("tune", "test")
                   for g in ("answerable", "unanswerable", "removed")}
            if sci:
                row.update({f"scifact_{g}": round(simulate_min_score(sci[g], m), 4) for g in sci})
            table[str(m)] = row
        result["english_min_score"] = table
    result["machine"], result["commit"] = machine(), commit()
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
