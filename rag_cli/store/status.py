"""What `rag status` reports: the project's files, index generations and stale stages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_cli.hashing import sha256_file
from rag_cli.store.index_folder import current_generation, generation_info

if TYPE_CHECKING:
    from rag_cli.project import Project


def _rows(path: Path) -> int | None:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # missing or unreadable: reported as None
        return None


def _fingerprint(path: Path) -> str | None:
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).schema_arrow.metadata or {}
    except Exception:
        return None
    value = meta.get(b"model_fingerprint")
    return value.decode() if value else None


def disk_use(root: Path) -> dict[str, int]:
    """Bytes on disk under each top-level entry of the project folder."""
    out = {}
    for p in sorted(Path(root).iterdir()):
        if p.is_dir():
            out[p.name] = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        else:
            out[p.name] = p.stat().st_size
    return out


def stale_stages(project: "Project") -> list[dict[str, str]]:
    """Stages whose output is older than their input: [{stage, why, command}].

    chunk: a document file in docs.parquet is gone or has another mtime
    (new files in the sources are only seen by `rag update`); embed:
    chunks.parquet differs from the one embedded; index: chunks.parquet or
    embeddings.parquet differs from the ones of the index's manifest entry.
    """
    import pyarrow.parquet as pq

    manifest = project.manifest()
    refresh = "rag update" if project.config.sources.paths else None
    out = []
    if project.docs_path.exists():
        try:
            docs = pq.read_table(project.docs_path, columns=["path", "mtime"]).to_pylist()
        except Exception:
            docs = []
        for d in docs:
            try:
                changed = os.stat(d["path"]).st_mtime != d["mtime"]
            except OSError:
                changed = True
            if changed:
                out.append({"stage": "chunk", "why": f"{d['path']} changed or is gone",
                            "command": refresh or "rag chunk SRC..."})
                break
    sha = {name: sha256_file(p) for name, p in (("chunks.parquet", project.chunks_path),
                                                ("embeddings.parquet", project.embeddings_path)) if p.exists()}
    if "chunks.parquet" in sha and manifest.get("embed", {}).get("inputs", {}).get("chunks.parquet") != sha[
            "chunks.parquet"]:
        out.append({"stage": "embed", "why": "chunks.parquet changed since it was embedded",
                    "command": refresh or "rag embed"})
    if sha and current_generation(project.index_dir) is not None:
        inputs = manifest.get("index", {}).get("inputs", {})
        if any(inputs.get(k) != v for k, v in sha.items()):
            out.append({"stage": "index", "why": "chunks.parquet or embeddings.parquet changed since the "
                                                 "current generation was built", "command": refresh or "rag index"})
    return out


def project_status(project: "Project", verify: bool = False) -> dict[str, Any]:
    """{documents, chunks, vectors (row counts or None), generations
    (`generation_info`), current (name or None), model_fingerprints
    {embeddings, index}, disk_bytes {entry: bytes}, stale [{stage, why, command}],
    sources [paths]}. With `verify`, every generation's files are hashed
    against its files.json and each generation gets `verified`: None when
    intact, else the problem (the message naming the file)."""
    from rag_cli.errors import BadInput
    from rag_cli.store.index_folder import verify_generation

    gens = generation_info(project.index_dir)
    for g in gens if verify else ():
        try:
            verify_generation(project.index_dir / g["name"], full=True)
            g["verified"] = None
        except BadInput as exc:
            g["verified"] = str(exc)
    cur = current_generation(project.index_dir)
    current = next((g for g in gens if g["current"]), None)
    return {
        "project": str(project.root),
        "documents": _rows(project.docs_path),
        "chunks": _rows(project.chunks_path),
        "vectors": _rows(project.embeddings_path),
        "generations": gens,
        "current": None if cur is None else cur.name,
        "model_fingerprints": {"embeddings": _fingerprint(project.embeddings_path),
                               "index": current["model_fingerprint"] if current else None},
        "disk_bytes": disk_use(project.root),
        "stale": stale_stages(project),
        "sources": list(project.config.sources.paths),
    }
