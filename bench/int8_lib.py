"""int8 recipes measured by the benchmarks but not shipped: SmoothQuant, alone
or before the FFN outlier split, next to the recipes of
`rag_cli.models.convert.quantize` (the uncalibrated one, and the calibrated
one: the split alone, what `rag models quantize --calibrate` and the default
model use).

SmoothQuant (Xiao et al. 2023, arXiv:2211.10438): the input X of the FFN
up-projection and of the fused attention's Q/K/V projection is divided per
channel by ``s_j = max|X_j|^a / max|W_j|^(1-a)`` (``a`` =
`SMOOTHQUANT_ALPHA`) with a ``Mul`` node, and the weight rows are multiplied
by ``s_j``, so X W is unchanged and the range of X shrinks.

Measured on multilingual-e5-small (`bench/int8_recipes.py`, SciFact, exact
search over 6,025 chunks, 300 queries; float32 nDCG@10 0.6602): the split
with float32-close queries (the query graph) 0.6599, with int8 queries
0.6553; the uncalibrated recipe 0.6562; the split is about 10% faster
(1,000 SciFact passages, 2 cores: 7.49 passages/s against 6.67). SmoothQuant
on top raises the cosine to float32 (chunks 0.99940 against 0.99902) yet
lowers nDCG@10 to 0.6487 (p = 0.009), so it is not shipped. Outlier channels
per FFN, the split alone: cosine to float32 0.99900 mean with 1, 0.99903
with 4, 0.99906 with 16 (64 SciFact passages); SmoothQuant on top: 0.99937
with 4. Alpha 0.5 (the paper's default) did better than 0.8.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from rag_cli.models.convert import outliers, quantize

#: SmoothQuant migration strength.
SMOOTHQUANT_ALPHA = 0.5
#: The rewrites `quantize_recipe` knows, in the order applied.
REWRITES = ("smooth", "split")
#: The shipped calibrated recipe.
CALIBRATED = ("split",)


def smoothable_inputs(model) -> dict[str, list]:
    """Tensor name -> the nodes that multiply it by a constant weight and are
    smoothed: FFN up-projections and fused ``Attention`` (Q/K/V) nodes."""
    consts = outliers.initializers(model.graph)
    out: dict[str, list] = {}
    for f in outliers.find_ffns(model):
        out.setdefault(f.up.input[0], []).append(f.up)
    for n in model.graph.node:
        if n.op_type == "Attention" and len(n.input) > 1 and n.input[1] in consts:
            out.setdefault(n.input[0], []).append(n)
    return out


def calibrate_inputs(model, feeds: Sequence[dict[str, np.ndarray]]
                     ) -> tuple[outliers.Calibration, dict[str, np.ndarray]]:
    """One calibration run for both rewrites: (the GELU peaks the split takes,
    tensor name -> (H,) float64 peaks of each `smoothable_inputs` input)."""
    gelu = [f.gelu.output[0] for f in outliers.find_ffns(model)]
    peak = outliers.peak_activations(model, feeds, gelu + list(smoothable_inputs(model)))
    return (outliers.Calibration(gelu={k: peak[k] for k in gelu}),
            {k: v for k, v in peak.items() if k not in set(gelu)})


def smooth_inputs(model, input_peaks: dict[str, np.ndarray], alpha: float = SMOOTHQUANT_ALPHA) -> int:
    """SmoothQuant the inputs of FFN up-projections and ``Attention`` nodes, in place.

    For each such input X (calibrated max |X_j| = a_j, from `calibrate_inputs`)
    and the weights W of all nodes that read it (max |W_j,:| over them = w_j):
    s_j = a_j^alpha / w_j^(1 - alpha), clipped to [1e-2, 1e2]; a ``Mul`` node
    computes X / s and each W becomes diag(s) W. Call before the split when
    both are used (the split then takes the smoothed input and weights; the
    GELU outputs it was calibrated on do not change).

    Returns:
        The number of inputs smoothed.
    """
    from onnx import helper, numpy_helper

    g = model.graph
    consts = outliers.initializers(g)
    replace: dict[int, list] = {}
    alive = list(g.node)  # protobuf wrappers stay the same objects (and ids) while referenced
    position = {id(node): i for i, node in enumerate(alive)}
    n = 0
    users = outliers.tensor_readers(g)
    for name, nodes in smoothable_inputs(model).items():
        if name not in input_peaks or any(len(users[u.input[1]]) > 1 for u in nodes):
            continue  # not calibrated, or a weight shared with another node: leave it
        ws = [numpy_helper.to_array(consts[u.input[1]]) for u in nodes]
        w_peak = np.max([np.abs(w).max(1) for w in ws], axis=0)
        s = (input_peaks[name] ** alpha / np.maximum(w_peak, 1e-8) ** (1 - alpha)).clip(1e-2, 1e2)
        inv = f"{name}.smooth_inv_scale"
        g.initializer.append(numpy_helper.from_array((1 / s).astype(np.float32), inv))
        mul = helper.make_node("Mul", [name, inv], [f"{name}_smoothed"], name=f"{name}_smooth")
        for u, w in zip(nodes, ws):
            consts[u.input[1]].CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), u.input[1]))
            u.input[0] = mul.output[0]
        first = min(nodes, key=lambda u: position[id(u)])
        replace.setdefault(id(first), [first]).insert(-1, mul)  # the Mul goes right before its first reader
        n += 1
    outliers.replace_nodes(model, replace)
    del alive
    return n


def quantize_recipe(src: str | os.PathLike, dst: str | os.PathLike, tokenizer_json: str | os.PathLike | None,
                    rewrites: Sequence[str] = CALIBRATED) -> list[str]:
    """`rag_cli.models.convert.quantize.quantize_int8` with the rewrites ``rewrites``
    (a subset of `REWRITES`; a single name may be given as a str): none, the
    uncalibrated recipe; ``("split",)``, the shipped calibrated one (run by the
    package itself); with ``"smooth"``, SmoothQuant first. Returns the MatMuls
    left in float32.

    Raises:
        ValueError: a rewrite not in `REWRITES`, or SmoothQuant asked of a graph
            the calibrated recipe does not apply to (`quantize.can_calibrate`)
            or without a tokenizer.
    """
    if isinstance(rewrites, str):
        rewrites = (rewrites,)
    unknown = set(rewrites) - set(REWRITES)
    if unknown:
        raise ValueError(f"rewrites {sorted(unknown)}: known ones are {', '.join(REWRITES)}")
    if "smooth" not in rewrites:
        return quantize.quantize_int8(src, dst, tokenizer_json if "split" in rewrites else None)
    model, external = quantize.load_graph(src)
    if tokenizer_json is None or not quantize.can_calibrate(model, external):
        raise ValueError(f"{src}: SmoothQuant needs a tokenizer and a fused graph with its weights inside")
    inputs = sorted(i.name for i in model.graph.input)
    calib, input_peaks = calibrate_inputs(model, outliers.calibration_feeds(tokenizer_json, inputs))
    smooth_inputs(model, input_peaks)
    skip = quantize.split_outliers(model, calib) if "split" in rewrites else quantize.float_matmuls(model)
    quantize.write_int8(model, dst, external, skip)
    return skip
