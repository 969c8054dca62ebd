"""Tiny ONNX model folders for tests: a bi-encoder and a cross-encoder with
fixed (seeded) weights, small enough that a test can compute their exact
outputs in numpy.

    make_bi_encoder(dir, with_token_type_ids=True, dim=16) -> Path
    make_cross_encoder(dir) -> Path

Each writes a complete model folder: model.onnx, tokenizer.json (WordLevel,
lower-cased, split on whitespace and punctuation, BERT-style [CLS] A [SEP]
B [SEP] template), config.json, tokenizer_config.json and, unless
rag_model=False, rag_model.json.

The graphs (E = embedding rows of the tokens, plus token-type rows when the
graph has `token_type_ids`; masked means are over attention_mask):

    bi-encoder     last_hidden_state = tanh((E + masked_mean(E)) @ W + b)   (b, s, dim)
    cross-encoder  logits = masked_mean(E) @ w + c                          (b, n_logits)

`load_weights(folder)` returns the initializers by name (`emb`, `type_emb`,
`W`, `b`, `w`, `c`) and `VOCAB` maps words to ids, so tests can recompute
outputs independently of the runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = (
    "the a an of to in is and or what how why which who where when does do "
    "cat cats dog dogs bird fish sat mat on ran fast slow red blue green "
    "paris france capital city river london england berlin germany "
    "model vector search index query answer document chunk token . , ? !"
).split()
VOCAB: dict[str, int] = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
PAD, UNK, CLS, SEP = 0, 1, 2, 3
HIDDEN = 8
OPSET = 17


def ids_of(text: str) -> list[int]:
    """Token ids of a plain text without special tokens (words split on
    whitespace only, so keep punctuation apart from words in test texts)."""
    return [VOCAB.get(w, UNK) for w in text.lower().split()]


def load_weights(folder: str | Path) -> dict[str, np.ndarray]:
    """The graph's initializers by name, as numpy arrays."""
    model = onnx.load(str(Path(folder) / "model.onnx"))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _tokenizer(path: Path) -> None:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)],
    )
    tok.save(str(path))


def _masked_mean_nodes(x: str, out: str) -> list[onnx.NodeProto]:
    """out (b, 1, h) = sum_s x * mask / sum_s mask, with `mask3` (b, s, 1) float."""
    return [
        helper.make_node("Mul", [x, "mask3"], [x + "_m"]),
        helper.make_node("ReduceSum", [x + "_m", "axis1"], [x + "_sum"], keepdims=1),
        helper.make_node("ReduceSum", ["mask3", "axis1"], ["mask_count"], keepdims=1),
        helper.make_node("Div", [x + "_sum", "mask_count"], [out]),
    ]


def _embed_nodes(with_token_type_ids: bool) -> list[onnx.NodeProto]:
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "axis2"], ["mask3"]),
        helper.make_node("Gather", ["emb", "input_ids"], ["E_tok"]),
    ]
    if with_token_type_ids:
        nodes += [
            helper.make_node("Gather", ["type_emb", "token_type_ids"], ["E_type"]),
            helper.make_node("Add", ["E_tok", "E_type"], ["E"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["E_tok"], ["E"]))
    return nodes


def _inputs(with_token_type_ids: bool) -> list[onnx.ValueInfoProto]:
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_token_type_ids else [])
    return [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in names]


