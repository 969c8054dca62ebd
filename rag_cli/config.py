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
from typing import Any, Callable

from rag_cli.errors import BadInput
from rag_cli.index.registry import DEFAULT, REGISTRY


def setting(default: Any, help: str, *, limits: tuple | None = None, flag: str | None = None,
            check: Callable[[Any], str | None] | None = None, cli: bool = True, follows: str | None = None,
            table: str | None = None) -> Any:
    """A config key, declared once: its default (whose type is the key's
    type), its `help` (the flag's help and the config reference), its
    `limits` ((lowest, highest), None = unbounded, ends included; or a tuple
    of str choices), its `flag` (default `--` + the key with `-` for `_`),
    an extra `check` (value -> problem or None), whether a command takes
    it as a flag (`cli`), and `follows`: another key of the same section
    whose value this key takes when that one is given and this one is not
    (in a rag.toml, `Config.load`; as options, `Config.with_options`;
    `apply_follows`), and `table`: the sub-table of its section that holds
    it in rag.toml (`[index.hnsw]` holds `hnsw_m`; the key, its keyword
    and its attribute are the same). Everything else (`check_setting`, the CLI's option
    groups in `rag_cli.cli.options`, docs/commands.md's config table, the
    help's note of what a key follows) is derived from these
    (`setting_info`)."""
    meta = {"help": help, "limits": limits, "flag": flag, "check": check, "cli": cli, "follows": follows,
            "table": table}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


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


def collection_problem(value: str) -> str | None:
    """What is wrong with a Milvus collection alias (`index.collection`): "" (derived from the project
    folder) or a letter or `_` then letters, digits and `_`, at most 200 characters (Milvus allows 255;
    `_gen_NNNNNN` is appended); None if it is such a name."""
    import re

    return None if value == "" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,199}", value) else \
        "must start with a letter or _ and hold only letters, digits and _ (at most 200 characters)"


def weights_problem(value: list) -> str | None:
    """What is wrong with `ask.refusal_weights`: it must be empty or a list of
    finite numbers, the bias and one weight per feature
    (`rag_cli.generate.gate.FEATURES`); None if it is."""
    from rag_cli.generate.gate import FEATURES

    if not value:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return "must be a list of numbers"
    if len(value) != len(FEATURES) + 1:
        return f"must hold {len(FEATURES) + 1} numbers: the bias, then a weight for each of {', '.join(FEATURES)}"
    return None


# Limits and their sources:
# - hnsw_m >= 2: hnswlib's level multiplier is 1/ln(M) (Malkov & Yashunin 2018, HNSW).
# - bm25_k1 >= 0, 0 <= bm25_b <= 1 (Robertson & Zaragoza 2009, "The Probabilistic
#   Relevance Framework: BM25 and Beyond"; b is a share of length normalisation).
# - rrf_k >= 0: RRF score 1/(k + rank), rank from 1 (Cormack, Clarke & Büttcher 2009; k = 60).
# - min_score, min_score_en, strong_score: bi-encoder cosines, in [-1, 1]; min_coverage: a share, in [0, 1].
# The chunk keys are checked, with the other chunk flags, by `rag_cli.chunking.units.validate`.


