"""Activation outliers of a fused transformer graph, handled before dynamic int8.

Dynamic int8 (:mod:`rag_cli.models.convert.quantize`) gives each MatMul
input one uint8 scale per batch, set by its largest value. Transformer
encoders have a few *massive activations* (Sun et al. 2024, "Massive
Activations in Large Language Models", arXiv:2402.17762): on the ``<s>`` and
``</s>`` tokens, one or two channels of the FFN's GELU output reach 10-60x
the typical value. One scale for all then leaves a handful of levels for
every other value.

:func:`split_ffn_outliers` (after LLM.int8(), Dettmers et al. 2022,
arXiv:2208.07339) rewrites the graph, float-exactly, before quantisation:
each FFN's ``k`` largest GELU channels, measured by a calibration run of the
float32 graph on :data:`CALIBRATION_TEXTS` (English and Chinese queries and
passages; the outliers sit on the special tokens, so they show on any text),
move to a float32 side branch (up-projection columns, GELU and
down-projection rows of those channels) whose result is added back; the rest
of the FFN, including the down-projection, is then quantised.

The graph must be fused by onnxruntime's transformer optimizer (``BiasGelu``
FFNs; :func:`rag_cli.models.convert.e5.fuse_transformer`). A graph without
that pattern is left as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

#: Channels of each FFN kept in float32 by :func:`split_ffn_outliers`.
OUTLIER_CHANNELS = 4

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

    ``gelu``: FFN output-of-GELU name -> (F,) float64.
    """

    gelu: dict[str, np.ndarray] = field(default_factory=dict)


def initializers(graph) -> dict:
    """Initializer name -> its ``onnx.TensorProto``."""
    return {i.name: i for i in graph.initializer}


def tensor_readers(graph) -> dict[str, list]:
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
    consts = initializers(g)
    producer = {o: n for n in g.node for o in n.output}
    users = tensor_readers(g)
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


def peak_activations(model, feeds: Sequence[dict[str, np.ndarray]], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Run the float32 ``model`` on ``feeds`` and record the largest
    |activation| per channel (last axis) of each tensor in ``names``.

    Args:
        model: ``onnx.ModelProto`` with its weights loaded (not modified).
        feeds: input dicts, e.g. from :func:`calibration_feeds`.
        names: float tensors of the graph.

    Returns:
        name -> (channels,) float64.

    Raises:
        onnxruntime errors if the graph does not run on the feeds.
    """
    import onnx
    import onnxruntime as ort

    names = list(names)
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
    return peak


def calibrate(model, feeds: Sequence[dict[str, np.ndarray]]) -> Calibration:
    """The largest |activation| per channel of each FFN's GELU output
    (:func:`peak_activations`) of the float32 ``model`` on ``feeds``.

    Raises:
        onnxruntime errors if the graph does not run on the feeds.
    """
    return Calibration(gelu=peak_activations(model, feeds, [f.gelu.output[0] for f in find_ffns(model)]))


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
    consts = initializers(g)
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
    replace_nodes(model, replace)
    del alive
    return keep_float


def replace_nodes(model, replace: dict[int, list]) -> None:
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
