"""The project's configuration, `rag.toml`: one dataclass per section.

`rag.toml` is the config actually used. An operation reads it, applies the
options given (the flags of the CLI, the keyword arguments of the Python
API; each checked by `check_setting`), and, for the operations that build
the project (`chunk`, `embed`, `index`, a `rerank` with a new model),
writes the merged values back once it has succeeded, so a later stage (say
`search`) uses the embedder the index was built with.

Every key is also a flag of the stage that uses it (`config_flag`).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rag_cli.errors import BadInput


@dataclass(frozen=True)
class ModelConfig:
    """`[model]`: which models run, and where."""

    embedder: str = "multilingual-e5-small"  # a default name or a model folder
    precision: str = "int8"  # int8 | fp32 (which ONNX file of a default model)
    reranker: str = ""  # a cross-encoder model folder; empty = none configured
    threads: int = 0  # CPU cores for the models (that many batches at once); 0 = all cores
    provider: str = "cpu"  # onnxruntime execution provider: cpu | cuda | coreml (if the build has it)
    on_truncate: str = "warn"  # embed: a chunk longer than the embedder's max_length: warn (named) | error (exit 2)


@dataclass(frozen=True)
class ChunkConfig:
    """`[chunk]`: how documents are split (sizes in `unit`)."""

    strategy: str = "recursive"
    size: int = 256
    overlap: int = 32
    unit: str = "tokens"  # tokens (of the embedder's tokenizer) | chars
    context_sentences: int = 2  # sentence: sentences of context on each side, for ask
    parent_size: int = 512  # parent-child: parent size in `unit` (> size, the child size)
    breakpoint_percentile: float = 95.0  # semantic: break above this percentile of sentence distances


@dataclass(frozen=True)
class IndexConfig:
    """`[index]`: HNSW (M, ef_construction, ef) and BM25 (k1, b, variant) parameters."""

    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef: int = 128
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    bm25_method: str = "lucene"
    keep: int = 2  # old index generations kept besides the current one (for `rag rollback`)


@dataclass(frozen=True)
class SearchConfig:
    """`[search]`: retrieval mode, depth and hybrid fusion (see `rag_cli.index.fusion`)."""

    mode: str = "hybrid"  # dense | sparse | hybrid
    k: int = 10
    rrf_k: int = 60
    candidates: int = 100  # per retriever, before fusion
    fusion: str = "rrf"  # rrf | minmax | zscore (weighted sums of normalised scores)
    dense_weight: float = 0.5  # minmax/zscore: weight of the dense scores (sparse: 1 - this)


@dataclass(frozen=True)
class AskConfig:
    """`[ask]`: evidence depth, generator and the refusal thresholds.

    Refuse when the best evidence's bi-encoder cosine is below `min_score`,
    or when the evidence holds less than `min_coverage` of the question's
    idf-weighted terms and the cosine is below `strong_score`. Cosines are
    per model (e5 sits in about 0.7-1.0), so these are too.

    Entity rule (`rag_cli.generate.gate`): also refuse when no single piece
    of evidence holds `min_entity_coverage` of the question's key terms
    (terms, question words aside, whose idf is at least `key_idf` times the
    largest idf) and the cosine is below `strong_score`; 0 switches it off.
    `entity_scope` says which questions it judges: "zh" those with CJK
    characters (where it was tuned; on English claims it refused many
    answerable ones, docs/answers.md), "all" every question.

    Cross-encoder rule: with `model.reranker` set, refuse when the best
    cross-encoder score (a raw logit, per model) is below `min_rerank_score`;
    0 switches it off. `gate` "off" switches every rule off (the generator
    still reads the evidence and may refuse); `rag eval --tune refusal`
    searches the thresholds on answers recorded that way.
    """

    k: int = 5
    generator: str = "extractive"
    min_score: float = 0.82
    min_coverage: float = 0.3
    strong_score: float = 0.9
    max_sentences: int = 3
    min_entity_coverage: float = 0.5
    key_idf: float = 0.3
    entity_scope: str = "zh"  # zh | all
    rewrite: str = "none"  # none | multi-query | hyde (an LLM generator writes them; rag_cli.generate.rewrite)
    rerank_candidates: int = 20  # with model.reranker: chunks retrieved and reranked, of which the best k are kept
    min_rerank_score: float = 0.0  # with model.reranker: refuse below this best cross-encoder logit; 0 = off (per model)
    gate: str = "on"  # on | off: off answers every question (recording the gate's signals for `rag eval --tune refusal`)
    grade: str = "off"  # off | llm: an LLM generator first judges whether the sources answer (rag_cli.generate.grade)


@dataclass(frozen=True)
class SourcesConfig:
    """`[sources]`: what `rag build` loaded (absolute paths, folders or globs,
    and the --format), which `rag update` rescans."""

    paths: list = field(default_factory=list)
    format: str = "auto"


@dataclass(frozen=True)
class LockConfig:
    """`[lock]`: how a writing command waits for another writer of the project."""

    wait: float = 0.0  # seconds to wait for the project lock; 0 = fail at once


@dataclass(frozen=True)
class GeneratorConfig:
    """`[generator]`: the LLM of `ask.generator = "openai"` or `"llama-cpp"`.

    `openai`: an OpenAI-compatible server at `base_url`, `model` sent by name,
    the key read from the environment variable named `api_key_env` ("" = no
    key), `api` chat (instruction-tuned models) or completions (base models).
    `llama-cpp`: `model` is a .gguf path, or "" for the default Gemma 3 270M.
    `context_tokens` is the token budget of the sources in the prompt.
    """

    base_url: str = "http://127.0.0.1:8080/v1"
    model: str = ""
    api: str = "chat"  # chat | completions
    api_key_env: str = ""
    timeout: float = 60.0  # seconds per request
    max_retries: int = 2
    temperature: float = 0.0
    max_tokens: int = 256
    context_tokens: int = 2048


SECTIONS: dict[str, type] = {"model": ModelConfig, "chunk": ChunkConfig, "index": IndexConfig,
                             "search": SearchConfig, "ask": AskConfig, "generator": GeneratorConfig,
                             "sources": SourcesConfig, "lock": LockConfig}


@dataclass(frozen=True)
class Config:
    """The whole `rag.toml`."""

    model: ModelConfig = field(default_factory=ModelConfig)
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    ask: AskConfig = field(default_factory=AskConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    lock: LockConfig = field(default_factory=LockConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """{section: {key: value}}, in the order of the dataclasses (as written to rag.toml)."""
        return asdict(self)

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        """The defaults overlaid with `path` if it exists.

        Raises BadInput naming the file if it is not valid TOML, has an
        unknown section or key, or a value of the wrong type or range.
        """
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            user = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: not valid TOML ({exc})") from exc
        config = cls()
        for section, values in user.items():
            if section not in SECTIONS or not isinstance(values, dict):
                raise BadInput(f"{path}: unknown section [{section}]; known: {', '.join(SECTIONS)}")
            known = [f.name for f in fields(SECTIONS[section])]
            for key, value in values.items():
                if key not in known:
                    raise BadInput(f"{path}: unknown key {key!r} in [{section}]; known: {', '.join(known)}")
                check_setting(section, key, value, source=str(path))
            config = replace(config, **{section: replace(getattr(config, section), **values)})
        return config

    def save(self, path: str | Path) -> None:
        """Write rag.toml atomically."""
        import tomli_w

        from rag_cli import atomic

        atomic.write_text(path, tomli_w.dumps(self.to_dict()))

    def with_options(self, section: str, options: dict[str, Any] | None,
                     flags: dict[str, str] | None = None) -> tuple["Config", bool]:
        """This config with `options` (None values = not given) applied to `section`.

        Each option is checked first (`check_setting`; BadInput names the flag
        and the key; `flags` {key: flag} names the flag where the options come
        from other flags than the key's own, e.g. `--judge-model`).
        Returns (new config, whether a value changed).
        """
        current = getattr(self, section)
        given = {k: v for k, v in (options or {}).items() if v is not None}
        for key, value in given.items():
            if key not in {f.name for f in fields(current)}:
                raise BadInput(f"unknown option {key!r} for [{section}]; known: "
                               f"{', '.join(f.name for f in fields(current))}")
            check_setting(section, key, value, flag=(flags or {}).get(key))
        changed = any(getattr(current, k) != v for k, v in given.items())
        return (replace(self, **{section: replace(current, **given)}) if changed else self), changed


#: The defaults as plain dicts ({section: {key: value}}).
DEFAULT_CONFIG: dict[str, dict[str, Any]] = Config().to_dict()

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
    ("sources", "paths"): "SRC",
    ("generator", "model"): "--llm-model",
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
    ("model", "on_truncate"): ("warn", "error"),
    ("model", "threads"): (0, None),
    ("index", "hnsw_m"): (2, None),
    ("index", "hnsw_ef_construction"): (1, None),
    ("index", "hnsw_ef"): (1, None),
    ("index", "bm25_k1"): (0, None),
    ("index", "bm25_b"): (0, 1),
    ("search", "k"): (1, None),
    ("search", "rrf_k"): (0, None),
    ("search", "candidates"): (1, None),
    ("search", "fusion"): ("rrf", "minmax", "zscore"),
    ("search", "dense_weight"): (0, 1),
    ("ask", "k"): (1, None),
    ("ask", "min_score"): (-1, 1),
    ("ask", "strong_score"): (-1, 1),
    ("ask", "min_coverage"): (0, 1),
    ("ask", "min_entity_coverage"): (0, 1),
    ("ask", "key_idf"): (0, 1),
    ("ask", "entity_scope"): ("zh", "all"),
    ("ask", "max_sentences"): (1, None),
    ("ask", "rerank_candidates"): (1, None),
    ("ask", "rewrite"): ("none", "multi-query", "hyde"),
    ("ask", "gate"): ("on", "off"),
    ("ask", "grade"): ("off", "llm"),
    ("index", "keep"): (0, None),
    ("lock", "wait"): (0, None),
    ("ask", "generator"): ("extractive", "openai", "llama-cpp"),
    ("generator", "api"): ("chat", "completions"),
    ("generator", "timeout"): (0.001, None),
    ("generator", "max_retries"): (0, 10),
    ("generator", "temperature"): (0, 2),
    ("generator", "max_tokens"): (1, None),
    ("generator", "context_tokens"): (64, None),
}


def url_problem(value: str) -> str | None:
    """What is wrong with an HTTP API root (`generator.base_url`): it needs the
    http or https scheme and a host; None if it has both."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        ok = False
    return None if ok else "must be an http:// or https:// URL with a host, like 'http://127.0.0.1:8080/v1'"


#: Checks of values that CONFIG_LIMITS cannot express: (section, key) -> f(value) -> problem or None.
CONFIG_CHECKS = {("generator", "base_url"): url_problem}


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


#: How a setting's type is named in an error ("should be an integer like 10").
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}


