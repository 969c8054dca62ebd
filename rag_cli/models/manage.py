"""What `rag models` does: list, describe, check, quantise and fetch model folders.

Every function returns a plain dict (what `--json` prints); the CLI only
renders it. Model folders are the layout of DESIGN.md "Models" (see
`rag_cli.models.folder`); a NAME is a default model name, a Hugging Face id
fetched by `pull`, or a folder (`rag_cli.models.defaults.resolve_model`).

File naming of an int8 graph written here: `model_quantized.onnx` beside the
float32 graph (`model.onnx` -> `model_quantized.onnx`, `onnx/model.onnx` ->
`onnx/model_quantized.onnx`), the name `optimum-cli onnxruntime quantize`
writes and Hugging Face ONNX repositories use; `--precision int8` picks it.
An embedder also gets its query graph `model_quantized_query.onnx`
(`rag_cli.models.folder`, `rag_cli.models.convert.quantize.quantize_query_graph`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from rag_cli import atomic
from rag_cli.errors import BadInput, WorkFailed
from rag_cli.models import defaults
from rag_cli.models.folder import (
    ONNX_CANDIDATES, RAG_MODEL_FILE, ModelFolder, _external_data_files, query_graph_path,
    sentence_transformers_settings,
)

QUANTIZED_NAME = "model_quantized.onnx"
#: onnxruntime ops that only an integer-quantised graph has.
INT8_OPS = frozenset({
    "MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "QLinearMatMul",
    "QAttention", "QGemm", "ConvInteger", "QLinearConv", "MatMulIntegerToFloat",
})
EMBEDDER_OUTPUTS = ("sentence_embedding", "last_hidden_state", "token_embeddings")

#: `verify` probes: per language a query, a passage that answers it and one that does not.
PROBES: dict[str, dict[str, str]] = {
    "en": {
        "query": "What is the capital of France?",
        "relevant": "Paris is the capital and largest city of France.",
        "irrelevant": "Mitochondria produce most of the energy that a cell uses.",
    },
    "zh": {
        "query": "中国的首都是哪个城市？",
        "relevant": "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
        "irrelevant": "猫喜欢在温暖的阳光下睡觉。",
    },
}

#: What `pull` downloads: the float32 and int8 graphs (and external weights)
#: under the names optimum and Hugging Face ONNX repos use, and the JSON files
#: (config, tokenizer, sentence-transformers pooling).
PULL_PATTERNS = (
    "model.onnx", "model.onnx_data", "model_quantized.onnx",
    "onnx/model.onnx", "onnx/model.onnx_data", "onnx/model_quantized.onnx",
    "*.json",
)


# ------------------------------------------------------------------ helpers
def _onnx_companions(onnx_path: Path) -> list[Path]:
    """The graph file plus its external-data files, if any."""
    return [onnx_path, *_external_data_files(onnx_path)]


def _tree_bytes(path: Path) -> int:
    """Bytes of all files under `path` (0 if it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def graph_precision(model) -> str:
    """`"int8"` if the graph has integer-quantised ops (`INT8_OPS`, e.g.
    MatMulInteger, DynamicQuantizeLinear), else `"fp16"` if it has float16
    weights, else `"fp32"`. `model` is an `onnx.ModelProto`."""
    import onnx

    if any(n.op_type in INT8_OPS for n in model.graph.node):
        return "int8"
    if any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer):
        return "fp16"
    return "fp32"


def _dims(value_info) -> list[int | str]:
    shape = value_info.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in shape.dim]