@dataclass(frozen=True)
class ModelConfig:
    """`[model]`: which models run, and where."""

    embedder: str = setting("multilingual-e5-small", "Bi-encoder: a model folder, a default name, or openai:MODEL "
                            "(an OpenAI-compatible embeddings server at model.base_url; docs/models.md)",
                            flag="--model")
    base_url: str = setting("http://127.0.0.1:8080/v1", "openai: embedder: the embeddings server's API root",
                            check=url_problem, flag="--embed-url")
    api_key_env: str = setting("", "openai: embedder: NAME of the environment variable holding the API key "
                               "(named but not set: exit 2)", flag="--embed-key-env")
    query_model: str = setting("", "openai: embedder: the model name sent for queries (e.g. e5-query); empty = "
                               "the passages' model")
    query_prefix: str = setting("", "openai: embedder: put before each query (e5: 'query: ')")
    passage_prefix: str = setting("", "openai: embedder: put before each passage (e5: 'passage: ')")
    api_batch: int = setting(64, "openai: embedder: texts per request at most", limits=(1, 100000))
    api_batch_tokens: int = setting(8192, "openai: embedder: tokens per request at most (counted with the default "
                                    "model's tokenizer; a longer text goes alone)", limits=(1, None))
    api_max_length: int = setting(512, "openai: embedder: tokens per text the server embeds (longer ones are "
                                  "reported as truncated)", limits=(1, None))
    api_timeout: float = setting(60.0, "openai: embedder: seconds per request", limits=(0.001, None))
    api_retries: int = setting(2, "openai: embedder: retries after a connection error, timeout, 429 or 5xx "
                               "(exponential backoff from 0.5 s)", limits=(0, 10))
    precision: str = setting("int8", "int8 or fp32: which ONNX graph of the model runs", limits=("int8", "fp32"))
    reranker: str = setting("", "Cross-encoder: a model folder (none by default)", flag="--model")
    reader: str = setting("", "Extractive QA reader for `ask`: an ONNX question-answering export folder (none by "
                          "default; docs/answers.md)",
                          flag="--reader")
    threads: int = setting(0, "CPU cores for the models (that many batches at once, one onnxruntime thread each); "
                           "0 = all cores",
                           limits=(0, None))
    provider: str = setting("cpu", "onnxruntime execution provider: cpu, cuda or coreml, if onnxruntime has it")
    on_truncate: str = setting("warn", "A chunk longer than the model's max_length: warn (name it) | "
                               "error (exit 2, nothing written)", limits=("warn", "error"))


@dataclass(frozen=True)
class ChunkConfig:
    """`[chunk]`: how documents are split (sizes in `unit`)."""

    strategy: str = setting("recursive", "recursive | fixed | markdown | code | sentence | parent-child | semantic")
    size: int = setting(256, "Chunk size in --unit")
    overlap: int = setting(32, "Overlap in --unit, < size")
    unit: str = setting("tokens", "tokens (of the embedder's tokenizer) | chars")
    context_sentences: int = setting(2, "sentence: sentences on each side given to `ask` as context")
    parent_size: int = setting(512, "parent-child: parent size in --unit, > --size")
    breakpoint_percentile: float = setting(95.0, "semantic: break where the sentence distance exceeds this "
                                           "percentile, 0-100")


