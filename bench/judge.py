"""The LLM judge (`rag eval answers --answers A --judge`) on CMRC 2018 trial: the first
`--n` questions answered by the extractive generator in a project of all 256
passages (built by bench/refusal.py, `--work`, or any CMRC project given by
`--project`), then judged by the local llama-cpp generator (default Gemma 3
270M) `--repeats` times; the answer metrics against the gold answers too.

The extractive generator quotes sentences of its evidence, so every statement
of its answers is in the judge's context: a faithful judge scores 1.0. The
report gives how far the judge is from that, and its faithfulness split by
has-answer (the gold answer in the cited evidence), which a judge of
faithfulness should not follow.

    nice python bench/judge.py --project /tmp/judge-work/cmrc --n 30 --out bench/results/judge-cmrc-gemma.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from refusal import DATA  # noqa: E402

from rag_cli import Project, lab  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--project", type=Path, required=True)
ap.add_argument("--n", type=int, default=30)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--temperature", type=float, default=0.3)
ap.add_argument("--out", type=Path)
args = ap.parse_args()

src = DATA / "cmrc2018-trial"
lines = (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()[:args.n]
queries = args.project / f"judge-q{args.n}.jsonl"
queries.write_text("\n".join(lines) + "\n", encoding="utf-8")
p = Project.open(args.project)
t0 = time.perf_counter()
asked = p.ask_queries(queries, generator="extractive", name=f"judge-q{args.n}")
t1 = time.perf_counter()
report = lab.judge.run(p, asked["answers"], src / "answers.jsonl", judge_generator="llama-cpp",
                       judge_repeats=args.repeats, judge_temperature=args.temperature,
                       name=f"judge-q{args.n}").to_dict()
t2 = time.perf_counter()
judge = report["judge"]
split: dict[str, list[float]] = {"has_answer_1": [], "has_answer_0": []}
for qid, q in judge["per_query"].items():
    faith = [v for v in q["faithfulness"] if v is not None]
    has = report["per_query"].get(qid, {}).get("has_answer")
    if faith and has is not None:
        split[f"has_answer_{int(has)}"].append(statistics.mean(faith))
out = {
    "command": "python bench/judge.py " + " ".join(sys.argv[1:]),
    "questions": f"the first {args.n} of {src / 'queries.jsonl'}",
    "answers": {"generator": "extractive", "n": asked["n"], "refused": asked["refused"],
                "metrics": report["metrics"]},
    "judge": {"model": judge["model"], "metrics": judge["metrics"], "counts": judge["counts"]},
    "faithfulness_by_has_answer": {k: {"n": len(v), "mean": round(statistics.mean(v), 4) if v else None}
                                   for k, v in split.items()},
    "expected_faithfulness": "1.0: extractive answers quote sentences of the judged context",
    "examples": {qid: {k: q[k] for k in ("statements", "verdicts", "questions", "faithfulness",
                                         "answer_relevancy")}
                 for qid, q in list(judge["per_query"].items())[:3]},
    "seconds": {"ask": round(t1 - t0, 1), "judge": round(t2 - t1, 1)},
    "machine": machine(),
    "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
}
print(json.dumps(out, ensure_ascii=False, indent=1))
if args.out:
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
