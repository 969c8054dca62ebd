"""Peak memory and throughput of `rag chunk` as the corpus grows.

Builds BEIR corpora of about `--mb` MB of text each from the SciFact corpus
repeated (record k of copy r gets `_id` `ID~r`, so every id is new), then runs
the real CLI (`python -m rag_cli chunk CORPUS --format beir`) once per
corpus, under `nice` (`--no-nice`: at normal priority), and takes the
child's peak resident memory from the kernel (os.wait4's ru_maxrss) and its
wall time. MB is the UTF-8 size of the records' `title + "\\n\\n" + text`
(with `--shape line`, of the line); MB/s is that over the wall time (process
start, imports and the tokenizer's load included).

Sizes in tokens (`--unit tokens`, the default unit) use multilingual-e5-small's
tokenizer.json (the installed package's copy) in a model folder of its own:
`rag chunk` loads only the tokenizer and the folder's JSON, never the graph.

`--rev REV` runs the code of a git commit instead of the working tree (an
export of it under bench/out/), to compare before and after a change.

`--shape line` writes one document instead: a plain-text file of about
`--mb` MB on a single line (the SciFact titles and texts, newlines turned
into spaces, repeated), run as `rag chunk FILE.txt` (#31 item 12: one very
long document in tokens).

    nice python bench/chunk_memory.py --mb 2,20                 # writes bench/results/chunk_memory.json
    nice python bench/chunk_memory.py --mb 2 --rev 82fc942 --out bench/out/before.json
    nice python bench/chunk_memory.py --shape line --mb 5,20,50 --out bench/results/chunk_memory-line.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import run_measured

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "bench" / "out"


def cpu_info() -> dict:
    """CPU model and flags from /proc/cpuinfo (Linux), cores this process may use."""
    info = {"cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and "model" not in info:
                info["model"] = value.strip()
            if key.strip() == "flags" and "flags" not in info:
                info["flags"] = value.split()
    except OSError:
        pass
    return info


def commit_of(rev: str = "HEAD") -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "rag_cli"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty and rev == "HEAD" else "")


def build_corpus(path: Path, mb: float, source: Path) -> tuple[int, int]:
    """Write a BEIR corpus of about `mb` MB of text to `path`; returns (records, text bytes)."""
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    want = int(mb * 1e6)
    n = size = 0
    with path.open("w", encoding="utf-8") as out:
        copy = 0
        while size < want:
            for rec in records:
                rec = dict(rec, _id=f"{rec['_id']}~{copy}")
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                title, text = rec.get("title") or "", rec.get("text") or ""
                size += len((f"{title}\n\n{text}" if title else text).encode("utf-8"))
                n += 1
                if size >= want:
                    break
            copy += 1
    return n, size


def build_line(path: Path, mb: float, source: Path) -> tuple[int, int]:
    """Write about `mb` MB of the corpus's text as one line to `path`; returns (1, text bytes)."""
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    texts = [" ".join(f"{r.get('title') or ''} {r.get('text') or ''}".split()) for r in records]
    want = int(mb * 1e6)
    size = 0
    with path.open("w", encoding="utf-8") as out:
        while size < want:
            for t in texts:
                piece = (" " if size else "") + t
                out.write(piece)
                size += len(piece.encode("utf-8"))
                if size >= want:
                    break
        out.write("\n")
    return 1, size


def tokenizer_folder(path: Path) -> Path:
    """A model folder holding multilingual-e5-small's tokenizer.json and a
    placeholder graph file (chunking never opens it)."""
    sys.path.insert(0, str(ROOT))
    from rag_cli.models.convert.e5 import find_tokenizer_json

    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(find_tokenizer_json(), path / "tokenizer.json")
    (path / "model.onnx").write_bytes(b"")
    # as the converted default's config.json says (else the folder parses tokenizer.json for it)
    (path / "config.json").write_text(json.dumps({"model_type": "xlm-roberta", "pad_token_id": 1}))
    (path / "rag_model.json").write_text(json.dumps({"kind": "embedder", "max_length": 512,
                                                     "query_prefix": "query: ", "passage_prefix": "passage: "}))
    return path