@dataclass(frozen=True)
class IndexConfig:
    """`[index]`: the dense backend (`rag_cli.index.registry`), BM25 and the generations kept; the
    backends' parameters in the sub-tables [index.hnsw], [index.ivf] (read by each backend that builds
    that structure), [index.faiss] and [index.milvus] (docs/architecture.md)."""

    backend: str = setting(DEFAULT, "Dense index: " + " | ".join(f"{name} ({help_})" for name, (_, help_) in
                                                                 REGISTRY.items()) + "; docs/architecture.md",
                           limits=tuple(REGISTRY))
    bm25_k1: float = setting(1.2, "BM25 k1: term-frequency saturation", limits=(0, None), flag="--k1")
    bm25_b: float = setting(0.75, "BM25 b: length normalisation, 0-1", limits=(0, 1), flag="--b")
    bm25_method: str = setting("lucene", "BM25 variant: lucene (Lucene's and Anserini's scoring) | robertson | "
                                "atire | bm25l | bm25+", limits=("lucene", "robertson", "atire", "bm25l", "bm25+"))
    keep: int = setting(2, "Old index generations kept for `rag rollback`", limits=(0, None))
    hnsw_m: int = setting(32, "HNSW graph degree M (hnswlib, faiss hnsw-sq8, milvus hnsw)", limits=(2, None),
                          table="hnsw")
    hnsw_ef_construction: int = setting(200, "HNSW build beam", limits=(1, None), flag="--ef-construction",
                                        table="hnsw")
    hnsw_ef: int = setting(128, "HNSW query beam (raised to k)", limits=(1, None), flag="--ef", table="hnsw")
    nlist: int = setting(0, "faiss ivf-pq, milvus ivf-*: IVF cells (k-means); 0 = the power of two nearest 4·√n",
                         limits=(0, None), table="ivf")
    pq_m: int = setting(0, "faiss and milvus ivf-pq: bytes per vector (PQ sub-vectors), a divisor of the dimension; "
                        "0 = the largest up to dimension / 6", limits=(0, None), table="ivf")
    nprobe: int = setting(64, "faiss ivf-pq, milvus ivf-*: cells searched per query", limits=(1, None), table="ivf")
    index_type: str = setting("hnsw-sq8", "faiss: hnsw-sq8 (HNSW over 8-bit codes) | sq8 (8-bit codes scanned "
                              "flat) | ivf-pq (IVF cells of product-quantised codes)",
                              limits=("hnsw-sq8", "sq8", "ivf-pq"), table="faiss")
    rescore: int = setting(100, "faiss: candidates re-scored with the exact (memory-mapped) vectors before the "
                           "best k are kept; 0 = the codes' approximate scores", limits=(0, None), table="faiss")
    uri: str = setting("", "milvus: a Milvus Lite path ending in .db or a server's http://host:19530 "
                       "(docs/scale-out.md); empty = milvus.db in the project folder", table="milvus")
    collection: str = setting("", "milvus: the alias of the current generation (collections ALIAS_gen_NNNNNN); empty "
                              "= rag_ and 12 hex digits of the path", check=collection_problem, table="milvus")
    milvus_index: str = setting("hnsw", "milvus: dense index type: hnsw (--hnsw-m, --ef) | ivf-sq8 | ivf-pq "
                                "(--nlist, --nprobe, --pq-m) | flat (exact)",
                                limits=("hnsw", "ivf-sq8", "ivf-pq", "flat"), table="milvus")


@dataclass(frozen=True)
class SearchConfig:
    """`[search]`: retrieval mode, depth and hybrid fusion (see `rag_cli.index.fusion`)."""

    mode: str = setting("hybrid", "dense | sparse | hybrid", limits=("dense", "sparse", "hybrid"))
    k: int = setting(10, "Results per query", limits=(1, None), flag="-k")
    rrf_k: int = setting(60, "RRF constant k in 1/(k + rank)", limits=(0, None))
    candidates: int = setting(100, "Hybrid: hits per retriever before fusion", limits=(1, None))
    fusion: str = setting("rrf", "Hybrid: rrf | minmax | zscore (weighted sums of normalised scores)",
                          limits=("rrf", "minmax", "zscore"))
    dense_weight: float = setting(0.5, "minmax/zscore: weight of the dense scores, 0-1 (sparse: 1 - this)",
                                  limits=(0, 1))


