"""Held-out check of the extractive generator's sentence choice: CMRC 2018
trial questions outside bench/refusal.py's 200-question sample (on which the
scoring was designed), asked in the full corpus built by bench/refusal.py
(`--work`); the same evidence is quoted by the generator of BASE (git show)
and by the current one; "answer contains a gold answer" of each.

    nice python bench/extractive_holdout.py --work /tmp/refusal-work --n 150 --out bench/results/extractive-holdout-cmrc.json
"""
import argparse, sys, json, random, subprocess, types
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rag_cli import Project
from rag_cli.stages.ask import ask
from rag_cli.loaders.normalize import normalize_text as N
from refusal import cmrc_sample, _jsonl, DATA
from refusal import machine
ap = argparse.ArgumentParser()
ap.add_argument("--work", type=Path, required=True); ap.add_argument("--n", type=int, default=150)
ap.add_argument("--base", default="8f1450e"); ap.add_argument("--seed", type=int, default=7); ap.add_argument("--out", type=Path)
args = ap.parse_args()
old_src = subprocess.run(["git", "show", f"{args.base}:rag_cli/generate/extractive.py"],
                         capture_output=True, text=True).stdout
old = types.ModuleType("old_extractive"); exec(old_src, old.__dict__)
sample = {q for q, *_ in cmrc_sample(200, 13)["questions"]}
queries = {q["_id"]: q["text"] for q in _jsonl(DATA / "cmrc2018-trial" / "queries.jsonl")}
answers = {a["_id"]: a["answers"] for a in _jsonl(DATA / "cmrc2018-trial" / "answers.jsonl")}
rest = sorted(q for q in queries if q not in sample and q in answers)
random.Random(args.seed).shuffle(rest); rest = rest[:args.n]
p = Project.open(args.work / "cmrc" / "full" / "p")
acfg, scfg, s, mask, new = p._ask_setup(None, None, None, None, None, None, None)
e = s.embedder
oldgen = old.ExtractiveGenerator(lambda q: e.encode_queries([q])[0], lambda ps: e.query_encoder.encode_passages(ps),
                                 s.sparse.coverage, max_sentences=acfg.max_sentences)
hit = {"before": 0, "after": 0}; n = 0
for qid in rest:
    r = ask(s, new, queries[qid], acfg, scfg, mask)
    if r.refused:
        continue
    n += 1
    hit["after"] += any(N(a) in N(r.answer.text) for a in answers[qid])
    b = oldgen.generate(queries[qid], r.given)
    hit["before"] += any(N(a) in N(b.text) for a in answers[qid])
out = {"command": "python bench/extractive_holdout.py " + " ".join(sys.argv[1:]), "base": args.base,
       "n_questions": len(rest), "n_answered": n,
       "answer_contains_gold_answered": {k: round(v / n, 4) for k, v in hit.items()}, "seed": args.seed,
       "machine": machine(),
       "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()}
print(json.dumps(out))
if args.out:
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
