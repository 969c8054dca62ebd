"""CMRC 2018 trial (or SciFact) through the CLI as a user runs it, and generators side by side on SciFact.

Every number comes from a `rag` command (run as `python -m rag_cli`, the
default pipeline of `rag build`); the command is kept next to its numbers in
the JSON and printed above each table. Steps, each cached in WORK/steps/NAME.json
(rerun the script and only the missing steps run; `--force NAME` reruns one):

* build:    rag build corpus.jsonl --format beir -p WORK/proj
* eval-M:   rag eval run --queries queries.jsonl --qrels qrels/test.tsv --mode M  (M = sparse, dense, hybrid; all 1,000)
* funnel:   rag eval funnel --queries ... --qrels ...
* tune:     split the questions by passage (seeded: half the passages' questions
            tune, the rest test; WORK/split/{tune,test}.jsonl and .tsv), then on a
            copy of the project (tuning writes rag.toml)
            rag eval tune fusion --queries tune.jsonl --qrels tune.tsv --test-queries test.jsonl --test-qrels test.tsv
* perturb:  rag eval perturb --perturb case --queries ... --qrels ...
* answers-extractive: rag ask --queries queries.jsonl, then rag eval answers --answers ... --gold answers.jsonl
* sample-G: a fixed random sample of --sample questions (seeded), asked with
            generator G (extractive, llama-cpp) and scored the same way;
            paired comparison of EM and F1 (randomisation and t-test, `compare_reports`)
* scifact-G: python bench/refusal.py --sets scifact --limit 50 --generator G (its own JSON, summarised here)

    nice python bench/cmrc_tables.py --work /tmp/cmrc-bench --sample 50 --out bench/results/cmrc2018-trial-tables.json

`--skip llm` leaves out the llama-cpp steps (CMRC sample and SciFact).

`--dataset scifact` runs the retrieval steps (build, eval-M, funnel, tune,
perturb) on SciFact instead: the BEIR test queries, tuned on the train split
(queries-train.jsonl, qrels/train.tsv) rather than on half the passages; it
has no gold answers, so no answer steps.

    nice python bench/cmrc_tables.py --dataset scifact --work /tmp/scifact-bench --out bench/results/scifact-tables.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from _common import commit, machine

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("RAG_DATA", REPO.parent / "shared" / "data"))
CMRC = DATA / "cmrc2018-trial"
SCIFACT = DATA / "scifact"
RAG = [sys.executable, "-m", "rag_cli"]
MODES = ("sparse", "dense", "hybrid")
METRICS = ("recall", "hit", "mrr", "ndcg", "precision", "map")
KS = (1, 5, 10, 20, 100)


def _shown(cmd: list[str]) -> str:
    """The command as a user types it (`rag ...`, `python bench/...`), data paths relative to shared/data."""
    words = ["rag", *cmd[3:]] if cmd[:3] == RAG else ["python", *cmd[1:]] if cmd[0] == sys.executable else cmd
    return " ".join(str(w).replace(str(DATA) + "/", "shared/data/") for w in words)


def run(cmd: list, *, json_out: bool = True) -> tuple[dict | None, float]:
    """Run `cmd` from the repository root; its --json stdout parsed, and its wall time (s)."""
    cmd = [str(c) for c in cmd]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    print("$", _shown(cmd), file=sys.stderr, flush=True)
    t0 = time.time()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = round(time.time() - t0, 1)
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode}: {_shown(cmd)}\n{done.stderr[-3000:]}")
    return (json.loads(done.stdout) if json_out else None), seconds


class Steps:
    """Step results cached as WORK/steps/NAME.json: {"command": [...], "seconds": s, "result": ...}."""

    def __init__(self, work: Path, force: set[str]):
        self.dir = work / "steps"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.force = force

    def get(self, name: str, fn) -> dict:
        path = self.dir / f"{name}.json"
        if path.exists() and name not in self.force:
            return json.loads(path.read_text(encoding="utf-8"))
        step = fn()
        path.write_text(json.dumps(step, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        return step


def cli_step(*cmds: list) -> dict:
    """Run the commands in order; the last one's JSON is the result."""
    shown, seconds, result = [], 0.0, None
    for cmd in cmds:
        result, s = run(cmd, json_out="--json" in cmd)
        shown.append(_shown([str(c) for c in cmd]))
        seconds += s
    return {"command": shown, "seconds": round(seconds, 1), "result": result}


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def split_by_passage(dest: Path, seed: int) -> dict:
    """Half the passages' questions (shuffled with `seed`) for tuning, the rest for test."""
    dest.mkdir(parents=True, exist_ok=True)
    queries = _read_jsonl(CMRC / "queries.jsonl")
    lines = (CMRC / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    header, pairs = lines[0], [line.split("\t") for line in lines[1:] if line.strip()]
    by_doc = defaultdict(set)
    for q, d, _ in pairs:
        by_doc[d].add(q)
    docs = sorted(by_doc)
    random.Random(seed).shuffle(docs)
    tune_docs = set(docs[: len(docs) // 2])
    tune_q = {q for d in tune_docs for q in by_doc[d]}
    out = {}
    for half, keep in (("tune", lambda q: q in tune_q), ("test", lambda q: q not in tune_q)):
        qs = [r for r in queries if keep(r["_id"])]
        _write_jsonl(dest / f"{half}.jsonl", qs)
        (dest / f"{half}.tsv").write_text(
            "\n".join([header, *("\t".join(p) for p in pairs if keep(p[0]))]) + "\n", encoding="utf-8")
        out[half] = {"queries": str(dest / f"{half}.jsonl"), "qrels": str(dest / f"{half}.tsv"),
                     "n_queries": len(qs), "n_passages": len(tune_docs) if half == "tune" else len(docs) - len(tune_docs)}
    return out


def paired(a: dict, b: dict, names: tuple[str, str]) -> dict:
    """EM and F1 of two answer reports on the same questions, compared per question (`compare_reports`)."""
    from rag_cli.evaluate.compare import compare_reports

    metrics = ["em", "f1"]
    reps = [{"per_query": {q: {m: r[m] for m in metrics} for q, r in rep["per_query"].items()},
             "metric_names": metrics, "metrics": {m: rep["metrics"][m] for m in metrics}} for rep in (a, b)]
    comp = compare_reports(reps, list(names), permutations=10000)["comparisons"][0]["metrics"]
    both = set(a["per_query"]) & set(b["per_query"])
    ans = [q for q in both if not a["per_query"][q]["refused"] and not b["per_query"][q]["refused"]]
    has = {n: sum(rep["per_query"][q].get("has_answer", 0) for q in ans) for n, rep in zip(names, (a, b))}
    return {"em": comp["em"], "f1": comp["f1"], "n_answered_by_both": len(ans), "has_answer_count_both_answered": has}


# --------------------------------------------------------------------------- tables
def table(header: list[str], rows: list[list]) -> str:
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows])


def print_tables(res: dict) -> None:
    for mode in MODES:
        step = res.get(f"eval-{mode}")
        if not step:
            continue
        m = step["result"]["metrics"]
        print(f"\n## {mode}: `{step['command'][-1]}` ({step['seconds']} s)\n")
        rows = [[name] + [m.get(f"{name}@{k}") for k in KS] for name in METRICS]
        print(table(["metric"] + [f"@{k}" for k in KS], rows))
        print(f"MAP {m.get('map'):.4f}  R-precision {m.get('rprec'):.4f}")
    if "funnel" in res:
        f = res["funnel"]["result"]
        print(f"\n## funnel: `{res['funnel']['command'][-1]}`\n")
        print(table(["first missing at", "queries"], [[k, v] for k, v in f["counts"]["first_missing"].items()]))
        print("not in sparse", f["counts"]["not_in_sparse"], "not in dense", f["counts"]["not_in_dense"],
              "ANN", json.dumps(f["ann"]))
    if "tune" in res:
        t = res["tune"]["result"]
        print(f"\n## tune: `{res['tune']['command'][-1]}`\n")
        print("best", t["best"], "train", t["train"])
        rows = [[m, r["baseline"], r["run"], r["mean_diff"], r["p_randomisation"], r["p_t_test"],
                 r["p_randomisation_holm"], f"{r['wins']}/{r['ties']}/{r['losses']}"]
                for m, r in t["test"]["comparison"]["metrics"].items()]
        print(table(["metric", "RRF 60", "tuned", "diff", "p rand", "p t", "p rand Holm", "w/t/l"], rows))
    if "perturb" in res:
        p = res["perturb"]["result"]
        print(f"\n## perturb: `{res['perturb']['command'][-1]}`\n")
        rows = [[k, v["n_changed"], v["loss"].get("ndcg@10"), v["loss"].get("recall@10"),
                 v["comparison"]["ndcg@10"]["p_randomisation"]] for k, v in p["perturbations"].items()]
        print("original nDCG@10", p["original"].get("ndcg@10"))
        print(table(["variant", "changed", "nDCG@10 loss", "Recall@10 loss", "p rand"], rows))
    ans = [k for k in res if k.startswith(("answers-", "sample-")) and "result" in res[k]]
    if ans:
        print("\n## answers\n")
        keys = ("em", "f1", "f1_answered", "has_answer", "citation_precision", "citation_recall", "refusal_rate",
                "latency_p50_ms", "latency_p95_ms")
        rows = [[k, res[k]["result"]["counts"]["n_questions"]] + [res[k]["result"]["metrics"][m] for m in keys]
                for k in ans]
        print(table(["run", "n"] + list(keys), rows))
    if "sample-paired" in res:
        print("\npaired (llama-cpp - extractive):", json.dumps(res["sample-paired"], indent=1))
    for key in ("scifact-extractive", "scifact-llama-cpp"):
        if key in res:
            print(f"\n## {key}: `{res[key]['command'][0]}`\n", json.dumps(res[key]["result"], indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", choices=("cmrc2018-trial", "scifact"), default="cmrc2018-trial")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cmrc-bench"))
    ap.add_argument("--sample", type=int, default=50, help="questions of the generator comparison sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scifact-limit", type=int, default=50)
    ap.add_argument("--skip", action="append", default=[], help="llm: leave out the llama-cpp steps")
    ap.add_argument("--only", action="append", default=[], help="run only these steps (cached ones are read)")
    ap.add_argument("--force", action="append", default=[])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = args.work.resolve()
    proj = work / "proj"
    steps = Steps(work, set(args.force))
    scifact = args.dataset == "scifact"
    root = SCIFACT if scifact else CMRC
    corpus = root / ("corpus.jsonl.gz" if scifact else "corpus.jsonl")
    q, qrels, gold = root / "queries.jsonl", root / "qrels" / "test.tsv", CMRC / "answers.jsonl"
    res: dict = {}
    want = lambda name: not args.only or name in args.only or (steps.dir / f"{name}.json").exists()  # noqa: E731

    if want("build"):
        res["build"] = steps.get("build", lambda: cli_step(
            RAG + ["build", corpus, "--format", "beir", "-p", proj]))
    for mode in MODES:
        if want(f"eval-{mode}"):
            res[f"eval-{mode}"] = steps.get(f"eval-{mode}", lambda: cli_step(
                RAG + ["eval", "run", "--queries", q, "--qrels", qrels, "--mode", mode, "--name", f"{root.name}-{mode}",
                       "-p", proj, "--json"]))
    if want("funnel"):
        res["funnel"] = steps.get("funnel", lambda: cli_step(
            RAG + ["eval", "funnel", "--queries", q, "--qrels", qrels, "-p", proj, "--json"]))
    if want("tune"):
        def tune() -> dict:
            halves = ({"tune": {"queries": root / "queries-train.jsonl", "qrels": root / "qrels" / "train.tsv"},
                       "test": {"queries": q, "qrels": qrels}} if scifact else split_by_passage(work / "split", args.seed))
            tuned = work / "proj-tune"
            if tuned.exists():
                shutil.rmtree(tuned)
            shutil.copytree(proj, tuned, ignore=shutil.ignore_patterns("eval", "runs", "answers", ".lock*"))
            step = cli_step(RAG + ["eval", "tune", "fusion", "--queries", halves["tune"]["queries"],
                                   "--qrels", halves["tune"]["qrels"], "--test-queries", halves["test"]["queries"],
                                   "--test-qrels", halves["test"]["qrels"], "-p", tuned, "--json"])
            step["split"] = ({"by": "BEIR train / test"} if scifact
                             else {**halves, "seed": args.seed, "by": "passage"})
            step["result"].pop("grid_runs", None)
            return step
        res["tune"] = steps.get("tune", tune)
    if want("perturb"):
        res["perturb"] = steps.get("perturb", lambda: cli_step(
            RAG + ["eval", "perturb", "--perturb", "case", "--queries", q, "--qrels", qrels, "-p", proj, "--json"]))
    if scifact:  # no gold answers: the answer steps are CMRC's
        args.skip.append("answers")
    if want("answers-extractive") and "answers" not in args.skip:
        res["answers-extractive"] = steps.get("answers-extractive", lambda: cli_step(
            RAG + ["ask", "--queries", q, "--name", "all-extractive", "-p", proj, "-q"],
            RAG + ["eval", "answers", "--answers", proj / "answers" / "all-extractive.parquet", "--gold", gold,
                   "-p", proj, "--json"]))

    sample_file = work / f"sample{args.sample}.jsonl"
    generators = [] if "answers" in args.skip else ["extractive"] + ([] if "llm" in args.skip else ["llama-cpp"])
    if generators:
        queries = _read_jsonl(q)
        _write_jsonl(sample_file, sorted(random.Random(args.seed).sample(queries, args.sample),
                                         key=lambda r: r["_id"]))
    for g in generators:
        if want(f"sample-{g}"):
            name = f"sample{args.sample}-{g}"
            res[f"sample-{g}"] = steps.get(f"sample-{g}", lambda: cli_step(
                RAG + ["ask", "--queries", sample_file, "--name", name, "--generator", g, "-p", proj, "-q"],
                RAG + ["eval", "answers", "--answers", proj / "answers" / f"{name}.parquet", "--gold", gold, "-p", proj,
                       "--json"]))
    if "sample-extractive" in res and "sample-llama-cpp" in res:
        res["sample-paired"] = paired(res["sample-extractive"]["result"], res["sample-llama-cpp"]["result"],
                                      ("extractive", "llama-cpp"))
    for g in generators:
        if want(f"scifact-{g}"):
            out = work / f"refusal-scifact-q{args.scifact_limit}-{g}.json"

            def scifact(g=g, out=out) -> dict:
                step = cli_step([sys.executable, "bench/refusal.py", "--sets", "scifact", "--generator", g,
                                 "--limit", args.scifact_limit, "--work", work / "refusal", "--out", out])
                full = json.loads(out.read_text(encoding="utf-8"))["sets"]["scifact"]
                step["result"] = {k: full[k] for k in ("n_docs", "n_removed", "all", "tune", "test")}
                return step
            res[f"scifact-{g}"] = steps.get(f"scifact-{g}", scifact)

    print_tables(res)
    for step in res.values():  # per-query rows stay in WORK/steps; the JSON keeps the summaries
        r = step.get("result") if isinstance(step, dict) else None
        if isinstance(r, dict):
            for key in ("per_query", "questions"):
                r.pop(key, None)
            if isinstance(r.get("missing_answers"), list):  # a sample leaves out most gold questions
                r["missing_answers"] = len(r["missing_answers"])
            if isinstance(r.get("test"), dict) and "comparison" in r["test"]:
                r["test"]["comparison"].pop("per_query", None)
    res_out = {"command": "python bench/cmrc_tables.py " + " ".join(sys.argv[1:]), "dataset": args.dataset,
               "sample": {"n": args.sample, "seed": args.seed, "file": str(sample_file)} if generators else None,
               "steps": res, "machine": machine(), "commit": commit()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res_out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
