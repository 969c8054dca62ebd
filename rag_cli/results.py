"""What the pipeline operations of `Project` return: typed results.

Each result is a dataclass with `to_dict()` (what `--json` prints; nested
results become dicts) and, for code written against the dicts these
operations returned before, read access by key (`summary["n_chunks"]`).
Times are seconds (float); byte counts are ints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, Result):
        return value.to_dict()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def optional(default: Any = None) -> Any:
    """A field left out of `to_dict()` while it is None (set by some operations only)."""
    return field(default=default, metadata={"omit_none": True})


class Result:
    """Base of the typed results: `to_dict()`, and read access by key."""

    #: dict key -> field name, where a key is not a Python name (`from`).
    _KEYS: dict[str, str] = {}

    def to_dict(self) -> dict[str, Any]:
        """{key: value} of every field (None optional fields left out), nested results as dicts,
        paths as str and tuples as lists: JSON-ready."""
        names = {v: k for k, v in self._KEYS.items()}
        return {names.get(f.name, f.name): _plain(getattr(self, f.name)) for f in fields(self)  # type: ignore[arg-type]
                if not (f.metadata.get("omit_none") and getattr(self, f.name) is None)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """The result holding `data` (keys as `to_dict` gives them). Raises TypeError for an unknown key."""
        return cls(**{cls._KEYS.get(k, k): v for k, v in data.items()})

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __eq__(self, other: object) -> bool:
        """Equal to a result of the same type with equal fields, or to its `to_dict()`."""
        if isinstance(other, dict):
            return self.to_dict() == other
        return type(other) is type(self) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.to_dict()

    def keys(self):
        return self.to_dict().keys()

    def items(self):
        return self.to_dict().items()


@dataclass(eq=False)
class ChunkSummary(Result):
    """`Project.chunk`: documents and chunks written, chunks longer than the
    embedder's max_length (`n_oversized`, longest `max_tokens`), files
    skipped [{path, reason}], seconds, warnings (messages)."""

    n_docs: int
    n_chunks: int
    n_parents: int
    n_oversized: int
    max_tokens: int | None
    skipped: list
    seconds: float
    warnings: list


@dataclass(eq=False)
class EmbedSummary(Result):
    """`Project.embed`: chunks, how many were embedded and reused, the
    truncated ones [{chunk_id, n_tokens}] (cut to `max_length` tokens), the
    model's fingerprint (sha256) and folder name."""

    n_chunks: int
    n_embedded: int
    n_texts_embedded: int
    n_reused: int
    n_truncated: int
    max_length: int
    rebuilt_unreadable: Any
    truncated: list
    truncation: Any
    seconds: float
    fingerprint: str
    model_warnings: list
    model: str | None = optional()
    cache_repaired: list | None = optional()  # damaged vector cache parts set aside (their texts embedded again)
    ray: dict | None = optional()  # with --ray: the cluster's address, actors, threads per actor, retries


@dataclass(eq=False)
class IndexSummary(Result):
    """`Project.index` (and the index part of `update`): the generation
    written, its chunks and vector dimension; after an update also the
    vectors added and deleted, whether it was rebuilt in `full` (why) or
    `compacted`, and `unchanged` when nothing changed."""

    n_chunks: int
    dim: int
    seconds: float
    fingerprint: str
    generation: str
    vectors_added: int | None = optional()
    vectors_deleted: int | None = optional()
    full: str | None = optional()
    compacted: bool | None = optional()
    unchanged: bool | None = optional()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.unchanged is not None:  # an update always says these, null included
            out.setdefault("full", self.full)
        return out


@dataclass(eq=False)
class BuildSummary(Result):
    """`Project.build`: the chunk, embed and index summaries."""

    chunk: ChunkSummary
    embed: EmbedSummary
    index: IndexSummary


@dataclass(eq=False)
class UpdateSummary(Result):
    """`Project.update`: the chunk counts (docs and chunks added, changed,
    removed, unchanged; files skipped), the embed and index summaries, and
    why everything was rechunked (`full_rechunk`, None when not)."""

    chunk: dict
    embed: EmbedSummary
    index: IndexSummary
    full_rechunk: str | None


@dataclass(eq=False)
class Rollback(Result):
    """`Project.rollback`: the generation made current (`to`) and the one it replaced (`from`)."""

    _KEYS = {"from": "from_"}
    from_: str
    to: str


@dataclass(eq=False)
class Status(Result):
    """`Project.status` (see `rag_cli.stages.status.project_status`)."""

    project: str
    documents: int | None
    chunks: int | None
    vectors: int | None
    generations: list
    current: str | None
    model_fingerprints: dict
    disk_bytes: dict
    stale: list
    damaged: list
    sources: list


@dataclass(eq=False)
class AnswersFile(Result):
    """`Project.ask_queries`: the answers file written, questions answered
    and refused, and questions cut to the bi-encoder's `max_length` tokens."""

    answers: Path
    n: int
    refused: int
    n_queries_truncated: int
    max_length: int | None

    def __fspath__(self) -> str:
        return os.fspath(self.answers)


@dataclass(eq=False, kw_only=True)
class Cuts(Result):
    """What a search or rerank cut to a model's max_length (tokens): the
    queries cut to the bi-encoder's (`n_queries_truncated`, `max_length`),
    the (query, passage) pairs cut to the cross-encoder's
    (`n_pairs_truncated`, `reranker_max_length`), and after a rerank what the
    scores are (`score_scale`, `stages.rerank.SCORE_SCALES`)."""

    n_queries_truncated: int = 0
    max_length: int | None = None
    n_pairs_truncated: int = 0
    reranker_max_length: int | None = None
    score_scale: str | None = None


@dataclass(eq=False)
class SearchResult(Cuts):
    """The hits of one query (`Hit`s: rank, chunk_id, doc_id, score, stage,
    text), the mode used, and what was cut (`Cuts`)."""

    query: str
    mode: str
    hits: list

    def __iter__(self):
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i):
        return self.hits[i] if isinstance(i, int) else super().__getitem__(i)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["hits"] = [h.to_dict() for h in self.hits]
        return out


@dataclass(eq=False)
class RunFile(Cuts):
    """A run written by `search_queries` or `rerank_run`: its `path` (usable
    wherever a path is, `os.fspath(run)`), the mode and depth k, what was
    cut (`Cuts`), and the ids a TREC run holds percent-encoded (`escaped_ids`)."""

    path: Path
    mode: str
    k: int
    escaped_ids: tuple[str, ...] = ()  # ids with whitespace, percent-encoded in a TREC run

    def __fspath__(self) -> str:
        return os.fspath(self.path)