def export(rev: str) -> Path:
    """The package as of `rev`, exported under bench/out/ (git archive)."""
    dest = OUT / f"rev-{rev}"
    if not (dest / "rag_cli").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "rag_cli"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def measure(code: Path, corpus: Path, project: Path, args: list[str], fmt: str = "beir", nice: bool = True) -> dict:
    """Run `rag chunk` as a child and take its peak RSS from the kernel (wait4)."""
    cmd = ["nice"] * nice + [sys.executable, "-m", "rag_cli", "chunk", str(corpus), "--format", fmt, "-p", str(project),
           "--json", *args]
    env = dict(os.environ, PYTHONPATH=str(code))
    # cwd: `python -m` puts the current folder first on sys.path, before PYTHONPATH
    seconds, peak, out = run_measured(cmd, env=env, cwd=code)
    return {"seconds": round(seconds, 2), "peak_rss_mib": round(peak, 1), "result": json.loads(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", default="2,20", help="corpus sizes in MB of text, comma-separated")
    ap.add_argument("--unit", default="tokens", choices=["tokens", "chars"])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--shape", default="beir", choices=["beir", "line"],
                    help="beir: many SciFact records; line: one text file on a single line")
    ap.add_argument("--no-nice", action="store_true",
                    help="run `rag chunk` at normal priority (on a machine busy with other work a niced child barely runs)")
    ap.add_argument("--rev", default=None, help="run this git commit's rag_cli instead of the working tree")
    ap.add_argument("--source", type=Path, default=DATA / "scifact" / "corpus.jsonl.gz")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chunk_memory.json")
    opts = ap.parse_args()

    OUT.mkdir(parents=True, exist_ok=True)
    code = export(opts.rev) if opts.rev else ROOT
    args = ["--unit", opts.unit, "--size", str(opts.size), "--overlap", str(opts.overlap)]
    work = Path(tempfile.mkdtemp(prefix="chunk_memory-", dir=OUT))
    if opts.unit == "tokens":
        args += ["--model", str(tokenizer_folder(work / "e5-tokenizer"))]
    rows = []
    try:
        for mb in [float(x) for x in opts.mb.split(",")]:
            if opts.shape == "line":
                corpus = work / f"line-{mb:g}mb.txt"
                n_docs, n_bytes = build_line(corpus, mb, opts.source)
            else:
                corpus = work / f"corpus-{mb:g}mb.jsonl"
                n_docs, n_bytes = build_corpus(corpus, mb, opts.source)
            m = measure(code, corpus, work / f"proj-{mb:g}", args, "text" if opts.shape == "line" else "beir",
                        nice=not opts.no_nice)
            row = {"mb": round(n_bytes / 1e6, 2), "docs": n_docs, "chunks": m["result"]["n_chunks"],
                   "seconds": m["seconds"], "mb_per_s": round(n_bytes / 1e6 / m["seconds"], 3),
                   "peak_rss_mib": m["peak_rss_mib"],
                   "rss_mib_per_text_mb": round(m["peak_rss_mib"] / (n_bytes / 1e6), 1),
                   "load_average_after": [round(x, 2) for x in os.getloadavg()]}
            rows.append(row)
            print(f"{row['mb']:8.2f} MB  {row['docs']:7d} docs  {row['chunks']:7d} chunks  {row['seconds']:7.1f} s  "
                  f"{row['mb_per_s']:6.3f} MB/s  peak RSS {row['peak_rss_mib']:8.1f} MiB", flush=True)
            shutil.rmtree(work / f"proj-{mb:g}", ignore_errors=True)
            corpus.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    what = ("rag chunk --format beir on SciFact repeated with new ids" if opts.shape == "beir" else
            "rag chunk --format text on one file of SciFact text on a single line")
    report = {
        "what": f"{what}: peak RSS (wait4 ru_maxrss) and MB/s",
        "command": " ".join(["python", "bench/chunk_memory.py"] + (["--shape", "line"] if opts.shape == "line" else [])
                            + (["--no-nice"] if opts.no_nice else [])
                            + ["--mb", opts.mb, "--unit", opts.unit, "--size",
                             str(opts.size), "--overlap", str(opts.overlap)] + (["--rev", opts.rev] if opts.rev else [])),
        "commit": commit_of(opts.rev or "HEAD"),
        "machine": {**cpu_info(), "python": platform.python_version(), "platform": platform.platform()},
        "rows": rows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"-> {opts.out}")


if __name__ == "__main__":
    main()