def graph_summary(onnx_path: str | os.PathLike) -> dict[str, Any]:
    """Inputs, outputs and precision of an ONNX graph, read without running it.

    Returns:
        `inputs` / `outputs`: lists of {name, type (ONNX element type name,
        e.g. `INT64`), shape (ints and symbolic dim names)}; `precision`
        (`graph_precision`); `n_nodes`; `int8_ops` (sorted op types from
        `INT8_OPS` present).

    Raises:
        BadInput: the file is not an ONNX graph.
    """
    import onnx

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError, onnx its own types
        raise BadInput(f"{onnx_path}: not a readable ONNX file ({e})") from None

    def io(vis) -> list[dict]:
        return [{"name": v.name, "type": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type),
                 "shape": _dims(v)} for v in vis]

    consts = {i.name for i in model.graph.initializer}
    return {
        "inputs": io([v for v in model.graph.input if v.name not in consts]),
        "outputs": io(model.graph.output),
        "precision": graph_precision(model),
        "n_nodes": len(model.graph.node),
        "int8_ops": sorted({n.op_type for n in model.graph.node if n.op_type in INT8_OPS}),
    }


def onnx_files(folder: Path, embedder: bool = True) -> list[dict[str, Any]]:
    """Every `*.onnx` file in a model folder (hidden folders skipped).

    Returns:
        Sorted by path: {path (relative), bytes (with external-data files),
        precision (`graph_precision`), query_graph_of (the graph whose
        queries it encodes, `rag_cli.models.folder`; None for a main graph,
        and for every file when not `embedder`: only embedders use one)}.
    """
    out = []
    paths = sorted(folder.rglob("*.onnx"))
    queries_of = {query_graph_path(p): p for p in paths} if embedder else {}
    for p in paths:
        rel = p.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        main = queries_of.get(p)
        out.append({"path": str(rel), "bytes": sum(f.stat().st_size for f in _onnx_companions(p)),
                    "precision": graph_summary(p)["precision"],
                    "query_graph_of": str(main.relative_to(folder)) if main is not None else None})
    return out


def _query_file(folder: ModelFolder) -> str | None:
    """The folder's query graph relative to it, or None."""
    return str(folder.query_onnx_path.relative_to(folder.path)) if folder.query_onnx_path is not None else None


def _available_precisions(folder: Path) -> list[str]:
    """Which of `--precision int8|fp32` the folder has its own file for (by file name)."""
    return [p for p in defaults.PRECISIONS if any((folder / n).is_file() for n in ONNX_CANDIDATES[p])]


def open_model(name_or_dir: str, precision: str = "int8") -> ModelFolder:
    """Resolve a NAME or folder (converting the default on first use) and load it.

    Raises:
        BadInput: not a model folder or known name; a required file
            (ONNX graph, tokenizer.json, config.json) is missing: the message
            names it.
    """
    ref = defaults.resolve_model(name_or_dir, precision=precision)
    return ModelFolder.load(ref.folder, onnx_file=ref.onnx_file)


def _kind_source(folder: ModelFolder, outputs: list[dict]) -> tuple[str, str, str | None]:
    """(kind the runtime uses, where it comes from, a warning if the graph disagrees)."""
    rag_path = folder.path / RAG_MODEL_FILE
    rag = {}
    if rag_path.is_file():
        rag = json.loads(rag_path.read_text(encoding="utf-8"))
    names = {o["name"] for o in outputs}
    by_graph = "cross-encoder" if "logits" in names else "embedder" if names & set(EMBEDDER_OUTPUTS) else None
    if "kind" in rag:
        source = RAG_MODEL_FILE
    elif folder.config.get("architectures"):
        source = "config.json architectures"
    else:
        source = "default (embedder)"
    warning = None
    if by_graph and by_graph != folder.kind:
        an = {"embedder": "an embedder", "cross-encoder": "a cross-encoder"}
        warning = (f"the graph's outputs ({', '.join(sorted(names))}) look like {an[by_graph]}, but {source} "
                   f"makes it {an[folder.kind]}; set \"kind\" in {rag_path}")
    elif by_graph and source.startswith("default"):
        source = "graph outputs"
    return folder.kind, source, warning


