"""What `rag status` reports: the project's files, index generations and stale stages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_cli.errors import BadInput
from rag_cli.hashing import sha256_file
from rag_cli.store.index_folder import GenerationVanished, current_generation, generation_info

if TYPE_CHECKING:
    from rag_cli.store.folder import ProjectFolder


def _rows(path: Path) -> tuple[int | None, str | None]:
    """(row count, None) for a readable Parquet file, (None, None) for a
    missing one, (None, the problem naming the file) for an unreadable one."""
    import pyarrow.parquet as pq

    if not path.exists():
        return None, None
    try:
        return pq.ParquetFile(path).metadata.num_rows, None
    except Exception as exc:  # pyarrow raises several kinds for a damaged file
        return None, f"{path} cannot be read as Parquet ({type(exc).__name__}: {exc})"


def _fingerprint(path: Path) -> str | None:
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).schema_arrow.metadata or {}
    except Exception:
        return None
    value = meta.get(b"model_fingerprint")
    return value.decode() if value else None


def _size(path: Path) -> int:
    """Bytes of one file; 0 if a writer removed it since it was listed (the
    lock's holder file, a replaced generation: status reads while others write)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def disk_use(root: Path) -> dict[str, int]:
    """Bytes on disk under each top-level entry of the project folder; a
    file or folder that disappears while it is measured counts 0."""
    out = {}
    for p in sorted(Path(root).iterdir()):
        try:
            out[p.name] = (sum(_size(f) for f in p.rglob("*") if f.is_file()) if p.is_dir() else _size(p))
        except FileNotFoundError:  # a folder removed while rglob walked it
            out[p.name] = 0
    return out


def _changed_sources(project: "ProjectFolder") -> dict[str, list[str]]:
    """Source files that differ from docs.parquet: {"changed": [...],
    "removed": [...], "added": [...]} (paths). Changed: another mtime;
    removed: gone from disk; added: a file of the remembered sources
    (`[sources]`, written by `rag build`) that docs.parquet does not list
    and the last chunking did not skip."""
    import pyarrow.parquet as pq

    from rag_cli.loaders.sources import source_files

    try:
        docs = pq.read_table(project.docs_path, columns=["path", "mtime"]).to_pylist()
    except Exception:  # reported as damaged by the caller
        return {}
    mtimes = {d["path"]: d["mtime"] for d in docs}
    out: dict[str, list[str]] = {"changed": [], "removed": [], "added": []}
    for path, mtime in mtimes.items():
        try:
            if os.stat(path).st_mtime != mtime:
                out["changed"].append(path)
        except OSError:
            out["removed"].append(path)
    src = project.config.sources
    if src.paths:
        skipped = {s.get("path") for s in project.manifest().get("chunk", {}).get("skipped", [])}
        out["added"] = [f for f in dict.fromkeys(source_files(list(src.paths), src.format, exclude=[project.root]))
                        if f not in mtimes and f not in skipped]
    return {k: v for k, v in out.items() if v}


def stale_stages(project: "ProjectFolder") -> list[dict[str, Any]]:
    """Stages whose output is missing or older than their input:
    [{stage, why, command}], the chunk entry also with `files` (see
    `_changed_sources`).

    chunk: nothing chunked yet, or source files changed, removed or added;
    embed: chunks.parquet not embedded yet, or changed since it was embedded;
    index: never built, the current generation is not the last one built
    (after `rag rollback`), or chunks.parquet / embeddings.parquet changed
    since the current generation was built. Damaged files are not stages:
    see `project_status`'s `damaged`.
    """
    manifest = project.manifest()
    refresh = "rag update" if project.config.sources.paths else None
    out: list[dict[str, Any]] = []

    def stale(stage: str, why: str, command: str, **extra: Any) -> None:
        out.append({"stage": stage, "why": why, "command": refresh or command, **extra})

    has_chunks = project.docs_path.exists() and project.chunks_path.exists()
    if not has_chunks:
        stale("chunk", "nothing is chunked yet", "rag build SRC... (or rag chunk SRC...)")
    else:
        files = _changed_sources(project)
        if files:
            why = ", ".join(f"{len(v)} {k}" for k, v in files.items())
            stale("chunk", f"source files differ from docs.parquet: {why}", "rag chunk SRC...", files=files)
    sha = {name: sha256_file(p) for name, p in (("chunks.parquet", project.chunks_path),
                                                ("embeddings.parquet", project.embeddings_path)) if p.exists()}
    embedded = manifest.get("embed", {}).get("inputs", {}).get("chunks.parquet")
    if "chunks.parquet" in sha:
        if "embeddings.parquet" not in sha or embedded is None:
            stale("embed", "chunks.parquet is not embedded yet (or the embedding was interrupted)", "rag embed")
        elif embedded != sha["chunks.parquet"]:
            stale("embed", "chunks.parquet changed since it was embedded", "rag embed")
    if not sha:
        return out
    try:
        current = current_generation(project.index_dir)
    except BadInput:  # a damaged CURRENT is reported under `damaged`
        return out
    built = manifest.get("index", {})
    if current is None:
        stale("index", "there is no index yet", "rag index")
    elif built.get("generation") and current != project.index_dir and built["generation"] != current.name:
        from rag_cli.index.backends import serving_notes

        stale("index", f"the current generation {current.name} is not {built['generation']}, the one built from "
                       "the current chunks.parquet and embeddings.parquet, as after `rag rollback`"
                       + serving_notes(project.index_dir, current), "rag index")
    elif not built:
        stale("index", "manifest.json has no record of what the current generation was built from", "rag index")
    elif any(built.get("inputs", {}).get(k) != v for k, v in sha.items()):
        stale("index", "chunks.parquet or embeddings.parquet changed since the current generation was built",
              "rag index")
    return out


def _vector_problems(project: "ProjectFolder", unreadable: bool) -> list[str]:
    """For `--verify`: vectors of embeddings.parquet that search cannot use
    (NaN/inf, zero, or a norm other than 1 from a model that normalises),
    and damaged parts of the vector cache (`check_vector_cache`)."""
    from rag_cli.store.embeddings import (bad_vector_rows, check_vector_cache, describe_bad_vectors, off_unit_rows,
                                          read_embeddings)

    out = []
    unit_folder = None
    if project.embeddings_path.exists() and not unreadable:
        try:
            emb = read_embeddings(project.embeddings_path)
        except BadInput as exc:
            out.append(str(exc))
        else:
            bad = bad_vector_rows(emb.vectors)
            off = off_unit_rows(emb.vectors) if emb.normalized else bad[:0]
            if bad.size:
                out.append(f"{project.embeddings_path} has vectors that cosine search cannot use, "
                           f"{describe_bad_vectors([emb.chunk_ids[i] for i in bad], emb.vectors[bad])}; "
                           "write it again with `rag embed`")
            elif off.size:
                out.append(f"{project.embeddings_path} is damaged: {off.size} vector(s) do not have norm 1 although "
                           f"the model normalises (first: {emb.chunk_ids[off[0]]!r}); write it again with `rag embed`")
            if emb.normalized:
                unit_folder = emb.passage_fingerprint
    cache = project.root / "cache" / "vectors"
    for folder in sorted(cache.iterdir()) if cache.is_dir() else ():
        if folder.is_dir():
            out += check_vector_cache(folder, unit=folder.name == unit_folder)
    return out


def _same_pointer(project: "ProjectFolder", ptr) -> bool:
    """Whether index/CURRENT still holds what `ptr` was read from."""
    try:
        return (project.index_dir / "CURRENT").read_bytes() == ptr.raw
    except OSError:
        return False


def project_status(project: "ProjectFolder", verify: bool = False) -> dict[str, Any]:
    """{project, documents, chunks, vectors (row counts, None when the file
    is missing or damaged), generations (`generation_info`), current (name
    or None), model_fingerprints {embeddings, index}, disk_bytes {entry:
    bytes}, stale [{stage, why, command, files?}] (`stale_stages`), damaged
    [messages naming the file: an unreadable docs/chunks/embeddings.parquet,
    a damaged index/CURRENT, a current generation whose files do not match
    files.json, or whose serving copy is gone (`serving_problem`: a deleted
    Milvus Lite file)], sources [paths]}.
    The current generation is checked as a search checks it when it opens
    it: every size, and the sha256 of every file up to
    VERIFY_SHA256_MAX_BYTES (so a flipped byte in a small file is found
    without `verify`; only bigger files get the size check alone). With
    `verify`, every file of every generation is hashed and each generation
    gets `verified`: None when intact, else the problem."""
    from rag_cli.index.backends import serving_problem
    from rag_cli.store.index_folder import current_pointer, verify_generation

    pointer_problem = None
    try:
        ptr = current_pointer(project.index_dir)
    except BadInput as exc:
        ptr, pointer_problem = None, str(exc)
    gens = generation_info(project.index_dir)
    for g in gens:
        if not (verify or g["current"]):
            continue
        problem = g["damaged"]
        if problem is None:
            try:
                same = ptr is not None and ptr.name == g["name"]  # (CURRENT may have moved since it was read)
                verify_generation(project.index_dir / g["name"], full=verify,
                                  files_sha256=ptr.files_sha256 if same else None)
            except BadInput as exc:
                problem = str(exc)
            except GenerationVanished:  # removed by a writer since it was listed
                problem = None
        g["damaged"] = problem
        if verify:
            g["verified"] = problem
    cur = None if pointer_problem else current_generation(project.index_dir)
    current = next((g for g in gens if g["current"]), None)
    rows = {name: _rows(path) for name, path in (("documents", project.docs_path), ("chunks", project.chunks_path),
                                                 ("vectors", project.embeddings_path))}
    redo = {"documents": "write it again with `rag chunk SRC...` (or `rag build SRC...`)",
            "chunks": "write it again with `rag chunk SRC...` (or `rag build SRC...`)",
            "vectors": "write it again with `rag embed` (texts in the vector cache are not embedded again)"}
    damaged = [f"{problem}; {redo[name]}" for name, (_, problem) in rows.items() if problem]
    if verify:
        damaged += _vector_problems(project, unreadable=rows["vectors"][1] is not None)
    if pointer_problem:
        damaged.append(pointer_problem)
    elif ptr is not None and ptr.name not in {g["name"] for g in gens} and _same_pointer(project, ptr):
        damaged.append(f"{project.index_dir / 'CURRENT'} names {ptr.name}, which is not a complete generation of "
                       "this index (the folder or its files.json is missing); write a new generation with `rag index`")
    if current is not None and current["damaged"]:
        damaged.append(current["damaged"])
    elif current is not None and (served := serving_problem(project.index_dir / current["name"],
                                                              current.get("dense"))):
        damaged.append(served)  # its files are intact, but what serves it is gone (a deleted Milvus Lite file)
    return {
        "project": str(project.root),
        **{name: n for name, (n, _) in rows.items()},
        "generations": gens,
        "current": None if cur is None else cur.name,
        "model_fingerprints": {"embeddings": _fingerprint(project.embeddings_path),
                               "index": current["model_fingerprint"] if current else None},
        "disk_bytes": disk_use(project.root),
        "stale": stale_stages(project),
        "damaged": damaged,
        "sources": list(project.config.sources.paths),
    }