def _weights(seed: int, with_token_type_ids: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {
        "emb": (rng.standard_normal((len(VOCAB), HIDDEN)) * 0.5).astype(np.float32),
        "axis1": np.array([1], dtype=np.int64),
        "axis2": np.array([2], dtype=np.int64),
    }
    if with_token_type_ids:
        w["type_emb"] = (rng.standard_normal((2, HIDDEN)) * 0.5).astype(np.float32)
    return w


def _save(folder: Path, graph: onnx.GraphProto, config: dict, max_length: int, rag_model: dict | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rag-cli-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    _tokenizer(folder / "tokenizer.json")
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": max_length}))
    if rag_model is not None:
        (folder / "rag_model.json").write_text(json.dumps(rag_model, indent=2))
    return folder


def make_bi_encoder(
    dir: str | Path,
    with_token_type_ids: bool = True,
    dim: int = 16,
    *,
    pooling: str = "mean",
    normalize: bool = True,
    max_length: int = 128,
    query_prefix: str = "",
    passage_prefix: str = "",
    rag_model: bool = True,
    seed: int = 0,
) -> Path:
    """Write a tiny bi-encoder folder to `dir`; returns `dir` as a Path.

    Output `last_hidden_state` (batch, sequence, dim) float32; the graph has
    a `token_type_ids` input only if `with_token_type_ids` (like BERT; XLM-R
    graphs have none). rag_model.json gets the given settings unless
    rag_model=False (then the defaults come from config.json and
    tokenizer_config.json).
    """
    w = _weights(seed, with_token_type_ids)
    rng = np.random.default_rng(seed + 1000)
    w["W"] = (rng.standard_normal((HIDDEN, dim)) * 0.5).astype(np.float32)
    w["b"] = (rng.standard_normal(dim) * 0.1).astype(np.float32)
    nodes = _embed_nodes(with_token_type_ids) + _masked_mean_nodes("E", "ctx") + [
        helper.make_node("Add", ["E", "ctx"], ["X"]),
        helper.make_node("MatMul", ["X", "W"], ["XW"]),
        helper.make_node("Add", ["XW", "b"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["last_hidden_state"]),
    ]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", dim])
    graph = helper.make_graph(
        nodes, "tiny_bi_encoder", _inputs(with_token_type_ids), [out],
        initializer=[numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": dim,
        "max_position_embeddings": max_length,
        "pad_token_id": PAD,
        "vocab_size": len(VOCAB),
    }
    rag = {
        "kind": "embedder",
        "pooling": pooling,
        "normalize": normalize,
        "query_prefix": query_prefix,
        "passage_prefix": passage_prefix,
        "max_length": max_length,
        "name": "tiny-bi-encoder",
    }
    return _save(Path(dir), graph, config, max_length, rag if rag_model else None)


def make_cross_encoder(
    dir: str | Path,
    *,
    n_logits: int = 1,
    max_length: int = 128,
    with_token_type_ids: bool = True,
    rag_model: bool = True,
    seed: int = 1,
) -> Path:
    """Write a tiny cross-encoder folder to `dir`; returns `dir` as a Path.

    Output `logits` (batch, n_logits) float32 = masked mean over the pair's
    tokens of (emb[id] + type_emb[type_id]) @ w + c. config.json names a
    `BertForSequenceClassification`, so the folder is a cross-encoder even
    without rag_model.json.
    """
    w = _weights(seed, with_token_type_ids)
    rng = np.random.default_rng(seed + 1000)
    w["w"] = rng.standard_normal((HIDDEN, n_logits)).astype(np.float32)
    w["c"] = (rng.standard_normal(n_logits) * 0.1).astype(np.float32)
    nodes = _embed_nodes(with_token_type_ids) + _masked_mean_nodes("E", "pooled3") + [
        helper.make_node("Squeeze", ["pooled3", "axis1"], ["pooled"]),
        helper.make_node("MatMul", ["pooled", "w"], ["pw"]),
        helper.make_node("Add", ["pw", "c"], ["logits"]),
    ]
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n_logits])
    graph = helper.make_graph(
        nodes, "tiny_cross_encoder", _inputs(with_token_type_ids), [out],
        initializer=[numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": HIDDEN,
        "max_position_embeddings": max_length,
        "pad_token_id": PAD,
        "num_labels": n_logits,
        "vocab_size": len(VOCAB),
    }
    rag = {"kind": "cross-encoder", "max_length": max_length, "name": "tiny-cross-encoder"}
    return _save(Path(dir), graph, config, max_length, rag if rag_model else None)


# --------------------------------------------------------------------------- an extractive QA reader
QA_WORDS = "巴 黎 是 法 国 的 首 都 柏 林 德".split()
QA_VOCAB: dict[str, int] = {**VOCAB, **{w: len(VOCAB) + i for i, w in enumerate(QA_WORDS)}}


def make_qa_reader(dir: str | Path, start: dict[str, float], end: dict[str, float], *,
                   null: tuple[float, float] = (2.0, 2.0), max_length: int = 32,
                   with_token_type_ids: bool = True) -> Path:
    """Write a tiny extractive question-answering folder (what `optimum-cli
    export onnx --task question-answering` writes) to `dir`.

    start_logits[b, t] = start[token] (0.0 for other tokens), end_logits the
    same with `end`; the first token ([CLS]) scores `null` = (start, end), so
    the no-answer score is null[0] + null[1]; padded positions get -10000.
    The tokenizer is WordLevel over `QA_VOCAB` (VOCAB plus a few Chinese
    characters, each its own token), lower-cased, [CLS] A [SEP] B [SEP]. So
    the best span and the no-answer decision of any text are known: the
    span from the best start word to the best end word at or after it.
    """
    size = len(QA_VOCAB)
    s_table = np.zeros(size, dtype=np.float32)
    e_table = np.zeros(size, dtype=np.float32)
    for word, v in start.items():
        s_table[QA_VOCAB[word]] = v
    for word, v in end.items():
        e_table[QA_VOCAB[word]] = v
    s_table[CLS], e_table[CLS] = null
    w = {"s_table": s_table, "e_table": e_table, "one": np.array(1.0, dtype=np.float32),
         "big": np.array(10000.0, dtype=np.float32)}
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["mask_f", "one"], ["mask_m1"]),
        helper.make_node("Mul", ["mask_m1", "big"], ["pad_penalty"]),
        helper.make_node("Gather", ["s_table", "input_ids"], ["s_raw"]),
        helper.make_node("Gather", ["e_table", "input_ids"], ["e_raw"]),
        helper.make_node("Add", ["s_raw", "pad_penalty"], ["start_logits"]),
        helper.make_node("Add", ["e_raw", "pad_penalty"], ["end_logits"]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "sequence"])
            for n in ("start_logits", "end_logits")]
    graph = helper.make_graph(nodes, "tiny_qa_reader", _inputs(with_token_type_ids), outs,
                              initializer=[numpy_helper.from_array(v, k) for k, v in w.items()])
    folder = Path(dir)
    folder.mkdir(parents=True, exist_ok=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rag-cli-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    tok = Tokenizer(models.WordLevel(QA_VOCAB, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["BertForQuestionAnswering"], "model_type": "bert", "hidden_size": HIDDEN,
        "max_position_embeddings": max_length, "pad_token_id": PAD, "vocab_size": size}, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": max_length}))
    return folder