# --------------------------------------------------------------------- info
def model_info(name_or_dir: str, precision: str = "int8") -> dict[str, Any]:
    """Describe a model folder.

    Args:
        name_or_dir: a model folder, a default name (converted on first use)
            or a pulled Hugging Face id.
        precision: which graph to describe and fingerprint (`int8` falls back
            to fp32 when the folder has no int8 file, as `rag embed` does).

    Returns:
        name, path, kind (+ kind_source, warnings), dim (vector size, embedders;
        the output's static last dimension, else config `hidden_size`),
        n_logits (cross-encoders), max_length (tokens), pooling /
        pooled_in_graph / normalize / query_prefix / passage_prefix
        (embedders), onnx_file, query_onnx_file (the query graph, or None),
        precision, inputs, outputs, fingerprint,
        onnx_files (every graph in the folder with bytes and precision),
        bytes (whole folder).

    Raises:
        BadInput: as `open_model`.
    """
    folder = open_model(name_or_dir, precision)
    graph = graph_summary(folder.onnx_path)
    kind, kind_source, warning = _kind_source(folder, graph["outputs"])
    out_shapes = {o["name"]: o["shape"] for o in graph["outputs"]}
    info: dict[str, Any] = {
        "name": folder.name,
        "path": str(folder.path.resolve()),
        "kind": kind,
        "kind_source": kind_source,
        "max_length": folder.max_length,
    }
    if kind == "embedder":
        name = next((n for n in EMBEDDER_OUTPUTS if n in out_shapes), next(iter(out_shapes), None))
        last = out_shapes.get(name, [None])[-1] if name else None
        info.update(
            dim=int(last) if isinstance(last, int) and last > 0 else folder.config_dim or _encoder(folder).dim,
            pooling=folder.pooling,
            pooled_in_graph=name == "sentence_embedding",
            normalize=folder.normalize,
            query_prefix=folder.query_prefix,
            passage_prefix=folder.passage_prefix,
        )
    else:
        shape = out_shapes.get("logits") or next(iter(out_shapes.values()), [])
        last = shape[-1] if len(shape) >= 2 else 1
        info.update(n_logits=int(last) if isinstance(last, int) else None)
    info.update(
        onnx_file=str(folder.onnx_path.relative_to(folder.path)),
        query_onnx_file=_query_file(folder),
        precision=graph["precision"],
        int8_ops=graph["int8_ops"],
        inputs=graph["inputs"],
        outputs=graph["outputs"],
        fingerprint=folder.fingerprint,
        onnx_files=onnx_files(folder.path, embedder=kind == "embedder"),
        bytes=_tree_bytes(folder.path),
        warnings=([warning] if warning else []) + list(folder.warnings),
    )
    return info


# --------------------------------------------------------------------- list
def _where(value: str) -> dict[str, Any]:
    """Where a configured model value points, without converting or loading anything."""
    if not value:
        return {"value": value, "path": None, "status": "not configured"}
    p = Path(value).expanduser()
    if p.is_dir():
        return {"value": value, "path": str(p.resolve()), "status": "folder",
                "precisions": _available_precisions(p)}
    if value in defaults._DEFAULT_ALIASES:
        folder = defaults.models_dir() / defaults.DEFAULT_MODEL
        ready = defaults.default_ready(folder)
        return {"value": value, "path": str(folder), "status": "default, converted" if ready else
                "default, converted on first use", "precisions": _available_precisions(folder) if ready else []}
    pulled = defaults.pulled_model_dir(value)
    if pulled is not None:
        return {"value": value, "path": str(pulled), "status": "pulled", "precisions": _available_precisions(pulled)}
    return {"value": value, "path": None, "status": "missing"}


