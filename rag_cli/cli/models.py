"""`rag models list | info | verify | quantize | pull`: ONNX model folders,
through `rag_cli.models.manage`; printed by `rag_cli.cli.render_models`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli import render_models as show
from rag_cli.cli.common import RagTyper, emit_json, error
from rag_cli.cli.options import OUTPUT, PROJECT, NameArg, Settings, options, output
from rag_cli.cli.root import app

models_app = RagTyper(name="models", help="""List, describe, check, quantise and fetch ONNX model folders.

NAME is a model folder, a default name or a Hugging Face id fetched by
`rag models pull`; `info` and `verify` take `--precision int8|fp32` (which
graph), all take `--json`.""")
app.add_typer(models_app, name="models")

#: Which graph of a model folder: int8 or fp32 (`--precision`, default int8).
PRECISION = Settings("model", "precision")
JSON_ONLY = output(quiet=None)

DirArg = Annotated[Path, typer.Argument(help="A model folder with a float32 model.onnx or onnx/model.onnx")]
QuantizeOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", help="Write a complete int8 model folder here (default: add model_quantized.onnx to DIRECTORY)")]
CalibrateOpt = Annotated[bool, typer.Option(
    "--calibrate", help="Fused graphs: each FFN's outlier channels in float32, the rest of the FFN int8 (the "
                        "default model's recipe; docs/models.md)")]
HfIdArg = Annotated[str, typer.Argument(
    help="Hugging Face model id with an ONNX export, e.g. Xenova/ms-marco-MiniLM-L-6-v2")]
RevisionOpt = Annotated[Optional[str], typer.Option("--revision", help="Branch, tag or commit")]
PullOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", help="Folder to write (default: the cache, where --model HF_ID finds it)")]


def _precision(opts: dict) -> str:
    return opts["precision"] or "int8"


@models_app.command("list")
@options(PROJECT, JSON_ONLY)
def models_list(*, project, json_out):
    r"""The default models, the cache folder and its size, pulled models, and the project's models.

    The default model (converted yet?, its precisions, path), the cache
    folder and its size, models pulled into it, and the project's
    `\[model]` embedder and reranker with where they resolve (nothing is converted).
    """
    from dataclasses import asdict

    from rag_cli.models.manage import list_models
    from rag_cli.project import Project

    p = Project.open(project)
    res = list_models(p.root, asdict(p.config.model) if p.config_path.is_file() else None)
    if json_out:
        return emit_json(res)
    show.listing(res)


@models_app.command("info")
@options(PRECISION, JSON_ONLY)
def models_info(name: NameArg, *, opts, json_out):
    """Kind, dimension, max_length, pooling, prefixes, graph inputs/outputs, fingerprint, files, precision.

    The kind comes from `rag_model.json`, `config.json` architectures or the
    graph outputs (a warning when the graph disagrees); also normalize, the
    query graph (`query_onnx_file`), and every ONNX file with its size and
    precision (int8 when the graph has MatMulInteger / DynamicQuantizeLinear
    nodes; a query graph, with int8 tables only, shows as fp32 and "query graph
    of X").
    """
    from rag_cli.models.manage import model_info

    res = model_info(name, _precision(opts))
    if json_out:
        return emit_json(res)
    show.info(res)


@models_app.command("verify")
@options(PRECISION, JSON_ONLY)
def models_verify(name: NameArg, *, opts, json_out):
    """Load a model and check it ranks a relevant passage above an irrelevant one (English, Chinese); exit 1 if not.

    Scores an English and a Chinese query against a relevant and an
    irrelevant passage (cosines for a bi-encoder, logits for a
    cross-encoder). Exit 1 if a relevant passage does not score higher, 2 if
    the folder is not a model (the message names the missing file).

    Example: `rag models verify multilingual-e5-small --precision fp32`.
    The default model's scores: docs/models.md (Measured: models verify and quantize).
    """
    from rag_cli.models.manage import verify_model

    res = verify_model(name, _precision(opts))
    if json_out:
        emit_json(res)
    else:
        show.verified(res)
    if not res["ok"]:
        if not json_out:
            error("sanity check failed: a relevant passage did not score above an irrelevant one")
        raise typer.Exit(1)


@models_app.command("quantize")
@options(OUTPUT)
def models_quantize(directory: DirArg, out: QuantizeOutOpt = None, calibrate: CalibrateOpt = False, *, json_out,
                    quiet):
    r"""Dynamic int8 quantisation (per channel): writes model_quantized.onnx beside the float32 graph (and, for an embedder, its query graph model_quantized_query.onnx).

    onnxruntime dynamic int8, per
    channel (`rag_cli/models/quantize.py`: weight MatMuls and embedding Gathers
    quantised, activation x activation MatMuls and each layer's FFN
    down-projection kept in float32). `--calibrate`: for a graph fused by
    onnxruntime's transformer optimizer, the calibrated recipe of the default
    model instead (each FFN's 4 outlier channels in float32, the rest of the
    FFN, down-projection included, int8; see docs/models.md);
    an unfused graph (what `optimum-cli export onnx` writes), or one with
    inputs other than input_ids, attention_mask and token_type_ids, gets the
    first recipe. The file is named as optimum names it, `model_quantized.onnx`
    beside the float32 graph (`onnx/model_quantized.onnx` for the `onnx/`
    layout), which `--precision int8` picks. An embedder also gets its query
    graph, `model_quantized_query.onnx` beside it (the float32 graph with int8
    embedding tables; see docs/models.md). Without `--out` these files are
    added to DIR (each written atomically, the query graph last); with `--out`
    a complete int8 model folder (every file but the float32 graph) is built in
    a temporary folder and renamed into place. Nothing is written if the graph
    cannot be run. If another int8 graph in DIR comes first for `--precision int8`
    (the default model's `model_int8.onnx`), it says so (`shadowed_by` in
    `--json`); use `--out` for a folder of its own. It reports the sizes, the
    MatMuls kept in float32 and the agreement with float32 on the probe texts.
    Example: `rag models quantize ~/.cache/rag-cli/models/multilingual-e5-small --out /tmp/e5q --calibrate`.
    Sizes and agreement measured on the default model: docs/models.md (Measured: models verify and quantize).
    """
    from rag_cli.models.manage import quantize_model

    res = quantize_model(directory, out, calibrate=calibrate)
    if json_out:
        emit_json(res)
    elif not quiet:
        show.quantized(res)


@models_app.command("pull")
@options(OUTPUT)
def models_pull(hf_id: HfIdArg, revision: RevisionOpt = None, out: PullOutOpt = None, *, json_out, quiet):
    r"""Download an ONNX export (graphs, tokenizer, config) from the Hugging Face Hub (needs huggingface_hub, the hub extra; online).

    Needs `pip install 'rag-cli\[hub]'` and a network: downloads
    `model.onnx`, `model_quantized.onnx` (also under `onnx/`), external
    weights and the JSON files (config, tokenizer, sentence-transformers
    settings) with `huggingface_hub.snapshot_download` into
    `$RAG_CACHE/models/OWNER--NAME`, atomically. Without a `rag_model.json`
    in the repo it writes one from the sentence-transformers files (pooling,
    Normalize, prompts). Then `--model OWNER/NAME` finds it, e.g.
    `rag models pull Xenova/ms-marco-MiniLM-L-6-v2; rag rerank "..." --model Xenova/ms-marco-MiniLM-L-6-v2`.
    Offline (`HF_HUB_OFFLINE=1`, or the Hub unreachable): exit 1; a repo without
    an ONNX export: exit 2.
    """
    from rag_cli.models.manage import pull_model

    res = pull_model(hf_id, revision, out)
    if json_out:
        emit_json(res)
    elif not quiet:
        show.pulled(res)
