"""Helpers shared by the bench scripts (run as `python bench/NAME.py`, so
`from _common import ...` finds this file)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def machine() -> dict:
    """{"cpu": model name, "avx512": any avx512* flag, "avx2": bool, "python": version}, from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                if line.startswith("model name")), platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"cpu": cpu, "avx512": any(f.startswith("avx512") for f in flags), "avx2": "avx2" in flags,
            "python": platform.python_version()}


def commit(short: bool = False) -> str:
    """The checkout's HEAD commit (of the repository holding this file)."""
    cmd = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()