def list_models(project_root: str | os.PathLike | None = None,
                project_models: dict[str, Any] | None = None) -> dict[str, Any]:
    """The default models, the cache, models pulled into it, and the project's models.

    Args:
        project_root: a project folder.
        project_models: its `rag.toml` `[model]` section (embedder,
            precision, reranker), reported when given (None: no rag.toml).

    Returns:
        `cache` {path, models_dir, bytes}; `defaults` [{name, aliases, kind,
        installed (the PyPI packages are there), converted, path,
        precisions}]; `cached` [{name, path, precisions, bytes}] (other model
        folders in the cache); `project` (None without rag.toml) {path,
        embedder, precision, reranker: each as `_where`}.
    """
    mdir = defaults.models_dir()
    folder = mdir / defaults.DEFAULT_MODEL
    installed = defaults.default_installed() is None
    ready = defaults.default_ready(folder)
    default = {
        "name": defaults.DEFAULT_MODEL,
        "aliases": sorted(defaults._DEFAULT_ALIASES - {defaults.DEFAULT_MODEL}),
        "kind": "embedder",
        "installed": installed,
        "converted": ready,
        "path": str(folder),
        "precisions": _available_precisions(folder) if ready else [],
    }
    cached = []
    if mdir.is_dir():
        for d in sorted(mdir.iterdir()):
            if d.is_dir() and not d.name.startswith(".") and d.name != defaults.DEFAULT_MODEL:
                cached.append({"name": d.name.replace("--", "/", 1), "path": str(d),
                               "precisions": _available_precisions(d), "bytes": _tree_bytes(d)})
    project = None
    if project_root is not None and project_models is not None:
        mcfg = project_models
        project = {"path": str(project_root), "embedder": _where(mcfg["embedder"]),
                   "precision": mcfg["precision"], "reranker": _where(mcfg["reranker"])}
    cache = defaults.cache_dir()
    return {
        "cache": {"path": str(cache), "models_dir": str(mdir), "bytes": _tree_bytes(cache)},
        "defaults": [default],
        "cached": cached,
        "project": project,
    }


# ------------------------------------------------------------------- verify
def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """cos(a, b) = a·b / (|a| |b|) of two (d,) vectors, as a Python float."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / max(np.linalg.norm(a64) * np.linalg.norm(b64), 1e-12))


def probe_scores(folder: ModelFolder, threads: int | None = 1) -> list[dict[str, Any]]:
    """Score each `PROBES` language's query against its relevant and irrelevant passage.

    Embedders: cosine of the query vector (with `query_prefix`) and each
    passage vector (with `passage_prefix`). Cross-encoders: the raw logit
    score of (query, passage) (`CrossEncoder.score`).

    Returns:
        Per language: {lang, query, relevant, irrelevant, relevant_score,
        irrelevant_score, margin (relevant - irrelevant), ok (margin > 0)}.
    """
    rows = []
    if folder.kind == "embedder":
        from rag_cli.models.encoder import BiEncoder

        enc = BiEncoder(folder, threads=threads)
        enc.check_query_graph(keep=True)
        for lang, p in PROBES.items():
            q = enc.encode_queries([p["query"]])[0]
            rel, irr = enc.encode_passages([p["relevant"], p["irrelevant"]])
            rows.append((lang, p, _cosine(q, rel), _cosine(q, irr)))
    else:
        from rag_cli.models.cross_encoder import CrossEncoder

        ce = CrossEncoder(folder, threads=threads)
        for lang, p in PROBES.items():
            rel, irr = ce.score(p["query"], [p["relevant"], p["irrelevant"]])
            rows.append((lang, p, float(rel), float(irr)))
    return [{"lang": lang, **p, "relevant_score": r, "irrelevant_score": i, "margin": r - i, "ok": r > i}
            for lang, p, r, i in rows]


def verify_model(name_or_dir: str, precision: str = "int8", threads: int | None = 1) -> dict[str, Any]:
    """Load a model and check that it ranks a relevant passage above an irrelevant one.

    The probes (`PROBES`) are one English and one Chinese query, each with a
    passage that answers it and one that does not; see `probe_scores`.

    Returns:
        name, path, kind, onnx_file, query_onnx_file (the query graph the
        queries ran on, or None), precision (the file's), score
        (`"cosine"` or `"logit"`), checks (`probe_scores`), ok (every check
        passed).

    Raises:
        BadInput: not a valid model folder (the message names the missing
            file) or onnxruntime cannot load the graph.
    """
    folder = open_model(name_or_dir, precision)
    checks = probe_scores(folder, threads)
    return {
        "name": folder.name,
        "path": str(folder.path.resolve()),
        "kind": folder.kind,
        "onnx_file": str(folder.onnx_path.relative_to(folder.path)),
        "query_onnx_file": _query_file(folder),
        "precision": graph_summary(folder.onnx_path)["precision"],
        "score": "cosine" if folder.kind == "embedder" else "logit",
        "checks": checks,
        "ok": all(c["ok"] for c in checks),
    }


# ----------------------------------------------------------------- quantize
def _encoder(folder: ModelFolder):
    """A one-thread `BiEncoder` of an embedder folder (onnxruntime is imported here, not at start-up)."""
    from rag_cli.models.encoder import BiEncoder

    return BiEncoder(folder, threads=1)


def _probe_outputs(folder: ModelFolder) -> np.ndarray:
    """The probe texts' vectors ((6, d), embedders) or pair scores ((4,), cross-encoders)."""
    if folder.kind == "embedder":
        texts = [t for p in PROBES.values() for t in (p["query"], p["relevant"], p["irrelevant"])]
        return _encoder(folder).encode_passages(texts)
    from rag_cli.models.cross_encoder import CrossEncoder

    pairs = [(p["query"], t) for p in PROBES.values() for t in (p["relevant"], p["irrelevant"])]
    return CrossEncoder(folder, threads=1).score_pairs(pairs)


def _copy_model_files(src: Path, dst: Path) -> list[str]:
    """Copy every file of `src` but its ONNX graphs (and their external data)
    and hidden entries into `dst`, keeping relative paths. Returns them."""
    copied = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if not p.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if p.suffix == ".onnx" or p.name.endswith((".onnx_data", ".onnx.data")):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dst / rel)
        copied.append(str(rel))
    return copied


