"""How the results of the building commands (chunk, embed, index, build,
update, watch, rollback, status) are printed. Each printer takes the
result's dict (`common.as_dict`), the shape `--json` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_cli.cli.common import count, note, warn
from rag_cli.safe_text import one_line


def size(n: int) -> str:
    """Bytes as `12.3 MB` (or `4.5 kB` below 1 MB); decimal units."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def embedded(summary: dict) -> str:
    """`N chunks embedded`, with the distinct texts (what the progress bar counts) when fewer, and where
    (`on Ray at ADDRESS: 2 actors x 1 thread`) with --ray."""
    n, texts = summary["n_embedded"], summary.get("n_texts_embedded", summary["n_embedded"])
    return (f"{count(n, 'chunk')} embedded" + (f" ({count(texts, 'distinct text')})" if texts != n else "")
            + on_ray(summary))


def on_ray(summary: dict) -> str:
    """` on Ray at ADDRESS (2 actors x 1 thread)` for an embed summary of a --ray run that used Ray, else ""."""
    ray = summary.get("ray")
    if not ray or not ray["actors"]:
        return ""
    return (f" on Ray at {ray['address']} ({count(ray['actors'], 'actor')} x {count(ray['threads'], 'thread')}"
            + (f", planned again {ray['retries']}x after lost actors" if ray["retries"] else "") + ")")


def update_line(out: dict) -> str:
    """One line summing up an `update` result (documents, chunks, chunks embedded, generation)."""
    c, e, i = out["chunk"], out["embed"], out["index"]
    return (f"documents: {c['docs_added']} added, {c['docs_changed']} changed, {c['docs_removed']} removed, "
            f"{c['docs_unchanged']} unchanged; chunks: {c['chunks_added']} added, {c['chunks_removed']} removed; "
            f"{embedded(e)}; "
            + (f"index unchanged ({i['generation']})" if i["unchanged"] else
               f"index {i['generation']}: {i['vectors_added']} vectors added, {i['vectors_deleted']} deleted"))


def skipped(files: list[dict]) -> None:
    """The files a chunking pass skipped, and why (the first 20)."""
    for s in files[:20]:
        note(f"skipped {one_line(s['path'])}: {s['reason']}")
    if len(files) > 20:
        note(f"... and {len(files) - 20} more skipped")


def chunked(summary: dict, params: str, chunks: Path, parents: Path) -> None:
    """`rag chunk`: documents -> chunks (`params`: strategy, size, overlap), then oversized chunks,
    warnings and skipped files."""
    more = f" (+ {summary['n_parents']} parents -> {parents})" if summary["n_parents"] else ""
    note(f"{summary['n_docs']} documents -> {summary['n_chunks']} chunks{more} ({params}) "
         f"in {summary['seconds']:.1f}s -> {chunks}")
    if summary["n_oversized"]:
        note(f"{summary['n_oversized']} chunk(s) exceed the size: each is one unbreakable unit")
    for message in summary["warnings"]:
        warn(message)
    skipped(summary["skipped"])


def embedded_summary(summary: dict, path: Path) -> None:
    """`rag embed`: the model's warnings, what was embedded and reused, truncated chunks."""
    for message in summary["model_warnings"] + (summary.get("cache_repaired") or []):
        warn(message)
    if summary["rebuilt_unreadable"]:
        warn(f"the old embeddings could not be read and were rebuilt: {summary['rebuilt_unreadable']}")
    note(f"{embedded(summary)}, {summary['n_reused']} reused, in {summary['seconds']:.1f}s "
         f"with {summary['model']} ({summary['fingerprint']}) -> {path}")
    if summary["truncation"]:
        warn(f"{summary['truncation']}: use a smaller `rag chunk --size`")


def indexed(summary: dict, index_dir: Path) -> None:
    note(f"indexed {summary['n_chunks']} chunks (dim {summary['dim']}) in {summary['seconds']:.1f}s "
         f"-> {index_dir / summary['generation']}")


