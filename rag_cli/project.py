"""The project folder: paths, `rag.toml` config, `manifest.json`, the lock.

Layout (see DESIGN.md)::

    .rag/
      rag.toml  manifest.json  docs.parquet  chunks.parquet
      parents.parquet (parent-child only)
      embeddings.parquet  index/  runs/  answers/  eval/

`rag.toml` is the config actually used: a stage reads it, applies the flags
given on the command line (checked first, see `check_setting`), and writes
the merged values back once it has succeeded, so a later stage (say
`search`) uses the same embedder the index was built with.
"""

from __future__ import annotations

import copy
import hashlib
import math
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
        "threads": 0,  # CPU cores for the models (that many batches at once); 0 = all cores
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


#: Flags that set a config key, where the flag is not `--` + the key with `-` for `_`.
CONFIG_FLAGS: dict[tuple[str, str], str] = {
    ("model", "embedder"): "--model",
    ("model", "reranker"): "--model",
    ("index", "hnsw_ef_construction"): "--ef-construction",
    ("index", "hnsw_ef"): "--ef",
    ("index", "bm25_k1"): "--k1",
    ("index", "bm25_b"): "--b",
    ("search", "k"): "-k",
    ("ask", "k"): "-k",
}

#: Allowed values: (section, key) -> (lowest, highest) (None = unbounded, ends
#: included) or a tuple of choices. The chunk keys are checked, with the other
#: chunk flags, by `rag_cli.chunking.units.validate`.
#: - hnsw_m >= 2: hnswlib's level multiplier is 1/ln(M) (Malkov & Yashunin 2018, HNSW).
#: - bm25_k1 >= 0, 0 <= bm25_b <= 1 (Robertson & Zaragoza 2009, "The Probabilistic
#:   Relevance Framework: BM25 and Beyond"; b is a share of length normalisation).
#: - rrf_k >= 0: RRF score 1/(k + rank), rank from 1 (Cormack, Clarke & Büttcher 2009; k = 60).
#: - min_score, strong_score: bi-encoder cosines, in [-1, 1]; min_coverage: a share, in [0, 1].
CONFIG_LIMITS: dict[tuple[str, str], tuple] = {
    ("model", "precision"): ("int8", "fp32"),
    ("model", "threads"): (0, None),
    ("index", "hnsw_m"): (2, None),
    ("index", "hnsw_ef_construction"): (1, None),
    ("index", "hnsw_ef"): (1, None),
    ("index", "bm25_k1"): (0, None),
    ("index", "bm25_b"): (0, 1),
    ("search", "k"): (1, None),
    ("search", "rrf_k"): (0, None),
    ("search", "candidates"): (1, None),
    ("ask", "k"): (1, None),
    ("ask", "min_score"): (-1, 1),
    ("ask", "strong_score"): (-1, 1),
    ("ask", "min_coverage"): (0, 1),
    ("ask", "max_sentences"): (1, None),
}


def config_flag(section: str, key: str) -> str:
    """The command-line flag of a config key (`index.bm25_k1` -> `--k1`)."""
    return CONFIG_FLAGS.get((section, key), "--" + key.replace("_", "-"))


def limit_problem(value: Any, limits: tuple) -> str | None:
    """What is wrong with `value` under `limits` ((lowest, highest), None =
    unbounded, or a tuple of str choices), e.g. "must be ≥ 1"; None if it is
    allowed. Numbers must be finite."""
    if limits and isinstance(limits[0], str):
        return None if value in limits else f"must be one of {', '.join(limits)}"
    low, high = limits
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if low is not None and high is not None and not low <= value <= high:
        return f"must be from {low} to {high}"
    if low is not None and value < low:
        return f"must be ≥ {low}"
    if high is not None and value > high:
        return f"must be ≤ {high}"
    return None


def check_flag(flag: str, value: Any, limits: tuple) -> None:
    """Raise BadInput `FLAG VALUE: must be ...` unless `value` is within `limits` (see `limit_problem`)."""
    problem = limit_problem(value, limits)
    if problem:
        raise BadInput(f"{flag} {value}: {problem}")


def check_setting(section: str, key: str, value: Any, source: str | None = None) -> None:
    """Check one config value's type (that of its DEFAULT_CONFIG value; an int
    is fine for a float) and range (CONFIG_LIMITS).

    `source` is the rag.toml path the value comes from, None for a flag.
    Raises BadInput naming the flag and the config key (and the file).
    """
    default = DEFAULT_CONFIG[section][key]
    flag = config_flag(section, key)
    where = f"{source}: [{section}] {key} = {value!r}" if source else f"{flag} {value!r} (config {section}.{key})"
    want = (int, float) if isinstance(default, float) else type(default)
    if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, want):
        raise BadInput(f"{where} should be a {type(default).__name__} like {default!r}")
    problem = limit_problem(value, CONFIG_LIMITS.get((section, key), (None, None)))
    if problem:
        raise BadInput(f"{where}: {problem}" + (f" (flag {flag})" if source else ""))


def check_name(name: str | None, flag: str = "--name") -> None:
    """Raise BadInput unless `name` (None = not given) is a plain file name
    stem: not empty, not `.` or `..`, no path separator, no NUL; output names
    stay inside the project's runs/, answers/ and eval/ folders."""
    if name is None:
        return
    seps = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if not name.strip() or name in (".", "..") or any(c in name for c in seps | {"\0"}):
        raise BadInput(f"{flag} {name!r}: give a plain name without path separators (not '.' or '..'), "
                       "e.g. --name bm25-test; use -o/--output to write elsewhere")


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
        """runs/NAME.parquet (or .trec); BadInput if NAME is not a plain name (`check_name`)."""
        check_name(name)
        return self.root / "runs" / (f"{name}.parquet" if fmt == "parquet" else f"{name}.trec")

    def answers_path(self, name: str) -> Path:
        """answers/NAME.parquet; BadInput if NAME is not a plain name (`check_name`)."""
        check_name(name)
        return self.root / "answers" / f"{name}.parquet"

    def eval_path(self, name: str) -> Path:
        """eval/NAME.json; BadInput if NAME is not a plain name (`check_name`)."""
        check_name(name)
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
                check_setting(section, key, value, source=str(self.config_path))
                config[section][key] = value
        return config

    def config(self, section: str, overrides: dict[str, Any] | None = None, save: bool = False) -> dict[str, Any]:
        """One section of the config with `overrides` (flags; None = not given) applied.

        Every override is checked first (`check_setting`; BadInput names the
        flag and the key). When `save` (call it once the command has
        succeeded) and a flag changed a value, or there is no rag.toml yet,
        `rag.toml` is rewritten so that it stays the config actually used.
        """
        config = self.load_config()
        changed = False
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            check_setting(section, key, value)
            if config[section].get(key) != value:
                config[section][key] = value
                changed = True
        if save and (changed or not self.config_path.exists()):
            self.save_config(config)
        return dict(config[section])

    def require_exists(self) -> None:
        """Raise BadInput unless the project folder exists (for stages that read a project)."""
        if not self.root.is_dir():
            raise BadInput(f"project folder {self.root} does not exist: run `rag chunk` first, "
                           "or choose another with -p/--project or RAG_PROJECT")

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