@dataclass(frozen=True)
class AskConfig:
    """`[ask]`: evidence depth, generator and the refusal thresholds.

    Refuse when the best evidence's bi-encoder cosine is below the
    question's threshold, or when the evidence holds less than
    `min_coverage` of the question's idf-weighted terms and the cosine is
    below `strong_score`. Cosines are per model (e5 sits in about 0.7-1.0),
    so these are too. The threshold is per language
    (`rag_cli.generate.gate.min_score_for`): `min_score` for a question with
    Chinese characters (CJK ideographs, the test of `entity_scope` "zh"),
    `min_score_en` for every other question (e5 gives English pairs lower
    cosines: docs/answers.md). `min_score_en` follows `min_score` where only
    `min_score` is given: a rag.toml that sets `min_score` without
    `min_score_en` (written before the key existed, or by hand), or one
    number given by `--min-score` or the `min_score` option, judges every
    question by that number.

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
    still reads the evidence and may refuse); `rag eval tune refusal`
    searches the thresholds on answers recorded that way.
    """

    k: int = setting(5, "Evidence chunks given to the generator", limits=(1, None), flag="-k")
    generator: str = setting("extractive", "extractive | openai (an OpenAI-compatible server) | llama-cpp "
                             "(a local GGUF, the llm extra)", limits=("extractive", "openai", "llama-cpp"))
    min_score: float = setting(0.82, "Refuse below this bi-encoder cosine of the best evidence (Chinese questions; "
                               "all unless ask.min_score_en is given; docs/answers.md)", limits=(-1, 1))
    min_score_en: float = setting(0.81, "The --min-score of questions without Chinese characters",
                                  limits=(-1, 1), follows="min_score")
    min_coverage: float = setting(0.3, "Refuse below this idf-weighted share of question terms in the "
                                  "evidence, unless the cosine reaches ask.strong_score", limits=(0, 1))
    strong_score: float = setting(0.9, "A cosine at or above this answers without the --min-coverage check",
                                  limits=(-1, 1))
    max_sentences: int = setting(3, "Sentences at most in an extractive answer", limits=(1, None))
    min_entity_coverage: float = setting(0.5, "Refuse when no evidence holds this share of the question's "
                                         "key terms (below ask.strong_score); 0 = off", limits=(0, 1))
    key_idf: float = setting(0.3, "A key term's idf is at least this share of the question's largest idf",
                             limits=(0, 1))
    entity_scope: str = setting("zh", "Questions the key-term rule judges: zh (with CJK characters) | all",
                                limits=("zh", "all"))
    rewrite: str = setting("none", "none | multi-query | hyde: the LLM generator rewrites the question, each "
                           "rewrite's retrieval fused with the question's by RRF",
                           limits=("none", "multi-query", "hyde"))
    rerank_candidates: int = setting(20, "With model.reranker: chunks retrieved and reranked, of which the best "
                                     "k are kept", limits=(1, None))
    min_rerank_score: float = setting(0.0, "With model.reranker: refuse below this best cross-encoder logit (a raw "
                                      "logit, per model); 0 = off")
    prompt: str = setting("", "LLM generators: a prompt template file ($sources, $question, ...: docs/answers.md); "
                          "empty = the built-in prompt")
    gate: str = setting("on", "on | off: off refuses nothing itself (the generator may) and still records the "
                        "gate's signals, for `rag eval tune refusal`", limits=("on", "off"))
    refusal_weights: list = setting([], "The learned refusal: [bias, one weight per signal of "
                                    "rag_cli.generate.gate.FEATURES]; refuse when bias + weights . signals < 0; "
                                    "[] = off; written by `rag eval tune refusal`", cli=False,
                                    check=weights_problem)
    refusal_scope: str = setting("en", "Questions the learned refusal judges: en (without CJK characters) | zh | all",
                                 limits=("en", "zh", "all"))
    grade: str = setting("off", "off | llm: the LLM generator first judges whether the sources answer the "
                         "question and refuses if not (CRAG)", limits=("off", "llm"))


@dataclass(frozen=True)
class SourcesConfig:
    """`[sources]`: what `rag build` loaded (absolute paths, folders or globs,
    and the --format), which `rag update` rescans."""

    paths: list = setting([], "Sources remembered by `rag build` (absolute paths, folders or globs)",
                          flag="SRC", cli=False)
    format: str = setting("auto", "The --format of `rag build`", cli=False)


@dataclass(frozen=True)
class LockConfig:
    """`[lock]`: how a writing command waits for another writer of the project."""

    wait: float = setting(0.0, "Seconds to wait for another writer of the project, then exit 1; "
                          "0 = fail at once", limits=(0, None))


def env_name_problem(value: str) -> str | None:
    """What is wrong with the name of an environment variable (`serve.api_key_env`): letters, digits and
    `_`, not starting with a digit ("" = none); None if it is such a name."""
    import re

    return None if value == "" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) else \
        "must be the NAME of an environment variable (letters, digits, _), not the key itself"


