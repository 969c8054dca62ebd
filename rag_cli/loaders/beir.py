"""BEIR corpus reader (`corpus.jsonl` or `corpus.jsonl.gz`).

Each line is `{"_id": str, "title": str, "text": str, "metadata": {...}?}`.
The document text is `title + "\\n\\n" + text` when the title is non-empty
(both normalised with `normalize_text`), else just the text. So offsets in
chunks are offsets into that combined string; the record's own `text` starts at
`metadata["body_start"]` (`len(title) + 2`, or 0 without a title).
`sha256` is the hash of the record's JSON line bytes (without the line ending);
`path` is the corpus file; `mtime` the corpus file's mtime.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from typing import Iterator

from ..errors import BadInput
from .document import Document, Skipped
from .normalize import normalize_text

__all__ = ["read_beir_corpus", "is_beir_path"]


def is_beir_path(path: str) -> bool:
    """True for `*.jsonl` and `*.jsonl.gz` files."""
    p = path.lower()
    return p.endswith(".jsonl") or p.endswith(".jsonl.gz")


def read_beir_corpus(path: str) -> tuple[list[Document], list[Skipped]]:
    """Read a BEIR corpus file; return `(documents, skipped)` in file order.

    Raises `BadInput` naming the file and line for invalid JSON, a record that
    is not an object, a missing/empty `_id`, or a duplicate `_id`. Records whose
    title and text are both empty are skipped with a reason.
    """
    docs: list[Document] = []
    skipped: list[Skipped] = []
    for item in iter_beir_corpus(path):
        (skipped if isinstance(item, Skipped) else docs).append(item)
    return docs, skipped


def iter_beir_corpus(path: str) -> Iterator[Document | Skipped]:
    """`read_beir_corpus` record by record: yields each `Document`, or the
    `Skipped` of an empty record, in file order, holding only the ids seen
    (same errors, raised when the bad line is reached)."""
    mtime = os.stat(path).st_mtime
    opener = gzip.open if path.lower().endswith(".gz") else open
    seen: set[str] = set()
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                line = raw.rstrip(b"\r\n")
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise BadInput(f"{path}: line {lineno} is not valid JSON ({exc}); a BEIR corpus has one "
                                   '{"_id": ..., "title": ..., "text": ...} object per line') from None
                if not isinstance(rec, dict):
                    raise BadInput(f"{path}: line {lineno} is not a JSON object; want "
                                   '{"_id": ..., "title": ..., "text": ...}')
                doc_id = rec.get("_id")
                if doc_id is None or str(doc_id) == "":
                    raise BadInput(f'{path}: line {lineno} has no "_id"; every BEIR corpus record needs a string "_id"')
                doc_id = str(doc_id)
                if doc_id in seen:
                    raise BadInput(f'{path}: line {lineno} repeats "_id" {doc_id!r}; ids must be unique')
                seen.add(doc_id)
                title = normalize_text(str(rec.get("title") or "")).strip()
                body = normalize_text(str(rec.get("text") or ""))
                if not title and not body.strip():
                    yield Skipped(f"{path}:{lineno}", f"record {doc_id!r} has an empty title and text")
                    continue
                text = f"{title}\n\n{body}" if title else body
                meta = dict(rec["metadata"]) if isinstance(rec.get("metadata"), dict) else {}
                meta["body_start"] = len(title) + 2 if title else 0
                yield Document(
                    doc_id=doc_id, path=path, sha256=hashlib.sha256(line).hexdigest(), mtime=mtime,
                    n_chars=len(text), title=title, text=text, metadata=meta, fmt="beir", encoding="utf-8",
                )
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot be read as a BEIR corpus ({exc}); want UTF-8 JSONL, optionally gzipped") from None
