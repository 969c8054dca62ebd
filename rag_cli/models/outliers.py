"""Activation outliers of a fused transformer graph, handled before dynamic int8.

Dynamic int8 (:mod:`rag_cli.models.quantize`) gives each MatMul input one
uint8 scale per batch, set by its largest value. Transformer encoders have a
few *massive activations* (Sun et al. 2024, "Massive Activations in Large
Language Models", arXiv:2402.17762): on the ``<s>`` and ``</s>`` tokens, one
or two channels reach 10-60x the typical value. In multilingual-e5-small the
FFN's GELU output has one such channel per layer (67.5 against 4.9 for the
next channel in layer 4), and the attention block's LayerNorm output, which
feeds the FFN, has one such hidden dimension (up to 44 against 10). One
scale for all then leaves a handful of levels for every other value.

Two float-exact graph rewrites fix this before quantisation, both measured
from a calibration run of the float32 graph on :data:`CALIBRATION_TEXTS`
(English and Chinese queries and passages; the outliers sit on the special
tokens, so they show on any text):

- :func:`split_ffn_outliers` (after LLM.int8(), Dettmers et al. 2022,
  arXiv:2208.07339): each FFN's ``k`` largest GELU channels move to a float32
  side branch (up-projection columns, GELU and down-projection rows of those
  channels) whose result is added back; the rest of the FFN, including the
  down-projection, is then quantised.
- :func:`smooth_inputs` (SmoothQuant, Xiao et al. 2023, arXiv:2211.10438):
  the input X of the FFN up-projection and of the fused attention's Q/K/V
  projection is divided per channel by ``s_j = max|X_j|^a / max|W_j|^(1-a)``
  (``a`` = :data:`SMOOTHQUANT_ALPHA`) with a ``Mul`` node, and the weight rows
  are multiplied by ``s_j``, so X W is unchanged and the range of X shrinks.

The graph must be fused by onnxruntime's transformer optimizer (``BiasGelu``
FFNs, ``Attention`` nodes; :func:`rag_cli.models.e5_convert.fuse_transformer`).
A graph without that pattern is left as it is.

``rag models quantize --calibrate`` and the default model's conversion apply
the split alone (:data:`rag_cli.models.quantize.CALIBRATED`).
multilingual-e5-small, SciFact dense nDCG@10 (``bench/int8_recipes.py``,
exact search over 6,025 chunks, 300 queries; float32 0.6602): split chunks
with float32-close queries (the query graph,
:func:`rag_cli.models.quantize.quantize_query_graph`) 0.6599, with int8
queries 0.6553; the uncalibrated recipe 0.6562; the split is about 10%
faster. SmoothQuant on top raises the cosine to float32 (chunks 0.99940
against 0.99902) yet lowers nDCG@10 to 0.6487 (p = 0.009), so it is
available to ``quantize_int8(rewrites=...)`` for measurement only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

#: Channels of each FFN kept in float32 by :func:`split_ffn_outliers`.
#: e5-small, the split alone: cosine to float32 0.99900 mean with 1, 0.99903 with 4, 0.99906 with 16
#: (64 SciFact passages); SmoothQuant on top: 0.99937 with 4.
OUTLIER_CHANNELS = 4
#: SmoothQuant migration strength; 0.5 is the paper's default. e5-small: 0.5 better than 0.8.
SMOOTHQUANT_ALPHA = 0.5

#: Texts of the calibration run (special tokens and ordinary text in both languages).
CALIBRATION_TEXTS = (
    "query: how does HNSW choose the neighbours of a new node?",
    "passage: Gradient descent updates the parameters in the direction of the negative gradient of the loss.",
    "passage: The cat sat on the mat. It was happy, and the dog slept by the door.",
    "query: 如何重置我的密码？",
    "passage: 北京是中华人民共和国的首都，也是全国的政治、文化和国际交往中心。",
    "passage: 长城是中国古代的军事防御工程，全长两万多公里，始建于春秋战国时期。",
    "passage: Aspirin irreversibly inhibits cyclooxygenase-1 (COX-1); 81 mg daily lowers the risk of myocardial "
    "infarction by 22% (95% CI 0.71-0.85).",
    "def search(index, query, k=10):\n    return index.knn_query(query, k=k)",
)


#: Graph inputs :func:`calibration_feeds` knows how to fill.
CALIBRATION_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class Ffn:
    """One fused FFN: ``MatMul(x, W_in) -> BiasGelu(., b) -> MatMul(., W_out)``."""

    up: object  # onnx.NodeProto
    gelu: object
    down: object


@dataclass
class Calibration:
    """Largest |activation| per channel, from :func:`calibrate`.

    ``gelu``: FFN output-of-GELU name -> (F,) float64; ``inputs``: tensor name
    -> (H,) float64 for each input of an FFN up-projection or ``Attention``.
    """

    gelu: dict[str, np.ndarray] = field(default_factory=dict)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


def _consts(graph) -> dict:
    return {i.name: i for i in graph.initializer}


def _users(graph) -> dict[str, list]:
    """Tensor name -> the nodes that read it."""
    users: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    return users


def find_ffns(model) -> list[Ffn]:
    """The fused FFNs of ``model`` (``onnx.ModelProto``), in graph order.

    A ``BiasGelu`` whose input comes only from a MatMul by a constant weight
    and whose output goes only to one MatMul by a constant weight; FFNs whose
    weights or bias other nodes also read are left out.
    """
    g = model.graph
    consts = _consts(g)
    producer = {o: n for n in g.node for o in n.output}
    users = _users(g)
    found = []
    for n in g.node:
        if n.op_type != "BiasGelu" or n.input[1] not in consts:
            continue
        up = producer.get(n.input[0])
        down = users.get(n.output[0], [])
        if (up is None or up.op_type != "MatMul" or up.input[1] not in consts or len(users[up.output[0]]) != 1
                or len(down) != 1 or down[0].op_type != "MatMul" or down[0].input[1] not in consts):
            continue
        if any(len(users[w]) > 1 for w in (up.input[1], n.input[1], down[0].input[1])):
            continue  # weights shared with another node (ALBERT-style): rewriting them would change that node
        found.append(Ffn(up, n, down[0]))
    return found


def smoothable_inputs(model) -> dict[str, list]:
    """Tensor name -> the nodes that multiply it by a constant weight and are
    smoothed: FFN up-projections and fused ``Attention`` (Q/K/V) nodes."""
    consts = _consts(model.graph)
    out: dict[str, list] = {}
    for f in find_ffns(model):
        out.setdefault(f.up.input[0], []).append(f.up)
    for n in model.graph.node:
        if n.op_type == "Attention" and len(n.input) > 1 and n.input[1] in consts:
            out.setdefault(n.input[0], []).append(n)
    return out


def calibration_feeds(tokenizer_json: str | os.PathLike, input_names: Sequence[str],
                      texts: Sequence[str] = CALIBRATION_TEXTS, max_length: int = 512) -> list[dict[str, np.ndarray]]:
    """One feed per text (batch of 1, no padding) for a graph with these inputs.

    Returns:
        dicts of (1, L) int64 arrays: ``input_ids``, ``attention_mask`` (ones),
        ``token_type_ids`` (zeros), each only if the graph declares it.

    Raises:
        ValueError: the graph has an input other than those three.
    """
    from rag_cli.models.tokens import load_tokenizer

    other = set(input_names) - set(CALIBRATION_INPUTS)
    if other:
        raise ValueError(f"cannot calibrate a graph with inputs {sorted(other)}")
    tok = load_tokenizer(tokenizer_json, max_length)
    feeds = []
    for t in texts:
        ids = np.asarray([tok.encode(t).ids], dtype=np.int64)
        full = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        feeds.append({k: v for k, v in full.items() if k in input_names})
    return feeds


def calibrate(model, feeds: Sequence[dict[str, np.ndarray]]) -> Calibration:
    """Run the float32 ``model`` on ``feeds`` and record the largest
    |activation| per channel of each FFN's GELU output and of each smoothable
    input (:func:`smoothable_inputs`).

    Args:
        model: ``onnx.ModelProto`` with its weights loaded (not modified).
        feeds: input dicts, e.g. from :func:`calibration_feeds`.

    Raises:
        onnxruntime errors if the graph does not run on the feeds.
    """
    import onnx
    import onnxruntime as ort

    ffns = find_ffns(model)
    names = [f.gelu.output[0] for f in ffns] + list(smoothable_inputs(model))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    for n in names:
        if n not in have:
            probe.graph.output.append(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    del probe
    peak: dict[str, np.ndarray] = {}
    for feed in feeds:
        for name, arr in zip(names, sess.run(names, feed)):
            a = np.abs(arr.reshape(-1, arr.shape[-1])).max(0).astype(np.float64)
            peak[name] = np.maximum(peak[name], a) if name in peak else a
    gelu = {f.gelu.output[0] for f in ffns}
    return Calibration(gelu={k: v for k, v in peak.items() if k in gelu},
                       inputs={k: v for k, v in peak.items() if k not in gelu})


def split_ffn_outliers(model, calib: Calibration, k: int = OUTLIER_CHANNELS) -> list[str]:
    """Move each FFN's ``k`` channels of largest calibrated GELU output into a
    float32 side branch, in place (module docstring).

    Each FFN becomes ``<up>_bulk -> <gelu>_bulk -> <down>_bulk`` plus
    ``<up>_outlier -> <gelu>_outlier -> <down>_outlier`` and an ``Add``
    (``<down>_sum``) that writes the old output name, so the graph computes
    the same function up to float32 summation order.

    Args:
        model: ``onnx.ModelProto`` with its weights loaded; changed in place.
        calib: from :func:`calibrate` on the same graph.
        k: channels per FFN (fewer if the FFN is narrower than 2k).

    Returns:
        The names of the side-branch MatMuls, to keep in float32.
    """
    from onnx import helper, numpy_helper

    g = model.graph
    consts = _consts(g)
    keep_float: list[str] = []
    replace: dict[int, list] = {}
    alive = list(g.node)  # protobuf wrappers stay the same objects (and ids) while referenced
    for f in find_ffns(model):
        w_in = numpy_helper.to_array(consts[f.up.input[1]])  # (H, F)
        b = numpy_helper.to_array(consts[f.gelu.input[1]])  # (F,)
        w_out = numpy_helper.to_array(consts[f.down.input[1]])  # (F, H)
        width = w_in.shape[1]
        n_out = min(k, width // 2)
        if n_out < 1:
            continue
        peak = calib.gelu[f.gelu.output[0]]
        outlier = np.sort(np.argsort(-peak, kind="stable")[:n_out])
        bulk = np.setdiff1d(np.arange(width), outlier)
        nodes = []
        # node names are optional in ONNX: fall back to the (unique) output names
        up_name, gelu_name, down_name = (n.name or n.output[0] for n in (f.up, f.gelu, f.down))
        for tag, idx in (("bulk", bulk), ("outlier", outlier)):
            w_up, b_up, w_down = (f"{f.up.input[1]}.{tag}", f"{f.gelu.input[1]}.{tag}", f"{f.down.input[1]}.{tag}")
            g.initializer.extend([numpy_helper.from_array(np.ascontiguousarray(w_in[:, idx]), w_up),
                                  numpy_helper.from_array(np.ascontiguousarray(b[idx]), b_up),
                                  numpy_helper.from_array(np.ascontiguousarray(w_out[idx, :]), w_down)])
            up = helper.make_node("MatMul", [f.up.input[0], w_up], [f"{f.up.output[0]}_{tag}"], name=f"{up_name}_{tag}")
            gelu = helper.make_node("BiasGelu", [up.output[0], b_up],
                                    [f"{f.gelu.output[0]}_{tag}"], name=f"{gelu_name}_{tag}", domain="com.microsoft")
            down = helper.make_node("MatMul", [gelu.output[0], w_down],
                                    [f"{f.down.output[0]}_{tag}"], name=f"{down_name}_{tag}")
            nodes += [up, gelu, down]
            if tag == "outlier":
                keep_float += [up.name, down.name]
        nodes.append(helper.make_node("Add", [nodes[2].output[0], nodes[5].output[0]], [f.down.output[0]],
                                      name=f"{down_name}_sum"))
        replace[id(f.up)] = nodes
        replace[id(f.gelu)] = replace[id(f.down)] = []
    _rewrite(model, replace)
    del alive
    return keep_float


def smooth_inputs(model, calib: Calibration, alpha: float = SMOOTHQUANT_ALPHA) -> int:
    """SmoothQuant the inputs of FFN up-projections and ``Attention`` nodes, in place.

    For each such input X (calibrated max |X_j| = a_j) and the weights W of
    all nodes that read it (max |W_j,:| over them = w_j):
    s_j = a_j^alpha / w_j^(1 - alpha), clipped to [1e-2, 1e2]; a ``Mul`` node
    computes X / s and each W becomes diag(s) W. Call before
    :func:`split_ffn_outliers` when both are used (the split then takes the
    smoothed input and weights; the GELU outputs it was calibrated on do not
    change).

    Returns:
        The number of inputs smoothed.
    """
    from onnx import helper, numpy_helper

    g = model.graph
    consts = _consts(g)
    replace: dict[int, list] = {}
    alive = list(g.node)  # protobuf wrappers stay the same objects (and ids) while referenced
    position = {id(node): i for i, node in enumerate(alive)}
    n = 0
    users = _users(g)
    for name, nodes in smoothable_inputs(model).items():
        if name not in calib.inputs or any(len(users[u.input[1]]) > 1 for u in nodes):
            continue  # not calibrated, or a weight shared with another node: leave it
        ws = [numpy_helper.to_array(consts[u.input[1]]) for u in nodes]
        w_peak = np.max([np.abs(w).max(1) for w in ws], axis=0)
        s = (calib.inputs[name] ** alpha / np.maximum(w_peak, 1e-8) ** (1 - alpha)).clip(1e-2, 1e2)
        inv = f"{name}.smooth_inv_scale"
        g.initializer.append(numpy_helper.from_array((1 / s).astype(np.float32), inv))
        mul = helper.make_node("Mul", [name, inv], [f"{name}_smoothed"], name=f"{name}_smooth")
        for u, w in zip(nodes, ws):
            consts[u.input[1]].CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), u.input[1]))
            u.input[0] = mul.output[0]
        first = min(nodes, key=lambda u: position[id(u)])
        replace.setdefault(id(first), [first]).insert(-1, mul)  # the Mul goes right before its first reader
        n += 1
    _rewrite(model, replace)
    del alive
    return n


def _rewrite(model, replace: dict[int, list]) -> None:
    """Replace nodes (key: ``id()`` of a node of ``model.graph.node``; value: the
    nodes to put in its place), then drop unused initializers."""
    g = model.graph
    order = []
    for node in g.node:
        order += replace.get(id(node), [node])
    del g.node[:]
    g.node.extend(order)
    used = {i for node in g.node for i in node.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