@dataclass(frozen=True)
class ServeConfig:
    """`[serve]`: `rag serve`, the HTTP and MCP server (docs/serve.md).

    A `host` other than a loopback address needs `api_key_env`: the NAME of
    the environment variable holding the key that clients send (the key
    itself is never in rag.toml); with it set, the key is required on
    loopback too.
    """

    host: str = setting("127.0.0.1", "Address to listen on; one other than loopback (127.0.0.1, ::1, localhost) "
                        "needs --api-key-env")
    port: int = setting(8765, "TCP port to listen on; 0 = any free port (printed at start)", limits=(0, 65535))
    api_key_env: str = setting("", "NAME of the environment variable holding the API key every request must send "
                               "(docs/serve.md); \"\" = no key (loopback only)",
                               flag="--api-key-env", check=env_name_problem)
    log: bool = setting(False, "Append every search and answer to logs/queries/ and accept POST /feedback into "
                        "logs/feedback/ (Parquet; `rag eval online`)")
    max_k: int = setting(100, "Largest k (results or evidence chunks) a request may ask for", limits=(1, 10000))
    max_body: int = setting(65536, "Largest request body, bytes (a larger one gets 413)", limits=(1024, None))
    max_concurrent: int = setting(8, "Requests computed at once, in threads of one process sharing one loaded index; "
                                  "more wait their turn", limits=(1, 256))
    query_graph: str = setting("query", "What encodes the queries: query (the query graph, as `rag search` does) | "
                               "passage (the chunks' graph: less CPU; docs/serve.md)", limits=("query", "passage"))
    reload_poll: float = setting(0.5, "Seconds between looks at index/CURRENT: a new generation is loaded beside "
                                 "the served one and swapped in between requests", limits=(0.05, 3600))


@dataclass(frozen=True)
class GeneratorConfig:
    """`[generator]`: the LLM of `ask.generator = "openai"` or `"llama-cpp"`.

    `openai`: an OpenAI-compatible server at `base_url`, `model` sent by name,
    the key read from the environment variable named `api_key_env` ("" = no
    key), `api` chat (instruction-tuned models) or completions (base models).
    `llama-cpp`: `model` is a .gguf path, or "" for the default Gemma 3 270M.
    `context_tokens` is the token budget of the sources in the prompt.
    """

    base_url: str = setting("http://127.0.0.1:8080/v1", "openai: the server's API root, e.g. "
                            "http://127.0.0.1:8080/v1", check=url_problem)
    model: str = setting("", "openai: the model name sent; llama-cpp: a .gguf path, empty = Gemma 3 270M",
                         flag="--llm-model")
    api: str = setting("chat", "openai: chat | completions (base models)", limits=("chat", "completions"))
    api_key_env: str = setting("", "openai: NAME of the environment variable holding the API key (the key itself "
                                "is never in rag.toml; named but not set: exit 2)")
    timeout: float = setting(60.0, "openai: seconds per request", limits=(0.001, None))
    max_retries: int = setting(2, "openai: retries after a connection error, timeout, 429 or 5xx (exponential "
                               "backoff from 0.5 s)",
                               limits=(0, 10))
    temperature: float = setting(0.0, "LLM sampling temperature", limits=(0, 2))
    max_tokens: int = setting(256, "LLM answer length at most, tokens", limits=(1, None))
    context_tokens: int = setting(2048, "LLM token budget of the sources; the lowest-ranked evidence is cut "
                                  "first", limits=(64, None))


