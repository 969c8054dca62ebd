"""Dynamic int8 quantisation of a transformer encoder's ONNX graph.

One function, :func:`quantize_int8`, used both for the default model
(:mod:`rag_cli.models.convert.e5`) and by ``rag models quantize`` for any
export, so both get the same recipe (onnxruntime's ``quantize_dynamic``, see
https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html):

- weight MatMuls, the projections of fused ``Attention`` nodes (onnxruntime's
  transformer optimizer; they become ``QAttention``) and embedding Gathers
  are quantised **per channel** to signed int8 with ``reduce_range`` (7 bits:
  avoids the u8 x s8 saturation of AVX2 CPUs without VNNI); activations are
  quantised to uint8 at run time, one scale per batch;
- MatMuls of two activations (attention scores, attention x values) stay
  float32;
- each layer's FFN down-projection (``.../output/dense/MatMul``, not under
  ``attention``) stays float32: its input, after GELU, has outliers that make
  a per-batch uint8 scale coarse;
- with a tokenizer (``rag models quantize --calibrate``, and the default
  model's conversion), a **fused** graph (``BiasGelu`` FFNs) is first
  calibrated and rewritten by :mod:`rag_cli.models.convert.outliers`: each
  FFN's outlier channels go to a float32 side branch, and the rest of the
  FFN, the down-projection included, is int8.

:func:`quantize_query_graph` writes the *query graph* that goes with an int8
graph of an embedder (:mod:`rag_cli.models.folder`): the float32 graph with
only its embedding tables in int8.

onnxruntime's tools log through :mod:`logging`; :func:`quiet_logging` keeps
their chatter off stderr and leaves the process's logging as it found it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Iterator

from rag_cli.models.convert import outliers

QUANTIZED_OPS = ("MatMul", "Gather", "Attention")


@contextlib.contextmanager
def quiet_logging(*names: str) -> Iterator[None]:
    """Run onnxruntime's tools with the root logger and the loggers ``names``
    at ERROR, then restore their levels and the root logger's handlers.

    The handlers matter: ``quantize_dynamic`` calls the module function
    ``logging.warning``, which on a root logger without handlers first calls
    ``logging.basicConfig()`` and so leaves a stderr handler behind; every
    library that sets its own logger to DEBUG (bm25s does) would then print
    its debug lines. Handlers added meanwhile are removed (not closed: a
    ``StreamHandler`` does not own its stream), handlers removed are put back.
    """
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(n) for n in names)]
    levels = [lg.level for lg in loggers]
    handlers = list(root.handlers)
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)


def is_ffn_down(node_name: str) -> bool:
    """True for a layer's FFN down-projection MatMul.

    Matches both the names ``torch.onnx`` / ``optimum`` exports give
    (``/encoder/layer.3/output/dense/MatMul``, also under ``/bert/`` or
    ``/roberta/``) and the ones :mod:`rag_cli.models.convert.e5` gives
    (``/encoder.layer.3.output.dense/MatMul``); the attention output
    projection (``.../attention/output/dense/MatMul``) does not match.
    """
    dotted = node_name.replace("/", ".")
    return dotted.endswith("output.dense.MatMul") and "attention" not in dotted


def float_matmuls(model) -> list[str]:
    """Names of the MatMul nodes that :func:`quantize_int8` keeps in float32.

    Args:
        model: an ``onnx.ModelProto`` (external data need not be loaded).

    Returns:
        The MatMuls whose second input is not a constant weight (activation
        x activation) plus the FFN down-projections (:func:`is_ffn_down`), in
        graph order.
    """
    consts = {i.name for i in model.graph.initializer}
    return [
        n.name for n in model.graph.node
        if n.op_type == "MatMul" and (n.input[1] not in consts or is_ffn_down(n.name))
    ]


def can_calibrate(model, external: bool) -> bool:
    """True if the calibrated recipe applies to ``model``: weights in the
    file (not external data), fused FFNs (:func:`outliers.find_ffns`) and only
    inputs :func:`outliers.calibration_feeds` can fill."""
    inputs = {i.name for i in model.graph.input}
    return not external and bool(outliers.find_ffns(model)) and inputs <= set(outliers.CALIBRATION_INPUTS)


def split_outliers(model, calib: outliers.Calibration) -> list[str]:
    """:func:`outliers.split_ffn_outliers` on ``model`` (in place); returns the
    MatMuls to keep in float32 afterwards: the side branches, then the other
    :func:`float_matmuls` (the split down-projections no longer match
    :func:`is_ffn_down`: their bulk part is quantised)."""
    kept = outliers.split_ffn_outliers(model, calib)
    return kept + [n for n in float_matmuls(model) if n not in kept]


def quantize_int8(src: str | os.PathLike, dst: str | os.PathLike,
                  tokenizer_json: str | os.PathLike | None = None) -> list[str]:
    """Write the dynamic int8 version of the ONNX graph ``src`` to ``dst``.

    The recipe is in the module docstring. ``dst`` is written in place (the
    caller makes it atomic by writing into a temporary folder). A graph with
    its weights in an external-data file (> 2 GB) is written the same way,
    without the outlier rewrite.

    Args:
        src: a float32 ONNX file.
        dst: the int8 ONNX file to write.
        tokenizer_json: the model's tokenizer; with it, a fused graph is
            calibrated and its FFN outliers split off first
            (:mod:`rag_cli.models.convert.outliers`); without it the FFN
            down-projections stay float32.

    Returns:
        The names of the MatMul nodes left in float32.

    Raises:
        onnx / onnxruntime errors if ``src`` is not a readable ONNX graph.
    """
    model, external = load_graph(src)
    skip = float_matmuls(model)
    if tokenizer_json is not None and can_calibrate(model, external):
        inputs = sorted(i.name for i in model.graph.input)
        skip = split_outliers(model, outliers.calibrate(model, outliers.calibration_feeds(tokenizer_json, inputs)))
    write_int8(model, dst, external, skip)
    return skip


def write_int8(model, dst: str | os.PathLike, external: bool, skip: list[str]) -> None:
    """The int8 step of :func:`quantize_int8`: ``model`` quantised (module
    docstring) into ``dst``, the MatMuls ``skip`` left in float32."""
    _quantize_dynamic(model, dst, external, op_types_to_quantize=list(QUANTIZED_OPS), per_channel=True,
                      reduce_range=True, nodes_to_exclude=skip)


def quantize_query_graph(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Write the query graph of the float32 ONNX graph ``src`` to ``dst``:
    the same graph with its embedding tables (constant ``Gather`` data) in
    int8, weight-only (``quantize_dynamic`` with ``Gather`` alone: an int8
    ``Gather`` followed by ``DequantizeLinear``); every MatMul stays float32.

    Why: int8 loses more on queries than on passages (a query's few tokens
    share one activation scale with the special tokens' massive activations;
    :mod:`rag_cli.models.convert.outliers`). Queries are few and short, so
    they can run in float32; the int8 embedding table keeps the file and its
    load time close to the int8 graph's.

    Args:
        src: a float32 ONNX file (external data is read from beside it and
            written beside ``dst``).
        dst: the file to write, in place (the caller makes it atomic).

    Raises:
        onnx / onnxruntime errors if ``src`` is not a readable ONNX graph.
    """
    model, external = load_graph(src)
    _quantize_dynamic(model, dst, external, op_types_to_quantize=["Gather"], per_channel=False)


def load_graph(src: str | os.PathLike):
    """(onnx.ModelProto with its weights, whether they came from an external-data file)."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if external:
        onnx.load_external_data_for_model(model, str(Path(src).parent))
    return model, external


def _quantize_dynamic(model, dst: str | os.PathLike, external: bool, **options) -> None:
    """onnxruntime ``quantize_dynamic`` of ``model`` into ``dst`` with int8 weights and ``options``;
    external data written beside ``dst`` when the source had it."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_logging():  # "consider pre-processing" advice is not for users
        # a ModelProto, not a path: given a path, quantize_dynamic writes "<src>-inferred.onnx"
        # beside the source (which may be read-only, or another folder than dst)
        quantize_dynamic(
            model, Path(dst), weight_type=QuantType.QInt8,
            # fused com.microsoft nodes (Attention, SkipLayerNormalization) have
            # no ONNX type inference; their outputs are float32
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            **({"use_external_data_format": True} if external else {}), **options,
        )
