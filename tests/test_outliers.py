"""The calibrated int8 recipe (rag_cli.models.convert.outliers): on a small
fused encoder with a planted massive activation, the rewrites keep the
float32 function, find the planted channel, and make int8 agree with float32
better than plain dynamic int8. SmoothQuant, which only the benchmarks use,
is checked here too (bench/int8_lib.py)."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import QuantType, quantize_dynamic

from rag_cli.models.convert import e5 as e5_convert
from rag_cli.models.convert import outliers
from rag_cli.models.convert.quantize import QUANTIZED_OPS, quantize_int8
from tiny_models import VOCAB, _tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import int8_lib  # noqa: E402  (bench/int8_lib.py)

H, HEADS, F, LAYERS = 64, 4, 256, 2
PLANTED = {0: 37, 1: 200}  # layer -> FFN channel whose GELU output is ~40 on every token


def _header() -> dict:
    return dict(hidden_size=H, num_attention_heads=HEADS, intermediate_size=F, num_hidden_layers=LAYERS,
                vocab_size=len(VOCAB), max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12)


def _tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = e5_convert._tensor_shapes(_header())
    t = {k: (rng.standard_normal(s) * (0.02 if len(s) == 2 else 0.1)).astype(np.float32) for k, s in shapes.items()}
    for k in t:
        if k.endswith("ln.w"):
            t[k] = 1 + t[k]
    for layer, ch in PLANTED.items():
        t[f"l{layer}.fi.b"][ch] = 40.0  # GELU(40 + small) ~ 40: a massive activation
    return t


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """A model folder (`rag models quantize` takes it) with the small fused encoder."""
    d = tmp_path_factory.mktemp("outliers")
    onnx.save_model(e5_convert.build_onnx(_header(), _tensors()), str(d / "model.onnx"))
    e5_convert.fuse_transformer(d / "model.onnx", d / "model.onnx", _header())
    _tokenizer(d / "tokenizer.json")
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": H, "pad_token_id": 0}))
    (d / "rag_model.json").write_text(json.dumps({"kind": "embedder", "pooling": "mean", "max_length": 64}))
    return d


def _feeds(n: int = 6, seq: int = 20, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, len(VOCAB), size=(n, seq), dtype=np.int64)
    mask = np.ones_like(ids)
    for i in range(n):
        mask[i, seq - 3 * i:] = 0  # right padding of different lengths
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _run(model_or_path, feeds) -> np.ndarray:
    src = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    (out,) = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(["last_hidden_state"], feeds)
    return out


def _pooled_cos(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    pa, pb = (a * m).sum(1), (b * m).sum(1)
    return (pa * pb).sum(1) / (np.linalg.norm(pa, axis=1) * np.linalg.norm(pb, axis=1))


ALL_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def _calibrated(fused):
    """(the fused graph, its GELU calibration, the peaks of its smoothable inputs)."""
    model = onnx.load(str(fused / "model.onnx"))
    names = [i.name for i in model.graph.input]
    calib, peaks = int8_lib.calibrate_inputs(model, outliers.calibration_feeds(fused / "tokenizer.json", names))
    return model, calib, peaks


def test_finds_ffns_and_smoothable_inputs(fused):
    model = onnx.load(str(fused / "model.onnx"))
    ffns = outliers.find_ffns(model)
    assert len(ffns) == LAYERS
    assert all(f.up.op_type == f.down.op_type == "MatMul" and f.gelu.op_type == "BiasGelu" for f in ffns)
    inputs = int8_lib.smoothable_inputs(model)
    kinds = collections.Counter(n.op_type for nodes in inputs.values() for n in nodes)
    assert kinds == {"Attention": LAYERS, "MatMul": LAYERS}


def test_calibration_finds_the_planted_channel(fused):
    model, calib, peaks = _calibrated(fused)
    for f, (layer, ch) in zip(outliers.find_ffns(model), sorted(PLANTED.items())):
        peak = calib.gelu[f.gelu.output[0]]
        assert peak.shape == (F,) and int(np.argmax(peak)) == ch and peak[ch] > 35
    assert len(peaks) == 2 * LAYERS and all(v.shape == (H,) and (v > 0).all() for v in peaks.values())
    alone = outliers.calibrate(model, outliers.calibration_feeds(fused / "tokenizer.json", ALL_INPUTS))
    assert alone.gelu.keys() == calib.gelu.keys()
    assert all(np.allclose(alone.gelu[k], calib.gelu[k], rtol=1e-6) for k in calib.gelu)


def test_rewrites_keep_the_float32_function(fused):
    feeds = _feeds()
    want = _run(fused / "model.onnx", feeds)
    model, calib, peaks = _calibrated(fused)
    assert int8_lib.smooth_inputs(model, peaks) == 2 * LAYERS
    kept = outliers.split_ffn_outliers(model, calib, k=3)
    assert len(kept) == 2 * LAYERS and all(n.endswith("_outlier") for n in kept)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert (ops["BiasGelu"], ops["Attention"]) == (2 * LAYERS, LAYERS)
    got = _run(model, feeds)
    valid = feeds["attention_mask"].astype(bool)
    np.testing.assert_allclose(got[valid], want[valid], atol=2e-4, rtol=1e-4)
    # the planted channels went to the float32 branch
    consts = {t.name: t for t in model.graph.initializer}
    for f in outliers.find_ffns(model):
        if f.up.name.endswith("_outlier"):
            assert onnx.numpy_helper.to_array(consts[f.up.input[1]]).shape == (H, 3)


def test_calibrated_int8_beats_plain_int8(fused, tmp_path):
    feeds = _feeds()
    want = _run(fused / "model.onnx", feeds)
    kept = quantize_int8(fused / "model.onnx", tmp_path / "calibrated.onnx", fused / "tokenizer.json")
    assert len(kept) == 2 * LAYERS and not list(tmp_path.glob("*.outliers.onnx"))  # temporary graph removed
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "calibrated.onnx")).graph.node)
    # FFN up and down (bulk) and attention output int8, Q/K/V in QAttention; only the side branches float32
    assert (ops["MatMulInteger"], ops["QAttention"], ops["MatMul"]) == (3 * LAYERS, LAYERS, 2 * LAYERS)
    quantize_dynamic(fused / "model.onnx", tmp_path / "plain.onnx", op_types_to_quantize=list(QUANTIZED_OPS),
                     per_channel=True, reduce_range=True, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    mask = feeds["attention_mask"]
    cal = 1 - _pooled_cos(_run(tmp_path / "calibrated.onnx", feeds), want, mask)
    plain = 1 - _pooled_cos(_run(tmp_path / "plain.onnx", feeds), want, mask)
    assert cal.mean() < plain.mean() / 3, (cal, plain)


@pytest.mark.parametrize("rewrites, muls, matmuls, int8_matmuls", [
    (("split",), 0, 2 * LAYERS, 3 * LAYERS),  # down-projections int8 (bulk), side branches float32
    (("smooth",), 2 * LAYERS, LAYERS, 2 * LAYERS),  # down-projections stay float32
])
def test_rewrites_one_at_a_time(fused, tmp_path, rewrites, muls, matmuls, int8_matmuls):
    feeds = _feeds()
    want = _run(fused / "model.onnx", feeds)
    int8_lib.quantize_recipe(fused / "model.onnx", tmp_path / "q.onnx", fused / "tokenizer.json", rewrites)
    nodes = onnx.load(str(tmp_path / "q.onnx")).graph.node
    ops = collections.Counter(n.op_type for n in nodes)
    assert sum(n.name.endswith("_smooth") for n in nodes) == muls
    assert (ops["MatMul"], ops["MatMulInteger"]) == (matmuls, int8_matmuls)
    cos = _pooled_cos(_run(tmp_path / "q.onnx", feeds), want, feeds["attention_mask"])
    assert cos.min() > 0.99, cos
    with pytest.raises(ValueError, match=r"rewrites \['smoth'\]: known ones are smooth, split"):
        int8_lib.quantize_recipe(fused / "model.onnx", tmp_path / "x.onnx", fused / "tokenizer.json", "smoth")


def test_graph_without_fused_ffns_is_left_alone(tmp_path):
    model = e5_convert.build_onnx(_header(), _tensors())  # not fused: no BiasGelu
    assert outliers.find_ffns(model) == [] and int8_lib.smoothable_inputs(model) == {}


def test_calibration_feeds_refuse_unknown_inputs(fused):
    with pytest.raises(ValueError, match="position_ids"):
        outliers.calibration_feeds(fused / "tokenizer.json", ["input_ids", "position_ids"])
    (feed, *_) = outliers.calibration_feeds(fused / "tokenizer.json", ["input_ids", "attention_mask"])
    assert set(feed) == {"input_ids", "attention_mask"} and feed["input_ids"].shape[0] == 1


def test_unnamed_nodes_are_rewritten_by_identity(fused, tmp_path):
    """Node names are optional in ONNX: the rewrite must not delete or duplicate unnamed nodes."""
    model = onnx.load(str(fused / "model.onnx"))
    for n in model.graph.node:
        n.name = ""
    onnx.save_model(model, str(tmp_path / "model.onnx"))
    feeds = _feeds()
    want = _run(tmp_path / "model.onnx", feeds)
    calib, peaks = int8_lib.calibrate_inputs(model, outliers.calibration_feeds(fused / "tokenizer.json", ALL_INPUTS))
    int8_lib.smooth_inputs(model, peaks)
    kept = outliers.split_ffn_outliers(model, calib)
    assert len(set(kept)) == 2 * LAYERS and all(kept)
    valid = feeds["attention_mask"].astype(bool)
    np.testing.assert_allclose(_run(model, feeds)[valid], want[valid], atol=2e-4, rtol=1e-4)
    quantize_int8(tmp_path / "model.onnx", tmp_path / "int8.onnx", fused / "tokenizer.json")
    cos = _pooled_cos(_run(tmp_path / "int8.onnx", feeds), want, feeds["attention_mask"])
    assert cos.min() > 0.999, cos


def test_ffns_with_shared_weights_are_left_alone(fused):
    """ALBERT-style sharing: rewriting one FFN's weights would change the other's."""
    model = onnx.load(str(fused / "model.onnx"))
    first, second = outliers.find_ffns(model)
    for a, b in ((first.up, second.up), (first.gelu, second.gelu), (first.down, second.down)):
        b.input[1] = a.input[1]
    assert outliers.find_ffns(model) == []
    feeds = _feeds()
    want = _run(model, feeds)
    calib, peaks = int8_lib.calibrate_inputs(model, outliers.calibration_feeds(fused / "tokenizer.json", ALL_INPUTS))
    int8_lib.smooth_inputs(model, peaks)
    assert outliers.split_ffn_outliers(model, calib) == []
    onnx.checker.check_model(model)
    valid = feeds["attention_mask"].astype(bool)
    np.testing.assert_allclose(_run(model, feeds)[valid], want[valid], atol=2e-4, rtol=1e-4)


def test_cli_quantize_calibrate_flag(fused, tmp_path):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    def quantize(*flags):
        res = CliRunner().invoke(app, ["models", "quantize", str(fused), "--json", *flags])
        assert res.exit_code == 0, (res.stdout, res.stderr)
        return json.loads(res.stdout)

    plain = quantize("--out", str(tmp_path / "plain"))
    assert [n.split("/")[1] for n in plain["fp32_matmuls"]] == [f"encoder.layer.{i}.output.dense"
                                                                  for i in range(LAYERS)]
    calibrated = quantize("--out", str(tmp_path / "calibrated"), "--calibrate")
    assert len(calibrated["fp32_matmuls"]) == 2 * LAYERS
    assert all(n.endswith("_outlier") for n in calibrated["fp32_matmuls"])
    assert calibrated["agreement"]["value"] > 0.999