SECTIONS: dict[str, type] = {"model": ModelConfig, "chunk": ChunkConfig, "index": IndexConfig,
                             "search": SearchConfig, "ask": AskConfig, "generator": GeneratorConfig,
                             "sources": SourcesConfig, "lock": LockConfig, "serve": ServeConfig}


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
    serve: ServeConfig = field(default_factory=ServeConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """{section: {key: value, table: {key: value}}} as written to rag.toml (`[index.hnsw]` a sub-table)."""
        out = asdict(self)
        for section, cls in SECTIONS.items():
            for f in fields(cls):
                if f.metadata.get("table"):
                    out[section].setdefault(f.metadata["table"], {})[f.name] = out[section].pop(f.name)
        return out

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
            values = _table_values(section, values, path)
            for key, value in values.items():
                check_setting(section, key, value, source=str(path))
            values = apply_follows(section, values)
            config = replace(config, **{section: replace(getattr(config, section), **values)})
        _check_chunk_section(config.chunk, path)
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
        from other flags than the key's own, e.g. `--judge-model`). A key that
        follows another (`setting`'s `follows`: ask.min_score_en follows
        ask.min_score) takes its value when only that one is given.
        Returns (new config, whether a value changed).
        """
        current = getattr(self, section)
        given = {k: v for k, v in (options or {}).items() if v is not None}
        for key, value in given.items():
            if key not in {f.name for f in fields(current)}:
                raise BadInput(f"unknown option {key!r} for [{section}]; known: "
                               f"{', '.join(f.name for f in fields(current))}")
            check_setting(section, key, value, flag=(flags or {}).get(key))
        given = apply_follows(section, given)
        changed = any(getattr(current, k) != v for k, v in given.items())
        return (replace(self, **{section: replace(current, **given)}) if changed else self), changed


#: The defaults as plain dicts, as rag.toml holds them ({section: {key: value, table: {key: value}}}).
DEFAULT_CONFIG: dict[str, dict[str, Any]] = Config().to_dict()
_DEFAULTS: dict[str, dict[str, Any]] = asdict(Config())  # {section: {key: value}}, sub-tables' keys too


def _table_values(section: str, values: dict[str, Any], path: Path) -> dict[str, Any]:
    """{key: value} of rag.toml's [section] and its sub-tables ([index.hnsw]). BadInput naming `path`
    for an unknown key or sub-table, or a key outside its sub-table (naming where it belongs)."""
    place = {f.name: f.metadata.get("table") for f in fields(SECTIONS[section])}
    out: dict[str, Any] = {}
    for name, value in values.items():
        table = name if isinstance(value, dict) and name in place.values() else None
        for key, v in (value if table else {name: value}).items():
            where = f"[{section}.{table}]" if table else f"[{section}]"
            key_known = {"rerank": "rescore"}.get(key, key) if section == "index" else key  # renamed: `rag rerank`
            if key_known in place and place[key_known] != table or key_known != key:
                home = f"[{section}.{place[key_known]}]" if place[key_known] else f"[{section}]"
                raise BadInput(f"{path}: {where} {key}: write it as {key_known} under {home}")
            if key not in place:
                known = [k for k, t in place.items() if t == table] + sorted({f"[{section}.{t}]" for t in
                                                                           place.values() if t and not table})
                raise BadInput(f"{path}: unknown key {key!r} in {where}; known: {', '.join(known)}")
            out[key] = v
    return out

@dataclass(frozen=True)
class SettingInfo:
    """One config key as `setting` declared it (see there)."""

    section: str
    key: str
    default: Any
    help: str
    limits: tuple | None
    flag: str
    check: Callable[[Any], str | None] | None
    cli: bool
    follows: str | None = None  # the key of the section whose value this one takes when only that one is given
    table: str | None = None  # the sub-table of the section that holds it in rag.toml

    @property
    def place(self) -> str:
        """Where rag.toml holds it: `index` or `index.hnsw`."""
        return f"{self.section}.{self.table}" if self.table else self.section


def setting_info(section: str, key: str) -> SettingInfo:
    """What `setting` declared for `section.key`; the help of a key that
    follows another ends with that rule. Raises KeyError for an unknown one."""
    for f in fields(SECTIONS[section]):
        if f.name == key:
            m = f.metadata
            flag = m["flag"] or "--" + key.replace("_", "-")
            help_ = m["help"]
            if m["follows"]:
                led = setting_info(section, m["follows"])
                help_ += f"; {section}.{led.key}'s value when only that is given"
            return SettingInfo(section, key, _DEFAULTS[section][key], help_, m["limits"], flag, m["check"],
                               m["cli"], m["follows"], m["table"])
    raise KeyError(f"{section}.{key}")


def apply_follows(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """`values` ({key: value} given for `section`) with every key that follows
    another (`setting`'s `follows`) and is not given set to that key's value,
    where that one is given: {"min_score": 0.9} -> {"min_score": 0.9,
    "min_score_en": 0.9} in [ask]. A new dict; `values` is not changed."""
    out = dict(values)
    for f in fields(SECTIONS[section]):
        led = f.metadata.get("follows")
        if led and f.name not in out and led in out:
            out[f.name] = out[led]
    return out


def all_settings() -> list[SettingInfo]:
    """Every config key, section by section, in rag.toml's order."""
    return [setting_info(s, f.name) for s, cls in SECTIONS.items() for f in fields(cls)]


def config_flag(section: str, key: str) -> str:
    """The command-line flag of a config key (`index.bm25_k1` -> `--k1`)."""
    return setting_info(section, key).flag


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
    for a float) and range (`setting`'s limits and check).

    `source` is the rag.toml path the value comes from, None for a flag;
    `flag` the flag it was given with (None: the key's own, `config_flag`).
    Raises BadInput naming the flag and the config key (and the file).
    """
    default = _DEFAULTS[section][key]
    info = setting_info(section, key)
    flag = flag or info.flag
    where = f"{source}: [{info.place}] {key} = {value!r}" if source else f"{flag} {value!r} (config {info.place}.{key})"
    want = (int, float) if isinstance(default, float) else type(default)
    if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, want):
        raise BadInput(f"{where} should be {_TYPE_NAMES.get(type(default), type(default).__name__)} "
                       f"like {default!r}")
    if isinstance(default, list) and info.check is None and not all(isinstance(v, str) for v in value):
        raise BadInput(f"{where} should be a list of strings")
    problem = limit_problem(value, info.limits or (None, None))
    if not problem and info.check is not None:
        problem = info.check(value)
    if problem:
        raise BadInput(f"{where}: {problem}" + (f" (flag {flag})" if source and info.cli else ""))


def _check_chunk_section(chunk: "ChunkConfig", path: Path) -> None:
    """The [chunk] values of `path` checked together (size, overlap < size, strategy, unit, ...) as the
    chunk flags are (`rag_cli.chunking.units.validate`); BadInput naming the file."""
    from rag_cli.chunking.units import validate

    try:
        validate(chunk.strategy, chunk.size, chunk.overlap, chunk.unit, tokenizer=True,
                 context_sentences=chunk.context_sentences, parent_size=chunk.parent_size,
                 breakpoint_percentile=chunk.breakpoint_percentile)
    except BadInput as exc:
        raise BadInput(f"{path} [chunk]: {exc}") from None


def split_options(options: dict[str, Any], sections: tuple[str, ...],
                  renamed: dict[str, tuple[str, str]] | None = None) -> dict[str, dict[str, Any]]:
    """Keyword options named after config keys, by section: {section: {key:
    value}} for the first of `sections` that has the key (`renamed` maps an
    option to its (section, key) where the name differs, e.g. "model" ->
    ("model", "embedder")); values are not checked here (`with_options` does).
    Raises TypeError for an option no section has, naming the known ones."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in options.items():
        section, key = (renamed or {}).get(name, (None, name))
        if section is None or section not in sections:
            section = next((s for s in sections if key in {f.name for f in fields(SECTIONS[s])}), None)
        if section is None:
            known = sorted({f.name for s in sections for f in fields(SECTIONS[s])} | set(renamed or {}))
            raise TypeError(f"unknown option {name!r}; known: {', '.join(known)}")
        out.setdefault(section, {})[key] = value
    return out
