"""The project folder: paths, `rag.toml` config, `manifest.json`, the lock.

Layout (see DESIGN.md)::

    .rag/
      rag.toml  manifest.json  docs.parquet  chunks.parquet
      parents.parquet (parent-child only)
      embeddings.parquet  index/  runs/  answers/  eval/

`rag.toml` is the config actually used: a stage reads it, applies the flags
given on the command line, and writes the merged values back, so a later
stage (say `search`) uses the same embedder the index was built with.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
from filelock import FileLock, Timeout

from rag_cli import __version__, atomic
from rag_cli.errors import BadInput, WorkFailed

DEFAULT_PROJECT = ".rag"

#: Every key here is also a flag of the stage that uses it.
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "model": {
        "embedder": "multilingual-e5-small",  # a default name or a model folder
        "precision": "int8",  # int8 | fp32 (which ONNX file of a default model)
        "reranker": "",  # a cross-encoder model folder; empty = none configured
        "threads": 0,  # onnxruntime intra-op threads; 0 = all cores
        "provider": "cpu",  # onnxruntime execution provider: cpu | cuda | coreml (if the build has it)
    },
    "chunk": {
        "strategy": "recursive",
        "size": 256,
        "overlap": 32,
        "unit": "tokens",  # tokens (of the embedder's tokenizer) | chars
        "context_sentences": 2,  # sentence: sentences of context on each side, for ask
        "parent_size": 512,  # parent-child: parent size in `unit` (> size, the child size)
        "breakpoint_percentile": 95.0,  # semantic: break above this percentile of sentence distances
    },
    "index": {
        "hnsw_m": 32,
        "hnsw_ef_construction": 200,
        "hnsw_ef": 128,
        "bm25_k1": 1.2,
        "bm25_b": 0.75,
        "bm25_method": "lucene",
    },
    "search": {
        "mode": "hybrid",  # dense | sparse | hybrid
        "k": 10,
        "rrf_k": 60,
        "candidates": 100,  # per retriever, before fusion
    },
    "ask": {
        "k": 5,
        "generator": "extractive",
        # Refuse when the best evidence's bi-encoder cosine is below min_score,
        # or when the evidence holds less than min_coverage of the question's
        # idf-weighted terms and the cosine is below strong_score. Cosines are
        # per model (e5 sits in about 0.7-1.0), so these are too.
        "min_score": 0.82,
        "min_coverage": 0.3,
        "strong_score": 0.9,
        "max_sentences": 3,
    },
}


def project_dir(option: str | os.PathLike | None = None) -> Path:
    """The project folder: `option`, else `$RAG_PROJECT`, else `./.rag`."""
    return Path(option or os.environ.get("RAG_PROJECT") or DEFAULT_PROJECT)


def file_stem(path: str | os.PathLike) -> str:
    """A file's name up to its first dot (`queries.jsonl.gz` -> `queries`), for default output names."""
    return Path(path).name.split(".")[0]


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_size):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of `text`."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Project:
    """A project folder. Paths are properties; nothing is created until written."""

    root: Path

    @classmethod
    def open(cls, option: str | os.PathLike | None = None) -> "Project":
        return cls(project_dir(option))

    # -- paths ---------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "rag.toml"

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def docs_path(self) -> Path:
        return self.root / "docs.parquet"

    @property
    def chunks_path(self) -> Path:
        return self.root / "chunks.parquet"

    @property
    def parents_path(self) -> Path:
        return self.root / "parents.parquet"

    @property
    def embeddings_path(self) -> Path:
        return self.root / "embeddings.parquet"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    def run_path(self, name: str, fmt: str = "parquet") -> Path:
        return self.root / "runs" / (f"{name}.parquet" if fmt == "parquet" else f"{name}.trec")

    def answers_path(self, name: str) -> Path:
        return self.root / "answers" / f"{name}.parquet"

    def eval_path(self, name: str) -> Path:
        return self.root / "eval" / f"{name}.json"

    def require(self, path: Path, stage: str) -> Path:
        """Return `path` or raise BadInput saying which stage writes it."""
        if not path.exists():
            raise BadInput(
                f"{path} does not exist: run `rag {stage}` first "
                f"(project folder {self.root}; choose another with -p/--project or RAG_PROJECT)"
            )
        return path

    # -- config --------------------------------------------------------------
    def load_config(self) -> dict[str, dict[str, Any]]:
        """Defaults overlaid with `rag.toml` if it exists.

        Raises BadInput if the file is not valid TOML or has an unknown key.
        """
        config = copy.deepcopy(DEFAULT_CONFIG)
        if not self.config_path.exists():
            return config
        try:
            user = tomllib.loads(self.config_path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{self.config_path}: not valid TOML ({exc})") from exc
        for section, values in user.items():
            if section not in config or not isinstance(values, dict):
                raise BadInput(
                    f"{self.config_path}: unknown section [{section}]; known: {', '.join(config)}"
                )
            for key, value in values.items():
                if key not in config[section]:
                    raise BadInput(
                        f"{self.config_path}: unknown key {key!r} in [{section}]; "
                        f"known: {', '.join(config[section])}"
                    )
                default = DEFAULT_CONFIG[section][key]
                want = (int, float) if isinstance(default, float) else type(default)
                if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, want):
                    raise BadInput(
                        f"{self.config_path}: [{section}] {key} = {value!r} should be a "
                        f"{type(default).__name__} like {default!r}"
                    )
                config[section][key] = value
        return config

    def config(self, section: str, overrides: dict[str, Any] | None = None, save: bool = True) -> dict[str, Any]:
        """One section of the config with `overrides` (flags; None = not given) applied.

        When `save` and a flag changed a value, `rag.toml` is rewritten so that
        it stays the config actually used.
        """
        config = self.load_config()
        changed = False
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if config[section].get(key) != value:
                config[section][key] = value
                changed = True
        if save and (changed or not self.config_path.exists()):
            self.save_config(config)
        return dict(config[section])

    def save_config(self, config: dict[str, dict[str, Any]]) -> None:
        atomic.write_text(self.config_path, tomli_w.dumps(config))

    # -- manifest ------------------------------------------------------------
    def load_manifest(self) -> dict[str, Any]:
        import json

        if not self.manifest_path.exists():
            return {}
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise BadInput(f"{self.manifest_path}: not valid JSON ({exc}); delete it to start over") from exc

    def record(self, stage: str, **entry: Any) -> None:
        """Write one stage's entry (params, inputs, outputs, rows, ...) into manifest.json.

        Adds `tool_version` and `time` (ISO 8601, UTC).
        """
        manifest = self.load_manifest()
        entry.setdefault("tool_version", __version__)
        entry.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        manifest[stage] = entry
        atomic.write_json(self.manifest_path, manifest)

    # -- lock ----------------------------------------------------------------
    def lock(self, timeout: float = 10.0) -> FileLock:
        """A lock on the project folder, held by stages that write into it.

        Raises WorkFailed (exit 1) on entry if another `rag` process holds it
        for longer than `timeout` seconds.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        return _ProjectLock(str(self.root / ".lock"), timeout=timeout)


class _ProjectLock(FileLock):
    def __enter__(self):  # type: ignore[override]
        try:
            return super().__enter__()
        except Timeout as exc:
            raise WorkFailed(
                f"another rag process is writing to {Path(self.lock_file).parent}; "
                "wait for it to finish and try again"
            ) from exc
