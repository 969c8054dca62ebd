"""Before / after of `bench/refusal.py` runs (CMRC 2018 trial, SciFact):
refusals, false refusals, gold cited, answer contains gold, answer length,
and per-question EM / F1 compared as `rag eval --compare` compares runs
(`rag_cli.evaluate.compare.compare_reports`: mean difference, paired
randomisation and t-test p-values, win/tie/loss).

    python bench/answers_compare.py bench/results/answers-before-cmrc.json bench/results/answers-after-cmrc.json \
        --out bench/results/answers-compare-cmrc.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from _common import commit, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _words(text: str) -> int:
    from rag_cli.generate.citations import MARKER
    from rag_cli.loaders.normalize import has_cjk

    plain = MARKER.sub(" ", text)
    return sum(1 for ch in plain if has_cjk(ch)) + len([w for w in plain.split() if not has_cjk(w)])


def per_question(report: dict, name: str, gold: dict) -> dict:
    """{qid: {em, f1, refused, ...}} of the answerable questions of one set of a refusal.py report."""
    from rag_cli.evaluate.answers import exact_match, f1_score
    from rag_cli.generate.citations import MARKER

    out = {}
    for q in report["sets"][name]["questions"]:
        a = q["answerable"]
        golds = gold.get(a["id"])
        text = "" if a["refused"] else MARKER.sub("", a["answer"]).strip()
        row = {"refused": a["refused"], "half": q["half"], "length": _words(a["answer"]) if not a["refused"] else None,
               "refused_unanswerable": q["unanswerable"]["refused"], "gold_doc_cited": a["gold_doc_cited"],
               "contains_gold": a["answer_contains_gold"]}
        if golds:
            row["em"] = exact_match(text, golds) if text else 0.0
            row["f1"] = f1_score(text, golds) if text else 0.0
        out[a["id"]] = row
    return out


def summary(rows: dict, half: str | None) -> dict:
    sel = [r for r in rows.values() if half is None or r["half"] == half]
    answered = [r for r in sel if not r["refused"]]
    out = {"n": len(sel), "refused_unanswerable": sum(r["refused_unanswerable"] for r in sel) / len(sel),
           "false_refusals": sum(r["refused"] for r in sel) / len(sel),
           "gold_doc_cited_answered": sum(r["gold_doc_cited"] for r in answered) / max(1, len(answered)),
           "median_length_answered": statistics.median(r["length"] for r in answered) if answered else None}
    if sel and "f1" in sel[0]:
        out["contains_gold_answered"] = sum(bool(r["contains_gold"]) for r in answered) / max(1, len(answered))
        out["em"] = sum(r["em"] for r in sel) / len(sel)
        out["f1"] = sum(r["f1"] for r in sel) / len(sel)
    return out


def main() -> None:
    from rag_cli.evaluate.compare import compare_reports

    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "cmrc2018-trial" / "answers.jsonl"
    gold = {json.loads(line)["_id"]: json.loads(line)["answers"] for line in data.read_text().splitlines() if line}
    before, after = (json.loads(p.read_text(encoding="utf-8")) for p in (args.before, args.after))
    result = {"before": str(args.before), "after": str(args.after), "sets": {}}
    for name in after["sets"]:
        if name not in before["sets"]:
            continue
        rows = [per_question(r, name, gold) for r in (before, after)]
        common = sorted(set(rows[0]) & set(rows[1]))
        rows = [{q: r[q] for q in common} for r in rows]
        entry = {half or "all": {"before": summary(rows[0], half), "after": summary(rows[1], half)}
                 for half in ("tune", "test", None)}
        if "f1" in next(iter(rows[0].values())):
            reps = [{"per_query": {q: {m: float(r[q][m]) for m in ("em", "f1")} for q in common},
                     "metric_names": ["em", "f1"],
                     "metrics": {m: sum(r[q][m] for q in common) / len(common) for m in ("em", "f1")}}
                    for r in rows]
            entry["compare"] = compare_reports(reps, ["before", "after"], permutations=10000)["comparisons"][0]
        result["sets"][name] = entry
        print(f"## {name} ({len(common)} questions)")
        keys = [k for k in entry["all"]["after"] if k != "n"]
        print("| split | version | " + " | ".join(keys) + " |")
        print("|---|---|" + "---:|" * len(keys))
        for half in ("tune", "test", "all"):
            for v in ("before", "after"):
                r = entry[half][v]
                print(f"| {half} ({r['n']}) | {v} | " + " | ".join(
                    "" if r.get(k) is None else f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys)
                    + " |")
        if "compare" in entry:
            print(json.dumps(entry["compare"]["metrics"], indent=1)[:1500])
    result["machine"], result["commit"] = machine(), commit()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