def built(out: dict, index_dir: Path) -> None:
    c, e, i = out["chunk"], out["embed"], out["index"]
    for message in e.get("cache_repaired") or []:
        warn(message)
    note(f"{c['n_docs']} documents -> {c['n_chunks']} chunks; {e['n_embedded']} embedded{on_ray(e)}, "
         f"{e['n_reused']} reused; index {i['generation']} ({i['n_chunks']} chunks) -> {index_dir}")
    skipped(c.get("skipped", []))


def updated(out: dict) -> None:
    c, e, i = out["chunk"], out["embed"], out["index"]
    for message in e.get("cache_repaired") or []:
        warn(message)
    if out["full_rechunk"]:
        warn(f"every document was rechunked: {out['full_rechunk']}")
    if i["full"]:
        warn(f"the index was rebuilt in full: {i['full']}")
    note(update_line(out) + f" in {c.get('seconds', 0) + e['seconds'] + i['seconds']:.1f}s")
    skipped(c.get("skipped", []))


def without_model(summary: dict) -> dict:
    """A summary without the model folder's name, as `--json` prints it."""
    return {k: v for k, v in summary.items() if k != "model"}


def rolled_back(out: dict) -> None:
    note(f"index rolled back: {out['from']} -> {out['to']}")


def status_failures(st: dict) -> list[str]:
    """The damaged generations (with --verify) and files of a status report."""
    failed = [g["verified"] for g in st["generations"] if g.get("verified")]
    return failed + [d for d in st["damaged"] if d not in failed]


def status_lines(st: dict, *, verify: bool, quiet: bool) -> list[str]:
    """`rag status`: the report (unless `quiet`), then the stale stages, the damaged files and the verdict."""
    lines = [] if quiet else report_lines(st)
    for s in st["stale"]:
        lines.append(f"stale: {s['stage']} ({s['why']}): run `{s['command']}`")
        for kind, paths in s.get("files", {}).items():
            lines += [f"  {kind}: {path}" for path in paths]
    lines += [f"damaged: {d}" for d in st["damaged"] if not verify]
    if not st["stale"] and not st["damaged"] and not quiet:
        lines.append("up to date")
    if verify and not quiet:
        n_ok = sum(1 for g in st["generations"] if not g["verified"])
        lines.append(f"verified {n_ok} of {len(st['generations'])} generations")
    return lines


def dense_line(params: dict) -> str:
    """`hnswlib`, `faiss ivf-pq`, `milvus hnsw (alias A at URI)`: a generation's dense backend."""
    from rag_cli.index.backends import describe

    return one_line(describe(params, where=True))


def report_lines(st: dict[str, Any]) -> list[str]:
    """The report part of `rag status` (counts, generations, models, disk), one line each."""
    def counted(n, what):
        return f"no {what}" if n is None else f"{n} {what}"

    lines = [f"project {st['project']}: {counted(st['documents'], 'documents')}, "
             f"{counted(st['chunks'], 'chunks')}, {counted(st['vectors'], 'vectors')}"]
    if not st["generations"]:
        lines.append("index: none built yet")
    for g in st["generations"]:
        mark = "*" if g["current"] else " "
        if g["damaged"] and g["n_chunks"] is None:
            lines.append(f"{mark} {g['name']}  damaged")
        else:
            lines.append(f"{mark} {g['name']}  {g['time']}  {g['command']:<8} {g['n_chunks']} chunks  "
                         f"{size(g['bytes'] or 0)}  {dense_line(g.get('dense') or {})}"
                         + ("  damaged" if g["damaged"] else ""))
    fp = st["model_fingerprints"]
    short = {k: v[:12] if v else "-" for k, v in fp.items()}
    lines.append(f"embedder fingerprint: {short['embeddings']} (embeddings and index)" if fp["embeddings"] == fp["index"]
                 else f"embedder fingerprint: embeddings {short['embeddings']}, index {short['index']}")
    lines.append(f"disk: {size(sum(st['disk_bytes'].values()))}")
    if st["sources"]:
        lines.append(f"sources: {', '.join(st['sources'])}")
    return lines
