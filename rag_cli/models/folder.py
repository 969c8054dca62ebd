"""A model folder: the files of an ONNX export of a Hugging Face model.

Layout (what `optimum-cli export onnx` writes, see DESIGN.md "Models"):

    model.onnx  or  onnx/model.onnx     the graph (or any file named with `onnx_file`)
    tokenizer.json                      HF `tokenizers` file
    config.json                         HF model config (optional when the files below say enough)
    tokenizer_config.json               optional; `model_max_length`
    rag_model.json                      optional; what the files don't say
    modules.json, 1_Pooling/config.json, config_sentence_transformers.json,
    sentence_bert_config.json           optional; sentence-transformers settings
    <graph>_query.onnx                  optional query graph of an embedder (below)

An embedder's graph `X.onnx` may have a *query graph* `X_query.onnx` beside
it, which then encodes the queries while `X.onnx` encodes the passages.
`rag models quantize` and the default model's conversion write one next to
each int8 graph (`model_int8_query.onnx`, `model_quantized_query.onnx`): the
float32 graph with only its embedding tables in int8
(`rag_cli.models.convert.quantize.quantize_query_graph`). Queries are few
and short, so they get float32 accuracy at little cost, and the int8 loss on
the passage side alone is small (docs/performance.md "int8 and retrieval quality").

`rag_model.json` keys (all optional): `kind` (`embedder` | `cross-encoder`),
`pooling` (`mean` | `cls`), `normalize` (bool), `query_prefix`,
`passage_prefix` (str), `max_length` (tokens, special tokens included),
`name` (str), `dim` (int, the vector size when it differs from
`config.json` `hidden_size`).

Each setting comes from the first of: rag_model.json, the
sentence-transformers files (`sentence_transformers_settings`), config.json
and tokenizer_config.json, a default. Without config.json, a folder whose
kind (embedder or cross-encoder) or max_length nothing states is refused,
naming the missing fact. A folder of a known family that needs prefixes
(E5: `query: ` / `passage: `) but sets none gets a warning in `warnings`.

`ModelFolder.fingerprint` identifies what a vector depends on: the ONNX bytes
(the query graph's too, when there is one), the tokenizer bytes and the
pooling/normalize/prefix/max_length settings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rag_cli.errors import BadInput

KINDS = ("embedder", "cross-encoder")
POOLINGS = ("mean", "cls")
RAG_MODEL_FILE = "rag_model.json"
DEFAULT_MAX_LENGTH = 512
# Models whose position ids start after the padding index, so two of
# `max_position_embeddings` are never usable by a real token.
_POSITION_OFFSET_2 = {"xlm-roberta", "xlm-roberta-xl", "roberta", "camembert", "bertweet"}
# tokenizer_config.json `model_max_length` above this is HF's "no limit" sentinel (1e30).
_SANE_MAX_LENGTH = 1_000_000
_FINGERPRINT_VERSION = "rag-cli-model-v1"
#: ONNX file names, in order of preference, per precision: ours first, then
#: the ones optimum writes (`model_quantized.onnx` from `optimum-cli onnxruntime quantize`).
ONNX_CANDIDATES = {
    "int8": ("model_int8.onnx", "model_quantized.onnx", "onnx/model_int8.onnx", "onnx/model_quantized.onnx"),
    "fp32": ("model.onnx", "onnx/model.onnx"),
}
#: `X.onnx` -> query graph `X_query.onnx` (module docstring).
QUERY_GRAPH_SUFFIX = "_query"


def query_graph_path(onnx_path: str | os.PathLike) -> Path:
    """Where the query graph of the graph `onnx_path` lives: `X.onnx` -> `X_query.onnx` beside it."""
    p = Path(onnx_path)
    return p.with_name(f"{p.stem}{QUERY_GRAPH_SUFFIX}{p.suffix}")


@dataclass
class ModelFolder:
    """A loaded model folder. Build one with `ModelFolder.load(path)`.

    Attributes:
        path: the folder.
        onnx_path: the ONNX graph file used.
        tokenizer_path: `tokenizer.json`.
        config: `config.json` as a dict.
        kind: `"embedder"` or `"cross-encoder"`.
        pooling: `"mean"` or `"cls"` (ignored when the graph has a
            `sentence_embedding` output, and for cross-encoders).
        normalize: L2-normalise vectors (embedders).
        query_prefix, passage_prefix: text put before queries / passages
            (e.g. `"query: "` for E5).
        max_length: the most tokens, special tokens included, the model sees
            per text (per pair for a cross-encoder); longer inputs are cut and
            counted as truncated.
        name: a short human name (rag_model.json `name`, else the folder name).
        pad_token_id: id used for padding.
        query_onnx_path: the embedder's query graph (`X_query.onnx` beside
            `onnx_path`), or None: `onnx_path` encodes queries too.
        warnings: what the caller should tell the user (e.g. an E5 folder
            without prefixes); empty when all is well.
    """

    path: Path
    onnx_path: Path
    tokenizer_path: Path
    config: dict[str, Any]
    kind: str = "embedder"
    pooling: str = "mean"
    normalize: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""
    max_length: int = DEFAULT_MAX_LENGTH
    name: str = ""
    pad_token_id: int = 0
    declared_dim: int | None = None
    query_onnx_path: Path | None = None
    warnings: list[str] = field(default_factory=list, compare=False)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ load
    @classmethod
    def load(cls, path: str | os.PathLike, onnx_file: str | os.PathLike | None = None) -> "ModelFolder":
        """Read a model folder.

        Args:
            path: the folder.
            onnx_file: the ONNX file to use, relative to the folder (or
                absolute); default `model.onnx`, then `onnx/model.onnx`, then
                an int8 file (`model_int8.onnx`, `model_quantized.onnx`, also
                under `onnx/`) for a folder that holds only an int8 graph.

        Raises:
            BadInput: the folder or a required file is missing, or a JSON file
                is unreadable or has a wrong value; the message names the file
                and what would be right.
        """
        folder = Path(path).expanduser()
        if not folder.is_dir():
            what = "is a file" if folder.exists() else "does not exist"
            raise BadInput(
                f"model folder {folder} {what}; --model takes a folder with model.onnx "
                "(or onnx/model.onnx), tokenizer.json and config.json, or the name of a default model"
            )
        onnx_path = _find_onnx(folder, onnx_file)
        tokenizer_path = _find_file(folder, "tokenizer.json", "the Hugging Face tokenizer file saved with the model")
        config_path = _locate(folder, "config.json")
        config = _read_json(config_path) if config_path else {}
        tok_config_path = _locate(folder, "tokenizer_config.json")
        tok_config = _read_json(tok_config_path) if tok_config_path else {}
        rag_path = _locate(folder, RAG_MODEL_FILE)
        rag = _read_json(rag_path) if rag_path else {}
        st = sentence_transformers_settings(folder)

        def missing(fact: str, key: str) -> BadInput:
            return BadInput(
                f"model folder {folder} does not say {fact}: it has no config.json and no "
                f"{RAG_MODEL_FILE} \"{key}\"; put the model's config.json there, or write {folder / RAG_MODEL_FILE} "
                f"with \"{key}\" (see `rag models info`)"
            )

        archs = config.get("architectures") or []
        if config_path is None and "kind" not in rag and not st:
            raise missing("whether it is an embedder or a cross-encoder", "kind")
        kind_default = "cross-encoder" if any("ForSequenceClassification" in str(a) for a in archs) else "embedder"
        kind = _choice(rag, "kind", KINDS, kind_default, rag_path)
        pooling = _choice(rag, "pooling", POOLINGS, st.get("pooling", "mean"), rag_path)
        normalize = _typed(rag, "normalize", bool, st.get("normalize", kind == "embedder"), rag_path)
        query_prefix = _typed(rag, "query_prefix", str, st.get("query_prefix", ""), rag_path)
        passage_prefix = _typed(rag, "passage_prefix", str, st.get("passage_prefix", ""), rag_path)
        max_length = _typed(rag, "max_length", int, st.get("max_length"), rag_path)
        if max_length is None:
            max_length = _default_max_length(config, tok_config)
            if max_length is None:
                if config_path is None:
                    raise missing("its max_length (the most tokens per input)", "max_length")
                max_length = DEFAULT_MAX_LENGTH
        elif max_length < 2:
            raise BadInput(f"{rag_path}: max_length is {max_length}; it must be a number of tokens >= 2")
        name = _typed(rag, "name", str, "", rag_path) or folder.resolve().name
        dim = _typed(rag, "dim", int, None, rag_path)
        query_graph = query_graph_path(onnx_path)
        warnings = []
        family = _prefix_family(name, folder, config)
        if kind == "embedder" and family and not (query_prefix or passage_prefix) \
                and not {"query_prefix", "passage_prefix"} & set(rag):
            warnings.append(
                f"model folder {folder} looks like an {family} model, which expects "
                f"{_PREFIX_FAMILIES[family][0]!r} / {_PREFIX_FAMILIES[family][1]!r} before queries / passages, "
                f"but no prefixes are set (neither {RAG_MODEL_FILE} nor sentence-transformers prompts set them); set "
                f"\"query_prefix\" and \"passage_prefix\" in {folder / RAG_MODEL_FILE} (or set them to \"\" "
                "to silence this)"
            )
        return cls(
            path=folder,
            onnx_path=onnx_path,
            tokenizer_path=tokenizer_path,
            config=config,
            kind=kind,
            pooling=pooling,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            max_length=int(max_length),
            name=name,
            pad_token_id=_pad_token_id(config, tokenizer_path),
            declared_dim=dim,
            query_onnx_path=query_graph if kind == "embedder" and query_graph.is_file() else None,
            warnings=warnings,
        )

    # ----------------------------------------------------------- properties
    def settings(self) -> dict[str, Any]:
        """The settings that change a vector or score besides the files."""
        return {
            "kind": self.kind,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
            "max_length": self.max_length,
        }

    @property
    def fingerprint(self) -> str:
        """sha256 (64 hex) of the ONNX bytes (plus external-data files; the
        query graph's too, when there is one), the tokenizer.json bytes and
        `settings()`. The ONNX hash is cached by
        (path, size, mtime), in memory and in the user cache folder, so
        repeating it is cheap."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(_FINGERPRINT_VERSION.encode())
            for p in [self.onnx_path, *_external_data_files(self.onnx_path)]:
                h.update(b"\0onnx\0" + file_sha256(p).encode())
            if self.query_onnx_path is not None:  # absent: only the files below are hashed
                for p in [self.query_onnx_path, *_external_data_files(self.query_onnx_path)]:
                    h.update(b"\0query-onnx\0" + file_sha256(p).encode())
            h.update(b"\0tokenizer\0" + file_sha256(self.tokenizer_path).encode())
            h.update(b"\0settings\0" + json.dumps(self.settings(), sort_keys=True).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    @property
    def passage_fingerprint(self) -> str:
        """The fingerprint of what a passage vector depends on: `fingerprint`
        without the query graph (equal to it when there is none). The vector
        cache of `rag embed` is keyed by it, so adding or replacing a query
        graph does not re-embed the passages."""
        if self.query_onnx_path is None:
            return self.fingerprint
        return replace(self, query_onnx_path=None).fingerprint

    def query_folder(self) -> "ModelFolder":
        """This folder as the query graph sees it: `onnx_path` is the query
        graph (itself when there is none), no further query graph. Its
        fingerprint is not the folder's: vectors are stored under this one."""
        if self.query_onnx_path is None:
            return self
        return replace(self, onnx_path=self.query_onnx_path, query_onnx_path=None)

    @property
    def short_fingerprint(self) -> str:
        """`name@<first 12 hex of fingerprint>`, e.g. `multilingual-e5-small@3f2a9c1b7d0e`."""
        return f"{self.name}@{self.fingerprint[:12]}"

    @property
    def config_dim(self) -> int | None:
        """Vector size the files declare: rag_model.json `dim`, else
        config.json `hidden_size` (or `d_model`, `dim`); None if neither says
        (`BiEncoder.dim` then encodes a probe text)."""
        if self.declared_dim:
            return int(self.declared_dim)
        for key in ("hidden_size", "d_model", "dim"):
            if isinstance(self.config.get(key), int):
                return int(self.config[key])
        return None


# ------------------------------------------------------------------ helpers
def sentence_transformers_settings(folder: Path) -> dict[str, Any]:
    """rag_model.json settings read from a sentence-transformers repo's files.

    `1_Pooling/config.json` (`pooling_mode_cls_token` -> `cls`,
    `pooling_mode_mean_tokens` -> `mean`), `modules.json` (a `Normalize`
    module -> `normalize: true`, else false when the file lists modules),
    `config_sentence_transformers.json` `prompts` (`query`, then
    `passage` or `document` -> the prefixes), `sentence_bert_config.json`
    `max_seq_length` -> `max_length`. Keys with no source are left out.
    """
    def read(name: str) -> Any:
        try:
            return json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    out: dict[str, Any] = {}
    pool = read("1_Pooling/config.json")
    if isinstance(pool, dict):
        if pool.get("pooling_mode_cls_token"):
            out["pooling"] = "cls"
        elif pool.get("pooling_mode_mean_tokens"):
            out["pooling"] = "mean"
    modules = read("modules.json")
    if isinstance(modules, list) and modules:
        out["normalize"] = any(str(m.get("type", "")).endswith(".Normalize") for m in modules if isinstance(m, dict))
    prompts = (read("config_sentence_transformers.json") or {}).get("prompts") or {}
    if isinstance(prompts, dict):
        if isinstance(prompts.get("query"), str):
            out["query_prefix"] = prompts["query"]
        passage = prompts.get("passage", prompts.get("document"))
        if isinstance(passage, str):
            out["passage_prefix"] = passage
    sb = read("sentence_bert_config.json")
    if isinstance(sb, dict) and isinstance(sb.get("max_seq_length"), int) and sb["max_seq_length"] >= 2:
        out["max_length"] = sb["max_seq_length"]
    return out


def _locate(folder: Path, name: str) -> Path | None:
    for p in (folder / name, folder / "onnx" / name):
        if p.is_file():
            return p
    return None


def _find_file(folder: Path, name: str, what: str) -> Path:
    p = _locate(folder, name)
    if p is None:
        raise BadInput(f"model folder {folder} has no {name}; put {what} there (or in {folder / 'onnx'})")
    return p


def _find_onnx(folder: Path, onnx_file: str | os.PathLike | None) -> Path:
    if onnx_file is not None:
        p = Path(onnx_file)
        p = p if p.is_absolute() else folder / p
        if not p.is_file():
            others = sorted(str(q.relative_to(folder)) for q in folder.rglob("*.onnx"))
            raise BadInput(
                f"model folder {folder} has no ONNX file {onnx_file}; "
                f"ONNX files there: {', '.join(others) or 'none'}"
            )
        return p
    # float32 first; a folder holding only an int8 graph (`rag models quantize --out`) uses that
    for name in ONNX_CANDIDATES["fp32"] + ONNX_CANDIDATES["int8"]:
        if (folder / name).is_file():
            return folder / name
    others = sorted(str(q.relative_to(folder)) for q in folder.rglob("*.onnx"))
    hint = f" (found {', '.join(others)}; choose one with onnx_file)" if others else ""
    raise BadInput(
        f"model folder {folder} has no model.onnx or onnx/model.onnx{hint}; "
        "export the model with `optimum-cli export onnx --model NAME FOLDER`"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: not readable JSON ({e}); it must be a JSON object") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: must be a JSON object, got {type(obj).__name__}")
    return obj


def _choice(obj: dict, key: str, allowed: tuple[str, ...], default: str, path: Path | None) -> str:
    value = obj.get(key, default)
    if value not in allowed:
        raise BadInput(f"{path}: {key} is {value!r}; it must be one of {', '.join(allowed)}")
    return value


def _typed(obj: dict, key: str, typ: type, default: Any, path: Path | None) -> Any:
    value = obj.get(key, default)
    if value is default:
        return value
    ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
    if not ok:
        raise BadInput(f"{path}: {key} is {value!r}; it must be a {typ.__name__}")
    return value


def _default_max_length(config: dict, tok_config: dict) -> int | None:
    """tokenizer_config.json `model_max_length`, else config.json
    `max_position_embeddings` (less the position offset); None if neither says."""
    mml = tok_config.get("model_max_length")
    if isinstance(mml, (int, float)) and 2 <= mml < _SANE_MAX_LENGTH:
        return int(mml)
    mpe = config.get("max_position_embeddings")
    if isinstance(mpe, int) and mpe > 2:
        return mpe - 2 if config.get("model_type") in _POSITION_OFFSET_2 else mpe
    return None


#: Model families that expect text prefixes: name -> (query prefix, passage prefix).
_PREFIX_FAMILIES = {"E5": ("query: ", "passage: ")}


def _prefix_family(name: str, folder: Path, config: dict) -> str | None:
    """The `_PREFIX_FAMILIES` key the model's name, folder name or config
    `_name_or_path` points to (`e5` as a whole word: `multilingual-e5-small`), or None."""
    import re

    for text in (name, folder.resolve().name, str(config.get("_name_or_path", ""))):
        if re.search(r"(^|[^a-z0-9])e5([^a-z0-9]|$)", text.lower()):
            return "E5"
    return None


def _pad_token_id(config: dict, tokenizer_path: Path) -> int:
    if isinstance(config.get("pad_token_id"), int):
        return int(config["pad_token_id"])
    try:
        tok = json.loads(tokenizer_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    padding = tok.get("padding") or {}
    if isinstance(padding.get("pad_id"), int):
        return int(padding["pad_id"])
    for added in tok.get("added_tokens") or []:
        if added.get("content") in ("<pad>", "[PAD]", "<|endoftext|>"):
            return int(added["id"])
    return 0


def graph_files(onnx_path: str | os.PathLike) -> list[Path]:
    """The files of an ONNX graph: `onnx_path`, then the external-data files beside it (large exports)."""
    return [Path(onnx_path), *_external_data_files(Path(onnx_path))]


def _external_data_files(onnx_path: Path) -> list[Path]:
    """Files that large exports keep their weights in beside the graph."""
    names = (onnx_path.name + "_data", onnx_path.name + ".data", onnx_path.stem + ".onnx_data")
    return sorted({onnx_path.with_name(n) for n in names if onnx_path.with_name(n).is_file()})


# ------------------------------------------------------------ file hashing
_MEMO: dict[tuple[str, int, int], str] = {}


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rag-cli" / "file-sha256.json"


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex of a file's bytes, read in 1 MiB blocks.

    Cached by (absolute path, size, mtime_ns) in memory and, best effort, in
    `$XDG_CACHE_HOME/rag-cli/file-sha256.json` for files of 1 MiB or more, so
    a large ONNX file is hashed once, not on every command.
    """
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key in _MEMO:
        return _MEMO[key]
    disk_key = f"{key[0]}|{key[1]}|{key[2]}"
    big = st.st_size >= 1 << 20
    cache: dict[str, str] = {}
    if big:
        try:
            cache = json.loads(_cache_file().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cache = {}
        if isinstance(cache, dict) and isinstance(cache.get(disk_key), str):
            _MEMO[key] = cache[disk_key]
            return cache[disk_key]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    _MEMO[key] = digest
    if big:
        _store(cache if isinstance(cache, dict) else {}, disk_key, digest)
    return digest


def _store(cache: dict[str, str], key: str, digest: str) -> None:
    cf = _cache_file()
    # Drop entries of files that are gone or changed, to keep the cache small.
    kept = {}
    for k, v in cache.items():
        parts = k.rsplit("|", 2)
        try:
            st = os.stat(parts[0])
            if len(parts) == 3 and f"{st.st_size}" == parts[1] and f"{st.st_mtime_ns}" == parts[2]:
                kept[k] = v
        except OSError:
            pass
    kept[key] = digest
    tmp = None
    try:
        cf.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".file-sha256.", dir=cf.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(kept, f)
        os.replace(tmp, cf)
    except OSError:
        # A read-only home only costs re-hashing next time.
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
