"""CPU milliseconds per search of one `Project` that alternates sparse and
dense searches (issue #31 item 4: the index halves are opened once each),
for this checkout and another one (`--before`, an older commit), run in
turns in fresh processes with the same project, so that the machine's load
reaches both alike.

    python bench/mode_switch.py --before /work/old-checkout [--rounds 3] [--searches 40]

The project is built from sample_corpus/docs with the tiny test bi-encoder
(tests/tiny_models.py, dim 16), once by each checkout (each reads the
rag.toml it writes), so model loading is cheap and the figure is mostly the
reopening of the index. CPU time is the child's
`time.process_time()` around the searches (after one warm-up search per
mode). Prints a table and writes bench/results/mode-switch.json. Never part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import commit, machine

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CHILD = """
import json, sys, time
from rag_cli import Project
p = Project(sys.argv[1])
n = int(sys.argv[2])
for mode in ("sparse", "dense"):
    p.search("warm up", mode=mode, k=5)
t0 = time.process_time()
for i in range(n):
    p.search("how do I install it", mode=("sparse", "dense")[i % 2], k=5)
print(json.dumps({"cpu_ms_per_search": (time.process_time() - t0) * 1000 / n}))
"""


def run(repo: Path, project: Path, n: int) -> float:
    """CPU ms per search of `repo`'s code on `project`; run from `repo` (`python -c` puts the working
    directory first on sys.path, ahead of PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(project), str(n)], env=env, capture_output=True,
                         text=True, check=True, cwd=repo).stdout
    return json.loads(out.splitlines()[-1])["cpu_ms_per_search"]


def build(repo: Path, project: Path, model: Path) -> None:
    """Build `project` from sample_corpus/docs with `repo`'s code (each checkout reads its own rag.toml)."""
    subprocess.run([sys.executable, "-m", "rag_cli", "build", str(REPO / "sample_corpus" / "docs"), "--unit",
                    "chars", "--model", str(model), "-q", "-p", str(project)],
                   env={**os.environ, "PYTHONPATH": str(repo)}, check=True, cwd=repo)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="an older checkout to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--searches", type=int, default=40)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "mode-switch.json")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import make_bi_encoder

    with tempfile.TemporaryDirectory() as tmp:
        model = make_bi_encoder(Path(tmp) / "tiny-bi")
        projects = {"before": Path(tmp) / "before.rag", "after": Path(tmp) / "after.rag"}
        repos = {"before": args.before.resolve(), "after": REPO}
        for k in projects:
            build(repos[k], projects[k], model)
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.rounds):  # interleaved
            for k in times:
                times[k].append(run(repos[k], projects[k], args.searches))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'checkout':<8} {'CPU ms/search (median)':>24}  runs")
    for k, v in times.items():
        print(f"{k:<8} {med[k]:>24.2f}  {', '.join(f'{x:.2f}' for x in v)}")
    print(f"ratio before/after: {med['before'] / med['after']:.1f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "commit": commit(),
                                    "before_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=args.before,
                                                                    capture_output=True, text=True).stdout.strip(),
                                    "machine": machine(), "searches": args.searches, "cpu_ms_per_search": times,
                                    "median": med, "ratio": med["before"] / med["after"]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