def quantize_model(src_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                   calibrate: bool = False) -> dict[str, Any]:
    """Write the dynamic int8 version of a model folder's float32 graph.

    Recipe: `rag_cli.models.convert.quantize.quantize_int8` (onnxruntime
    `quantize_dynamic`, per channel; the default model's own recipe).

    Args:
        src_dir: a model folder with a float32 `model.onnx` or `onnx/model.onnx`.
        out_dir: None: add `model_quantized.onnx` beside the float32 graph in
            `src_dir` (an atomic file write each, the query graph last). A
            folder: write a complete int8 model folder there (every file of
            `src_dir` but its ONNX graphs, plus `model_quantized.onnx` at the
            float32 graph's place), built in a temporary folder and renamed
            into place; an existing model folder there is replaced. An
            embedder also gets `model_quantized_query.onnx`, its query graph.
        calibrate: for a fused graph, the calibrated recipe
            (`rag_cli.models.convert.outliers`, with the folder's tokenizer.json).

    Returns:
        src, path (the output folder), onnx_file (relative), query_onnx_file
        (relative; None for a cross-encoder), bytes_fp32,
        bytes_int8, fp32_matmuls (MatMul nodes kept in float32),
        agreement ({metric, value}: min cosine of the probe vectors between
        float32 and int8 for an embedder, max |score difference| for a
        cross-encoder), copied (files copied, with `out_dir`), shadowed_by
        (only when another int8 graph in the folder, e.g. `model_int8.onnx`,
        is the one `--precision int8` picks).

    Raises:
        BadInput: `src_dir` is not a folder or not a model folder, has no
            float32 graph (or it is already quantised), or `out_dir` is a
            non-empty folder that is not a model folder.
    """
    from rag_cli.models.convert.quantize import quantize_int8, quantize_query_graph

    src = Path(src_dir).expanduser()
    if not src.is_dir():
        raise BadInput(f"{src_dir}: not a folder; `rag models quantize` takes a model folder with model.onnx")
    ref = defaults.resolve_model(src, precision="fp32", flag="DIR")
    fp32 = ModelFolder.load(src, onnx_file=ref.onnx_file)
    have = graph_summary(ref.onnx_file)["precision"]
    if have != "fp32":
        raise BadInput(f"{ref.onnx_file}: the graph is already {have}; quantise the float32 export (model.onnx)")
    rel = ref.onnx_file.relative_to(ref.folder).with_name(QUANTIZED_NAME)
    query_rel = query_graph_path(rel) if fp32.kind == "embedder" else None
    a = _probe_outputs(fp32)  # a graph the runtime cannot feed fails here, before anything is written
    tokenizer = fp32.tokenizer_path if calibrate else None
    result: dict[str, Any] = {"src": str(src.resolve())}
    out = Path(out_dir).expanduser() if out_dir is not None else None
    if out is not None and out.exists() and out.resolve() == src.resolve():
        out = None
    if out is None:
        if not os.access((src / rel).parent, os.W_OK):
            raise BadInput(f"{(src / rel).parent}: the folder is not writable; "
                           "write the int8 model folder elsewhere with --out DIR")
        # the int8 graph first: interrupted in between, the folder has an int8 graph without a
        # query graph (queries then run on the int8 graph), never a query graph alone
        with atomic.atomic_named(src / rel) as tmp:
            skipped = quantize_int8(ref.onnx_file, tmp, tokenizer)
        if query_rel is not None:
            with atomic.atomic_named(src / query_rel) as tmp:
                quantize_query_graph(ref.onnx_file, tmp)
        dest = src
    else:
        if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _looks_like_model(out))):
            raise BadInput(
                f"--out {out_dir}: exists and is not an empty folder or a model folder; "
                "give a new folder (it is replaced as a whole)"
            )
        with atomic.atomic_dir(out) as tmp:
            result["copied"] = _copy_model_files(src, tmp)
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            skipped = quantize_int8(ref.onnx_file, tmp / rel, tokenizer)
            if query_rel is not None:
                quantize_query_graph(ref.onnx_file, tmp / query_rel)
        dest = out
    int8 = ModelFolder.load(dest, onnx_file=rel)
    b = _probe_outputs(int8)
    if fp32.kind == "embedder":
        agreement = {"metric": "min cosine fp32 vs int8 (probe texts)",
                     "value": min(_cosine(x, y) for x, y in zip(a, b))}
    else:
        agreement = {"metric": "max |score fp32 - score int8| (probe pairs)",
                     "value": float(np.max(np.abs(a.astype(np.float64) - b)))}
    result.update(
        path=str(dest.resolve()),
        onnx_file=str(rel),
        query_onnx_file=str(query_rel) if query_rel is not None else None,
        bytes_fp32=sum(f.stat().st_size for f in _onnx_companions(ref.onnx_file)),
        bytes_int8=sum(f.stat().st_size for f in _onnx_companions(dest / rel)),
        fp32_matmuls=skipped,
        agreement=agreement,
    )
    picked = defaults.resolve_model(dest, precision="int8").onnx_file
    if picked != (dest / rel).absolute():
        # e.g. the default model's folder, whose model_int8.onnx comes first
        result["shadowed_by"] = str(picked.relative_to(dest.absolute()))
    return result


