"""Where embedding time goes: onnxruntime's CPU kernels at multilingual-e5-small's
shapes, one thread each (as `rag embed` runs them: one batch per core).

    python bench/op_rates.py [--out FILE]

For batches of B sequences of L tokens (B x L about the default budget of
1,024 tokens, and B = 1 at the longest lengths) it times, per encoder layer
(hidden H = 384, 12 heads of 32, FFN F = 1,536; random weights, since speed
does not depend on the values):

- the int8 linear layers as the int8 model runs them
  (`DynamicQuantizeMatMul`: Q/K/V H x 3H, attention output H x H, FFN up
  H x F and down F x H), in GFLOP/s (2 m k n per product);
- the attention core, softmax(Q K^T / sqrt(32)) V over 12 heads
  (4 B L^2 H FLOPs), three ways: inside `QAttention` (the int8 model's op,
  with its per-sequence key lengths; its time minus the Q/K/V
  `DynamicQuantizeMatMul`), onnxruntime's `MultiHeadAttention` without a mask
  (its CPU flash-attention path), and plain `MatMul`-`Softmax`-`MatMul`;
- numpy's float32 2048 x 2048 GEMM on one thread, the reference rate.

Median of 15 runs after one warm-up. Prints a table and writes
`bench/results/op_rates.json`. The machine is shared: compare rates within
one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
H, HEADS, F = 384, 12, 1536
SHAPES = [(1, 512), (2, 512), (3, 340), (8, 128)]


def _session(nodes, inputs, outputs, inits) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _ms(session: ort.InferenceSession, feed: dict, runs: int = 15) -> float:
    """Median milliseconds of `session.run` over `runs` runs, after one warm-up."""
    session.run(None, feed)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def _vi(name: str, shape: list, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def linear_ms(rng, b: int, length: int, k: int, n: int) -> float:
    """One `DynamicQuantizeMatMul` (B, L, k) x (k, n) with int8 per-channel weights."""
    inits = [numpy_helper.from_array(rng.integers(-63, 64, (k, n), dtype=np.int8), "w"),
             numpy_helper.from_array(np.full(n, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(n, np.int8), "wz")]
    node = helper.make_node("DynamicQuantizeMatMul", ["x", "w", "ws", "wz"], ["y"], domain="com.microsoft")
    s = _session([node], [_vi("x", [b, length, k])], [_vi("y", [b, length, n])], inits)
    return _ms(s, {"x": rng.standard_normal((b, length, k)).astype(np.float32)})


def qattention_ms(rng, b: int, length: int) -> float:
    """`DynamicQuantizeLinear` + `QAttention` (int8 Q/K/V projection, fp32 core) with key lengths."""
    inits = [numpy_helper.from_array(rng.integers(-63, 64, (H, 3 * H), dtype=np.int8), "w"),
             numpy_helper.from_array(np.zeros(3 * H, np.float32), "b"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("QAttention", ["xq", "w", "b", "xs", "ws", "m", "xz", "wz"], ["y"],
                              domain="com.microsoft", num_heads=HEADS)]
    s = _session(nodes, [_vi("x", [b, length, H]), _vi("m", [b], TensorProto.INT32)], [_vi("y", [b, length, H])],
                 inits)
    return _ms(s, {"x": rng.standard_normal((b, length, H)).astype(np.float32),
                   "m": np.full((b,), length, np.int32)})


def mha_ms(rng, b: int, length: int) -> float:
    """`MultiHeadAttention` on separate Q, K, V (B, L, H), no mask."""
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=HEADS)
    s = _session([node], [_vi(n, [b, length, H]) for n in "qkv"], [_vi("y", [b, length, H])], [])
    x = rng.standard_normal((b, length, H)).astype(np.float32)
    return _ms(s, {"q": x, "k": x, "v": x})


def unfused_core_ms(rng, b: int, length: int) -> float:
    """`MatMul(Q, K^T)` - `Softmax` - `MatMul(., V)` on (B, heads, L, 32) tensors."""
    d = H // HEADS
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    s = _session(nodes, [_vi(n, [b, HEADS, length, d]) for n in "qkv"], [_vi("y", [b, HEADS, length, d])], [])
    x = rng.standard_normal((b, HEADS, length, d)).astype(np.float32)
    return _ms(s, {"q": x, "k": x, "v": x})


def sgemm_one_thread() -> float:
    """numpy float32 2048^2 GEMM GFLOP/s on one thread (threadpoolctl; numpy's default threads without it)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        threadpool_limits = None
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    with threadpool_limits(1) if threadpool_limits else contextlib.nullcontext():
        a @ a
        best = min(_timed(lambda: a @ a) for _ in range(5))
    return 2 * 2048**3 / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "op_rates.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    res: dict = {"machine": platform.processor() or platform.machine(), "onnxruntime": ort.__version__,
                 "load_before": os.getloadavg()[0], "sgemm_1_thread_gflops": sgemm_one_thread(), "shapes": []}
    print(f"numpy sgemm, 1 thread: {res['sgemm_1_thread_gflops']:.1f} GFLOP/s; onnxruntime {ort.__version__}")
    print(f"{'B x L':>9s} | GFLOP/s, 1 thread: {'qkv':>5s} {'out':>5s} {'up':>5s} {'down':>5s} | attention core: "
          f"{'QAttention':>10s} {'MHA':>5s} {'unfused':>7s} | core share of QAttention + linear")
    for b, length in SHAPES:
        tokens = b * length
        lin = {name: linear_ms(rng, b, length, k, n)
               for name, (k, n) in {"qkv": (H, 3 * H), "out": (H, H), "up": (H, F), "down": (F, H)}.items()}
        lin_rate = {name: 2 * tokens * k * n / (lin[name] * 1e6)
                    for name, (k, n) in {"qkv": (H, 3 * H), "out": (H, H), "up": (H, F), "down": (F, H)}.items()}
        core_flop = 4 * b * length**2 * H
        qatt = qattention_ms(rng, b, length)
        core = {"qattention": qatt - lin["qkv"], "mha_no_mask": mha_ms(rng, b, length),
                "unfused": unfused_core_ms(rng, b, length)}
        core_rate = {k: core_flop / (v * 1e6) for k, v in core.items()}
        share = core["qattention"] / (qatt + lin["out"] + lin["up"] + lin["down"])
        res["shapes"].append({"batch": b, "length": length, "linear_ms": lin, "linear_gflops": lin_rate,
                              "qattention_ms": qatt, "core_ms": core, "core_gflops": core_rate,
                              "core_share_of_layer_matmuls": share})
        print(f"{b:>3d} x {length:<3d} | {'':18s} {lin_rate['qkv']:5.0f} {lin_rate['out']:5.0f} "
              f"{lin_rate['up']:5.0f} {lin_rate['down']:5.0f} | {'':16s}{core_rate['qattention']:10.0f} "
              f"{core_rate['mha_no_mask']:5.0f} {core_rate['unfused']:7.0f} | {100 * share:.0f}%")
    res["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
