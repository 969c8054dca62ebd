"""Run the whole rag-cli pipeline on a BEIR-style collection and measure it.

Each stage runs as its own `rag` process (the real CLI), timed, with its
peak resident memory taken from the kernel (wait4's ru_maxrss). Then every
retrieval mode is searched and evaluated. Prints a table and writes JSON.

    python bench/pipeline.py scifact          # ../shared/data/scifact, test queries
    python bench/pipeline.py cmrc2018-trial --precision fp32

Full SciFact embedding takes about 9 minutes on 2 cores with int8.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from _common import run_measured

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_DATA", ROOT.parent / "shared" / "data"))

DATASETS = {
    "scifact": {"corpus": "scifact/corpus.jsonl.gz", "queries": "scifact/queries.jsonl",
                "qrels": "scifact/qrels/test.tsv"},
    "cmrc2018-trial": {"corpus": "cmrc2018-trial/corpus.jsonl", "queries": "cmrc2018-trial/queries.jsonl",
                       "qrels": "cmrc2018-trial/qrels/test.tsv"},
}


def rag_measured(args: list[str]) -> dict:
    """Run `python -m rag_cli ARGS --json`: seconds, the child's own peak RSS (os.wait4), parsed stdout."""
    cmd = [sys.executable, "-m", "rag_cli", *args]
    seconds, peak, out = run_measured(cmd)
    result = json.loads(out) if out.strip().startswith(("{", "[")) else {}
    return {"seconds": round(seconds, 2), "peak_rss_mib": round(peak, 1), "result": result}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", choices=sorted(DATASETS))
    ap.add_argument("--precision", default="int8", choices=["int8", "fp32"])
    ap.add_argument("--size", type=int, default=500, help="chunk size in tokens (500: one SciFact abstract per chunk)")
    ap.add_argument("--overlap", type=int, default=50)
    ap.add_argument("--strategy", default="recursive")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--reuse", action="store_true", help="skip chunk/embed/index if the project exists")
    args = ap.parse_args()

    ds = DATASETS[args.dataset]
    name = f"{args.dataset}-{args.strategy}{args.size}-{args.precision}"
    project = args.out / name
    p = ["-p", str(project)]
    stages: dict[str, dict] = {}
    if not (args.reuse and (project / "index" / "meta.json").exists()):
        stages["chunk"] = rag_measured(["chunk", str(DATA / ds["corpus"]), "--format", "beir", "--strategy",
                                        args.strategy, "--size", str(args.size), "--overlap", str(args.overlap),
                                        "--precision", args.precision, "--json", *p])
        stages["embed"] = rag_measured(["embed", "--precision", args.precision, "--json", *p])
        stages["index"] = rag_measured(["index", "--json", *p])
    results = {}
    for mode in ("sparse", "dense", "hybrid"):
        t = rag_measured(["search", "--queries", str(DATA / ds["queries"]), "--mode", mode, "-k", "100",
                          "--name", mode, "--json", *p])
        stages[f"search-{mode}"] = t
        ev = rag_measured(["eval", "--run", str(project / "runs" / f"{mode}.parquet"), "--qrels",
                           str(DATA / ds["qrels"]), "--name", mode, "--json", *p])
        m = ev["result"]["metrics"]
        results[mode] = {k: round(v, 4) for k, v in m.items()}

    report = {
        "dataset": args.dataset, "precision": args.precision, "strategy": args.strategy,
        "size_tokens": args.size, "overlap_tokens": args.overlap, "stages": stages, "metrics": results,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "command": " ".join(["python", "bench/pipeline.py", *sys.argv[1:]]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")

    print(f"\n{name}")
    print(f"{'stage':<16}{'seconds':>10}{'peak MiB':>10}")
    for s, v in stages.items():
        print(f"{s:<16}{v['seconds']:>10.1f}{v['peak_rss_mib']:>10.0f}")
    print(f"\n{'mode':<8}{'nDCG@10':>9}{'Recall@10':>11}{'Recall@100':>12}{'MRR@10':>8}")
    for mode, m in results.items():
        print(f"{mode:<8}{m['ndcg@10']:>9.4f}{m['recall@10']:>11.4f}{m['recall@100']:>12.4f}{m['mrr@10']:>8.4f}")
    print(f"\nwritten: {args.out / (name + '.json')}")


if __name__ == "__main__":
    main()
