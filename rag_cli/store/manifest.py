"""manifest.json: per stage (or output), its parameters, input fingerprints,
outputs, row counts, model fingerprint, tool version and time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.version import __version__


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest ({} when there is none). Raises BadInput naming the file if it is not JSON."""
    if not Path(path).exists():
        return {}
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc}); delete it to start over") from exc


def record(path: Path, stage: str, entry: dict[str, Any]) -> None:
    """Write one stage's `entry` into the manifest at `path` (atomically),
    adding `tool_version` and `time` (ISO 8601, UTC) unless given.

    Readers record too (`rag search --save`) without the project lock, so the
    read-modify-write holds its own lock (`.manifest.json.lock`): no entry is
    lost to a concurrent record, and the temporary files of a process killed
    while writing the manifest are removed here, where none can be in use."""
    from filelock import FileLock

    path = Path(path)
    with FileLock(str(path.with_name(f".{path.name}.lock"))):
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        manifest = read_manifest(path)
        entry = dict(entry)
        entry.setdefault("tool_version", __version__)
        entry.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        manifest[stage] = entry
        atomic.write_json(path, manifest)
