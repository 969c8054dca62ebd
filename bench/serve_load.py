"""Load test of `rag serve` on SciFact: latency at N concurrent clients, and
hot reload under load (docs/serve.md).

    python bench/serve_load.py                                  # build (once), then measure
    python bench/serve_load.py --duration 20 --updates 4        # a quicker look
    python bench/serve_load.py --work /tmp/serve-bench --out bench/results/serve_load.json

1. **Project.** The 5,183 SciFact abstracts as `DOC_ID.txt` files (title,
   blank line, text) under WORK/src, built once with `rag build` (default
   model multilingual-e5-small int8, default chunks) into WORK/p; a later
   run reuses it.
2. **Latency.** One `rag serve` process (this checkout, 127.0.0.1, port 0),
   then per mode (sparse, dense, hybrid): `--clients` closed-loop clients
   (asyncio, one keep-alive connection each, written with asyncio streams
   so the clients take little CPU; each sends its next query as soon as the
   previous answer is read) post the 300 SciFact test queries in turn (`k`
   10) for `--duration` seconds after a 3-second warm-up (not counted), at
   most `--max-requests` per mode. Latency is the client's wall time per
   request (HTTP and JSON included); an error is any status but 200 or an
   exception. The server's and the clients' CPU seconds and the server's
   peak RSS come from /proc and `time.process_time`.
3. **Hot reload.** The same clients (modes taken in turn, the first
   `--reload-queries` test queries) run while `--updates` `rag update` runs
   alternate the corpus between two states (state B: 10 documents edited,
   5 removed, 5 added back from a held-out set; state A: as built), each
   run keeping every generation (`--keep`). Afterwards every response is
   checked against the generation it names (`X-Rag-Generation`), searched
   alone in a fresh process-local project that holds only that generation:
   a response that differs is "wrong". A failed request is any non-200 or
   exception.

The machine is shared: the load average before and after each phase is
recorded, and the results say when it was busy. Never part of `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from _common import commit, machine  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "scifact"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
HELD_OUT = 5  # documents left out of the first build, added by state B


def corpus() -> list[tuple[str, str]]:
    out = []
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            out.append((r["_id"], f"{r['title']}\n\n{r['text']}\n"))
    return out


def queries() -> list[str]:
    with open(DATA / "queries.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def state(docs: list[tuple[str, str]], b: bool) -> dict[str, str]:
    """{file name: text}: state A (all but the held-out documents) or B (10 edited, 5 removed, 5 added)."""
    base = docs[:-HELD_OUT]
    if not b:
        return {f"{d}.txt": t for d, t in base}
    out = {f"{d}.txt": t for i, (d, t) in enumerate(base) if i not in range(100, 105)}
    for i in range(0, 1000, 100):
        d, t = base[i]
        out[f"{d}.txt"] = t + "Update: an added sentence about gene expression in stem cells.\n"
    out.update({f"{d}.txt": t for d, t in docs[-HELD_OUT:]})
    return out


def write_state(src: Path, files: dict[str, str]) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.name not in files:
            p.unlink()
    for name, text in files.items():
        p = src / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")


def rag(*args, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args)], env=ENV, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise SystemExit(f"rag {' '.join(map(str, args))} failed ({res.returncode}): {res.stderr[-2000:]}")
    return res


def build(work: Path, docs) -> dict | None:
    """Build WORK/p from WORK/src (state A) unless it is built; the build's seconds, or None when reused."""
    p = work / "p"
    write_state(work / "src", state(docs, b=False))
    if (p / "index").is_dir():
        rag("update", "-p", p, "-q")  # back to state A if a run stopped half-way
        return None
    t0 = time.perf_counter()
    rag("build", work / "src", "-p", p, "-q")
    return {"seconds": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------- the server
class Server:
    def __init__(self, project: Path, *args: str):
        self.log = project.parent / "serve.log"
        self.err = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "rag_cli", "serve", "-p", str(project), "--port", "0",
                                      *args], env=ENV, stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            m = re.search(r"on (http://127\.0\.0\.1:\d+)", self.log.read_text(errors="replace"))
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"rag serve exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.stop()
        raise SystemExit("rag serve did not start within 300 s")

    def proc_stats(self) -> dict:
        """The server's CPU seconds (user + system) and its resident and peak resident memory, MiB."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        mem = {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) / 1024 for k in ("VmRSS", "VmHWM")}
        return {"cpu_s": (int(stat[11]) + int(stat[12])) / ticks, "rss_mib": round(mem["VmRSS"]),
                "peak_rss_mib": round(mem["VmHWM"])}

    def stop(self) -> int:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        return self.proc.returncode


# --------------------------------------------------------------------------- clients
class Connection:
    """One keep-alive HTTP/1.1 connection with as little client work as possible (a few lines of asyncio
    streams instead of an HTTP library), so that on a 2-core machine the clients take little of the CPU
    the server is measured on."""

    def __init__(self, url: str):
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, dict, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json"
                          f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        data = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, headers, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def clients(url: str, texts: list[str], modes: list[str], n: int, seconds: float, max_requests: int,
                  warm_up: float = 0.0, stop: threading.Event | None = None, digest: bool = False) -> list[tuple]:
    """`n` closed-loop clients for `seconds` (after `warm_up`) or until `stop` is set: [(t_sent, latency_ms,
    status, mode, query, generation, the body's `digest` (with `digest`) or an error)], at most
    `max_requests` counted."""
    out: list[tuple] = []
    start = time.perf_counter()
    counted_from, deadline = start + warm_up, start + warm_up + seconds

    async def one(i: int) -> None:
        conn, k = Connection(url), i
        while time.perf_counter() < deadline and len(out) < max_requests and not (stop and stop.is_set()):
            q, mode = texts[k % len(texts)], modes[k % len(modes)]
            k += n
            body = json.dumps({"query": q, "mode": mode, "k": 10}).encode()
            t = time.perf_counter()
            try:
                status, headers, data = await conn.post("/search", body)
                gen = headers.get("x-rag-generation")
                result = None if status == 200 and not digest else json_digest(json.loads(data)) \
                    if status == 200 else data[:300].decode(errors="replace")
            except Exception as exc:  # noqa: BLE001 - every failure counts
                status, gen, result = -1, None, repr(exc)
                await conn.close()
            if t >= counted_from:
                out.append((t - start, (time.perf_counter() - t) * 1000.0, status, mode, q, gen, result))
        await conn.close()

    await asyncio.gather(*(one(i) for i in range(n)))
    return out


def json_digest(obj) -> str:
    """sha256 of `obj` as canonical JSON (keys sorted): equal JSON, equal digest."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def summary(rows: list[tuple], seconds: float) -> dict:
    ok = [r[1] for r in rows if r[2] == 200]
    qs = statistics.quantiles(ok, n=100, method="inclusive") if len(ok) >= 2 else [float("nan")] * 99
    return {"requests": len(rows), "errors": len(rows) - len(ok), "qps": round(len(rows) / seconds, 1),
            "p50_ms": round(qs[49], 1), "p95_ms": round(qs[94], 1), "p99_ms": round(qs[98], 1),
            "mean_ms": round(statistics.fmean(ok), 1) if ok else None, "max_ms": round(max(ok), 1) if ok else None}


def load() -> tuple[float, float, float]:
    return tuple(round(x, 2) for x in os.getloadavg())


# --------------------------------------------------------------------------- hot reload
def alone(project: Path, gen: str, into: Path) -> Path:
    """A project folder whose only index generation is `gen` of `project` (a link), to search it alone."""
    root = into / gen
    if not root.exists():
        (root / "index").mkdir(parents=True)
        shutil.copy(project / "rag.toml", root / "rag.toml")
        os.symlink(project / "index" / gen, root / "index" / gen)
        (root / "index" / "CURRENT").write_text(gen + "\n", encoding="utf-8")
    return root


def check_responses(project: Path, rows: list[tuple], into: Path) -> dict:
    """Each successful response against its generation searched alone: (wrong, checked, generations)."""
    from rag_cli import Project
    from rag_cli.json_shapes import json_safe, search_json

    opened: dict[str, Project] = {}
    expected: dict[tuple, dict] = {}
    wrong, examples = 0, []
    for _, _, status, mode, q, gen, body in rows:
        if status != 200:
            continue
        if gen not in opened:
            opened[gen] = Project.open(alone(project, gen, into))
        key = (gen, q, mode)
        if key not in expected:
            expected[key] = json_digest(json_safe(search_json(q, opened[gen].search(q, mode=mode, k=10))))
        if body != expected[key]:
            wrong += 1
            if len(examples) < 3:
                examples.append({"generation": gen, "query": q, "mode": mode})
    return {"wrong": wrong, "checked": sum(r[2] == 200 for r in rows), "distinct_checks": len(expected),
            "wrong_examples": examples}


def hot_reload(args, work: Path, docs, texts: list[str]) -> dict:
    import httpx

    project = work / "p"
    server = Server(project, "--mcp", "none", "--reload-poll", "0.2", *args.serve_args.split())
    try:
        before = server.proc_stats()
        t0 = time.perf_counter()
        stop, rows = threading.Event(), []
        runner = threading.Thread(target=lambda: rows.extend(asyncio.run(clients(
            server.url, texts, ["sparse", "dense", "hybrid"], args.clients, 24 * 3600.0, 10**9, stop=stop,
            digest=True))))
        runner.start()
        updates = []
        for i in range(args.updates):
            write_state(work / "src", state(docs, b=i % 2 == 0))
            u0 = time.perf_counter()
            out = json.loads(rag("update", "-p", project, "--json", "-q", "--keep", args.keep).stdout)
            updates.append({"seconds": round(time.perf_counter() - u0, 1), "generation": out["index"]["generation"]})
        deadline = time.monotonic() + 120
        while httpx.get(server.url + "/healthz").json()["reloads"] < args.updates and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)
        stop.set()
        runner.join(timeout=300)
        stop_at = time.perf_counter() - t0
        health = httpx.get(server.url + "/healthz").json()
        stats = server.proc_stats()
    finally:
        code = server.stop()
    checked = check_responses(project, rows, work / "alone")
    write_state(work / "src", state(docs, b=False))
    rag("update", "-p", project, "-q", "--keep", 2)  # back to state A, old generations removed
    gens = sorted({r[5] for r in rows if r[5]})
    return {"updates": updates, "requests": len(rows), "failed": sum(r[2] != 200 for r in rows),
            **checked, "generations_served": len(gens), "last_generation": health["generation"],
            "reloads": health["reloads"], "reload_error": health["reload_error"], "last_load_s": health.get("load_s"),
            "seconds": round(stop_at, 1),
            "latency": summary(rows, stop_at), "server_exit": code, "server_peak_rss_mib": stats["peak_rss_mib"],
            "server_cpu_s": round(stats["cpu_s"] - before["cpu_s"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/serve-bench"))
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds per mode")
    ap.add_argument("--max-requests", type=int, default=200_000, help="per mode")
    ap.add_argument("--modes", default="sparse,dense,hybrid")
    ap.add_argument("--updates", type=int, default=20, help="rag update runs under load (0: skip)")
    ap.add_argument("--reload-queries", type=int, default=30)
    ap.add_argument("--keep", type=int, default=30, help="generations kept during the reload phase")
    ap.add_argument("--serve-args", default="", help="more `rag serve` flags, e.g. \"--max-concurrent 2\"")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "serve_load.json")
    args = ap.parse_args()

    docs, texts = corpus(), queries()
    built = build(args.work, docs)
    out = {"command": " ".join(["python", "bench/serve_load.py", *sys.argv[1:]]), "commit": commit(),
           "machine": machine(), "project": {"documents": len(docs) - HELD_OUT, "built": built,
                                             **_counts(args.work / "p")},
           "clients": args.clients, "duration_s": args.duration, "k": 10, "server_stack": _stack(), "modes": {}}
    server = Server(args.work / "p", "--mcp", "none", *args.serve_args.split())
    try:
        out["server_start_rss_mib"] = server.proc_stats()["rss_mib"]
        for mode in args.modes.split(","):
            la = load()
            cpu0, client0 = server.proc_stats()["cpu_s"], time.process_time()
            rows = asyncio.run(clients(server.url, texts, [mode], args.clients, args.duration, args.max_requests,
                                       warm_up=3.0))
            stats = server.proc_stats()
            out["modes"][mode] = {**summary(rows, args.duration), "load_before": la, "load_after": load(),
                                  "server_cpu_s": round(stats["cpu_s"] - cpu0, 1),
                                  "client_cpu_s": round(time.process_time() - client0, 1),
                                  "server_peak_rss_mib": stats["peak_rss_mib"]}
            print(mode, json.dumps(out["modes"][mode]), flush=True)
    finally:
        out["server_exit"] = server.stop()
    if args.updates:
        la = load()
        out["hot_reload"] = {**hot_reload(args, args.work, docs, texts[:args.reload_queries]), "load_before": la,
                             "load_after": load()}
        print("hot reload", json.dumps({k: v for k, v in out["hot_reload"].items() if k != "updates"}), flush=True)
    busy = max(max(m["load_before"][0], m["load_after"][0]) for m in out["modes"].values()) if out["modes"] else 0
    out["machine_busy"] = busy > out["machine"]["cores"]
    out["note"] = (f"1-minute load average up to {busy:.1f} on {out['machine']['cores']} cores during the runs "
                   "(the load test's own client and server included; other engineers' jobs share the machine)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.out}")


def _stack() -> dict:
    """The versions of the server's parts; uvicorn runs uvloop and httptools when they are installed."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("fastapi", "starlette", "uvicorn", "uvloop", "httptools", "mcp", "onnxruntime", "hnswlib", "bm25s"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _counts(p: Path) -> dict:
    from rag_cli import Project

    st = Project.open(p).status().to_dict()
    return {"chunks": st["chunks"], "vectors": st["vectors"]}


if __name__ == "__main__":
    main()