def _looks_like_model(folder: Path) -> bool:
    return any((folder / n).is_file() for n in ("tokenizer.json", "onnx/tokenizer.json", "config.json"))


# --------------------------------------------------------------------- pull
def _offline() -> bool:
    """True when `HF_HUB_OFFLINE` is set to a true value (huggingface_hub's own switch)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def pull_dir(hf_id: str) -> Path:
    """Where `pull` puts a model by default: `models_dir() / ID` with `/` -> `--`
    (`Xenova/ms-marco-MiniLM-L-6-v2` -> `Xenova--ms-marco-MiniLM-L-6-v2`)."""
    return defaults.models_dir() / hf_id.replace("/", "--")


def pull_model(hf_id: str, revision: str | None = None, out_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Download an ONNX export from the Hugging Face Hub into a model folder.

    Uses `huggingface_hub.snapshot_download` (optional extra:
    `pip install 'rag-cli[hub]'`) with `allow_patterns=PULL_PATTERNS`, into a
    temporary folder renamed into place when complete. If the repository has
    no `rag_model.json`, one is written with `name` (the id), `source` and the
    settings `sentence_transformers_settings` finds.

    Args:
        hf_id: a Hugging Face model id, `owner/name`.
        revision: a branch, tag or commit; default the repo's default branch.
        out_dir: the folder to write; default `pull_dir(hf_id)` in the cache,
            where `--model HF_ID` finds it.

    Returns:
        id, revision, path, files (relative paths), bytes, precisions,
        rag_model (what was written, or None).

    Raises:
        BadInput: huggingface_hub is not installed; `hf_id` is malformed, not
            on the Hub, or has no ONNX export / tokenizer.json; the revision
            does not exist.
        WorkFailed: offline (`HF_HUB_OFFLINE=1`), the Hub cannot be reached,
            or access is refused (gated or private repo).
    """
    if not hf_id or hf_id.count("/") != 1 or hf_id.startswith(("/", ".")) or hf_id.endswith("/"):
        raise BadInput(f"{hf_id!r}: expected a Hugging Face model id such as Xenova/ms-marco-MiniLM-L-6-v2")
    try:
        import huggingface_hub
        from huggingface_hub import errors as hf_errors
    except ImportError:
        raise BadInput(
            "`rag models pull` needs the huggingface_hub package: pip install 'rag-cli[hub]'"
        ) from None
    if _offline():
        raise WorkFailed(
            f"cannot pull {hf_id}: offline (HF_HUB_OFFLINE is set); unset it when online, or export the "
            "model elsewhere with `optimum-cli export onnx` and pass --model DIR"
        )
    dest = Path(out_dir).expanduser() if out_dir is not None else pull_dir(hf_id)
    rag_model = None
    with atomic.atomic_dir(dest) as tmp:
        try:
            huggingface_hub.snapshot_download(
                repo_id=hf_id, revision=revision, allow_patterns=list(PULL_PATTERNS), local_dir=str(tmp),
            )
        except hf_errors.RevisionNotFoundError:
            raise BadInput(f"{hf_id}: revision {revision!r} does not exist on the Hugging Face Hub") from None
        except hf_errors.GatedRepoError as e:
            raise WorkFailed(f"{hf_id}: access refused (gated repository; log in with `hf auth login`): {e}") from None
        except hf_errors.RepositoryNotFoundError:
            raise BadInput(f"{hf_id}: no such model on the Hugging Face Hub (or it is private)") from None
        except (hf_errors.LocalEntryNotFoundError, hf_errors.OfflineModeIsEnabled) as e:
            raise WorkFailed(f"cannot pull {hf_id}: the Hugging Face Hub cannot be reached (offline?): {e}") from None
        except (hf_errors.HfHubHTTPError, OSError) as e:
            raise WorkFailed(f"cannot pull {hf_id}: {type(e).__name__}: {e}") from None
        shutil.rmtree(tmp / ".cache", ignore_errors=True)  # huggingface_hub's resume bookkeeping
        if not _available_precisions(tmp):
            raise BadInput(
                f"{hf_id}: the repository has no ONNX export ({', '.join(p for p in PULL_PATTERNS if 'onnx' in p)}); "
                f"export it with `optimum-cli export onnx --model {hf_id} DIR` and pass --model DIR"
            )
        if not (tmp / "tokenizer.json").is_file():
            raise BadInput(f"{hf_id}: the repository has no tokenizer.json; rag-cli needs the fast tokenizer file")
        if not (tmp / RAG_MODEL_FILE).is_file():
            rag_model = {"name": hf_id, "source": f"huggingface:{hf_id}" + (f"@{revision}" if revision else ""),
                         **sentence_transformers_settings(tmp)}
            atomic.write_json(tmp / RAG_MODEL_FILE, rag_model)
        ModelFolder.load(tmp)  # every required file is there and readable
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    return {"id": hf_id, "revision": revision, "path": str(dest.resolve()), "files": files,
            "bytes": _tree_bytes(dest), "precisions": _available_precisions(dest), "rag_model": rag_model}