def check_setting(section: str, key: str, value: Any, source: str | None = None, flag: str | None = None) -> None:
    """Check one config value's type (that of its default; an int is fine
    for a float) and range (CONFIG_LIMITS).

    `source` is the rag.toml path the value comes from, None for a flag;
    `flag` the flag it was given with (None: the key's own, `config_flag`).
    Raises BadInput naming the flag and the config key (and the file).
    """
    default = DEFAULT_CONFIG[section][key]
    flag = flag or config_flag(section, key)
    where = f"{source}: [{section}] {key} = {value!r}" if source else f"{flag} {value!r} (config {section}.{key})"
    want = (int, float) if isinstance(default, float) else type(default)
    if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, want):
        raise BadInput(f"{where} should be {_TYPE_NAMES.get(type(default), type(default).__name__)} "
                       f"like {default!r}")
    if isinstance(default, list) and not all(isinstance(v, str) for v in value):
        raise BadInput(f"{where} should be a list of strings")
    problem = limit_problem(value, CONFIG_LIMITS.get((section, key), (None, None)))
    if not problem and (section, key) in CONFIG_CHECKS:
        problem = CONFIG_CHECKS[section, key](value)
    if problem:
        raise BadInput(f"{where}: {problem}" + (f" (flag {flag})" if source else ""))
