"""Helpers shared by the bench scripts (run as `python bench/NAME.py`, so
`from _common import ...` finds this file)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def machine() -> dict:
    """{"cpu": model name, "cores": usable cores, "avx512": any avx512* flag, "avx2", "vnni" (avx512_vnni or
    avx_vnni), "amx" (amx_int8): bool, "python": version, "load_average": [1, 5, 15 min] when called},
    from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                if line.startswith("model name")), platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "avx512": any(f.startswith("avx512") for f in flags),
            "avx2": "avx2" in flags, "vnni": bool({"avx512_vnni", "avx_vnni"} & set(flags)),
            "amx": "amx_int8" in flags, "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def commit(short: bool = False) -> str:
    """The checkout's HEAD commit (of the repository holding this file)."""
    cmd = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()


def run_measured(cmd: list[str], *, env: dict | None = None, cwd=None) -> tuple[float, float, str]:
    """Run `cmd` as a child: (wall seconds, the child's own peak RSS in MiB
    from the kernel (os.wait4), its stdout). Raises SystemExit with the end of
    its stderr when it fails. stderr goes to a file, not a pipe: a full pipe
    would block the child."""
    import tempfile
    import time

    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"failed ({code}): {' '.join(map(str, cmd))}\n{err.read()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, out
