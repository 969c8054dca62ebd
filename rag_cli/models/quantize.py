"""Dynamic int8 quantisation of a transformer encoder's ONNX graph.

One function, :func:`quantize_int8`, used both for the default model
(``e5_convert``) and by ``rag models quantize`` for any export, so both get
the same recipe (onnxruntime's ``quantize_dynamic``, see
https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html):

- weight MatMuls, the projections of fused ``Attention`` nodes (onnxruntime's
  transformer optimizer; they become ``QAttention``) and embedding Gathers are quantised **per channel** to
  signed int8 with ``reduce_range`` (7 bits: avoids the u8 x s8 saturation of
  AVX2 CPUs without VNNI); activations are quantised to uint8 at run time,
  one scale per batch;
- MatMuls of two activations (attention scores, attention x values) stay
  float32;
- each layer's FFN down-projection (``.../output/dense/MatMul``, not under
  ``attention``) stays float32: its input, after GELU, has outliers that make
  a per-batch uint8 scale coarse. Measured on multilingual-e5-small (60
  SciFact abstracts, 100 queries): cosine to float32 0.9992 mean / 0.998 min
  with these kept in float32, 0.9960 / 0.993 without;
- with a tokenizer (``rag models quantize --calibrate``, and the default
  model's conversion), a **fused** graph (``BiasGelu`` FFNs) is first
  calibrated and rewritten by :mod:`rag_cli.models.outliers`: each FFN's 4
  massive-activation channels go to a float32 side branch, and the rest of
  the FFN, the down-projection included, is int8. multilingual-e5-small:
  about 10% faster (1,000 SciFact passages, 2 cores: 7.49 passages/s against
  6.67); SciFact dense nDCG@10 0.6553 with int8 queries, 0.6599 with the
  query graph below (fp32 0.6602; ``bench/int8_recipes.py``).
  SmoothQuant (``rewrites=("smooth", "split")``) raises the cosine to
  float32 (0.99940 against 0.99902) but lowers nDCG@10 to 0.6487
  (p = 0.009), so it is not part of ``--calibrate``.

:func:`quantize_query_graph` writes the *query graph* that goes with an int8
graph of an embedder (:mod:`rag_cli.models.folder`): the float32 graph with
only its embedding tables in int8.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

from rag_cli.models import outliers

QUANTIZED_OPS = ("MatMul", "Gather", "Attention")


def is_ffn_down(node_name: str) -> bool:
    """True for a layer's FFN down-projection MatMul.

    Matches both the names ``torch.onnx`` / ``optimum`` exports give
    (``/encoder/layer.3/output/dense/MatMul``, also under ``/bert/`` or
    ``/roberta/``) and the ones ``e5_convert`` gives
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


#: The graph rewrites :func:`quantize_int8` knows (:mod:`rag_cli.models.outliers`), in the order applied.
REWRITES = ("smooth", "split")
#: The calibrated recipe (``rag models quantize --calibrate``, the default model): the outlier split alone.
CALIBRATED = ("split",)


def quantize_int8(src: str | os.PathLike, dst: str | os.PathLike,
                  tokenizer_json: str | os.PathLike | None = None,
                  rewrites: Sequence[str] = CALIBRATED) -> list[str]:
    """Write the dynamic int8 version of the ONNX graph ``src`` to ``dst``.

    The recipe is in the module docstring. ``dst`` is written in place (the
    caller makes it atomic by writing into a temporary folder). A graph with
    its weights in an external-data file (> 2 GB) is written the same way,
    without the outlier rewrite.

    Args:
        src: a float32 ONNX file.
        dst: the int8 ONNX file to write.
        tokenizer_json: the model's tokenizer; with it, a fused graph is
            calibrated and rewritten first (:mod:`rag_cli.models.outliers`).
        rewrites: which rewrites of :data:`REWRITES` to apply, default
            :data:`CALIBRATED`: ``"smooth"``
            (:func:`~rag_cli.models.outliers.smooth_inputs`), ``"split"``
            (:func:`~rag_cli.models.outliers.split_ffn_outliers`; without it
            the FFN down-projections stay float32); a single name may be
            given as a str. Ignored without ``tokenizer_json``; none (``()``):
            the default recipe.

    Returns:
        The names of the MatMul nodes left in float32.

    Raises:
        ValueError: a rewrite not in :data:`REWRITES`.
        onnx / onnxruntime errors if ``src`` is not a readable ONNX graph.
    """
    if isinstance(rewrites, str):
        rewrites = (rewrites,)
    unknown = set(rewrites) - set(REWRITES)
    if unknown:
        raise ValueError(f"rewrites {sorted(unknown)}: known ones are {', '.join(REWRITES)}")
    model, external = _load_graph(src)
    skip = float_matmuls(model)
    inputs = {i.name for i in model.graph.input}
    if (tokenizer_json is not None and rewrites and not external and outliers.find_ffns(model)
            and inputs <= set(outliers.CALIBRATION_INPUTS)):
        calib = outliers.calibrate(model, outliers.calibration_feeds(tokenizer_json, sorted(inputs)))
        if "smooth" in rewrites:
            outliers.smooth_inputs(model, calib)
        if "split" in rewrites:
            kept = outliers.split_ffn_outliers(model, calib)
            # the split FFN down-projections no longer match is_ffn_down: their bulk part is quantised
            skip = kept + [n for n in float_matmuls(model) if n not in kept]
    _quantize_dynamic(model, dst, external, op_types_to_quantize=list(QUANTIZED_OPS), per_channel=True,
                      reduce_range=True, nodes_to_exclude=skip)
    return skip


def quantize_query_graph(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Write the query graph of the float32 ONNX graph ``src`` to ``dst``:
    the same graph with its embedding tables (constant ``Gather`` data) in
    int8, weight-only (``quantize_dynamic`` with ``Gather`` alone: an int8
    ``Gather`` followed by ``DequantizeLinear``); every MatMul stays float32.

    Why: int8 loses more on queries than on passages (a query's few tokens
    share one activation scale with the special tokens' massive activations;
    :mod:`rag_cli.models.outliers`). Queries are few and short, so they can
    run in float32; the int8 embedding table keeps the file and its load time
    close to the int8 graph's. multilingual-e5-small: query cosine to float32
    0.99997 mean (SciFact test queries), 181 MB, loads in 0.6 s to 272 MiB
    RSS (float32 graph: 470 MB, 1.9 s, 550 MiB; int8 graph: 0.4 s, 200 MiB).

    Args:
        src: a float32 ONNX file (external data is read from beside it and
            written beside ``dst``).
        dst: the file to write, in place (the caller makes it atomic).

    Raises:
        onnx / onnxruntime errors if ``src`` is not a readable ONNX graph.
    """
    model, external = _load_graph(src)
    _quantize_dynamic(model, dst, external, op_types_to_quantize=["Gather"], per_channel=False)


def _load_graph(src: str | os.PathLike):
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

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quiet "consider pre-processing" advice on stderr
    try:
        # a ModelProto, not a path: given a path, quantize_dynamic writes "<src>-inferred.onnx"
        # beside the source (which may be read-only, or another folder than dst)
        quantize_dynamic(
            model, Path(dst), weight_type=QuantType.QInt8,
            # fused com.microsoft nodes (Attention, SkipLayerNormalization) have
            # no ONNX type inference; their outputs are float32
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            **({"use_external_data_format": True} if external else {}), **options,
        )
    finally:
        root.setLevel(level)
