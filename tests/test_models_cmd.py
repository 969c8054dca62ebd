"""`rag models list | info | verify | quantize | pull` on the tiny seeded
models of tests/tiny_models.py, and once on the default model.

Scores printed by `verify` are checked against an independent numpy forward
pass of the tiny graphs. `pull` never touches the network: the Hub download
is a monkeypatched `snapshot_download` copying from a local folder, or the
offline / missing-package error paths.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.errors import BadInput
from rag_cli.models import manage
from rag_cli.models.defaults import DEFAULT_MODEL, resolve_model
from rag_cli.models.folder import ModelFolder
from rag_cli.models.convert.quantize import is_ffn_down
from tiny_models import load_weights, make_bi_encoder, make_cross_encoder

_runner = CliRunner()


def rag(*args, **kwargs):
    return _runner.invoke(app, [str(a) for a in args], **kwargs)


def rag_json(*args):
    res = rag(*args, "--json")
    assert res.exit_code == 0, (res.stdout, res.stderr, res.exception)
    return json.loads(res.stdout)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


# ------------------------------------------------------- numpy oracles
def _encode(folder: Path, text: str, pair: str | None = None):
    enc = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, pair)
    return np.array(enc.ids), np.array(enc.type_ids)


def tiny_vector(folder: Path, text: str) -> np.ndarray:
    """tiny bi-encoder, one text: mean over tokens of tanh((E + mean(E)) @ W + b), L2-normalised."""
    w = load_weights(folder)
    ids, types = _encode(folder, text)
    e = w["emb"][ids].astype(np.float64) + w["type_emb"][types]
    h = np.tanh((e + e.mean(0)) @ w["W"] + w["b"]).mean(0)
    return h / np.linalg.norm(h)


def tiny_score(folder: Path, query: str, passage: str) -> float:
    """tiny cross-encoder, 1 logit: mean over the pair's tokens of E, @ w + c."""
    w = load_weights(folder)
    ids, types = _encode(folder, query, passage)
    e = w["emb"][ids].astype(np.float64) + w["type_emb"][types]
    return float((e.mean(0) @ w["w"] + w["c"])[0])


# ------------------------------------------------------------- the recipe
@pytest.mark.parametrize("name, expected", [
    ("/encoder/layer.3/output/dense/MatMul", True),  # torch.onnx / optimum export
    ("/bert/encoder/layer.11/output/dense/MatMul", True),
    ("/encoder.layer.3.output.dense/MatMul", True),  # rag_cli.models.convert.e5
    ("/encoder/layer.3/attention/output/dense/MatMul", False),
    ("/encoder.layer.3.attention.output.dense/MatMul", False),
    ("/encoder/layer.3/intermediate/dense/MatMul", False),
    ("", False),
])
def test_is_ffn_down(name, expected):
    assert is_ffn_down(name) is expected


# ------------------------------------------------------------------- info
def test_info_tiny_bi_encoder(tiny_bi_encoder):
    info = rag_json("models", "info", tiny_bi_encoder)
    assert {k: info[k] for k in ("name", "kind", "kind_source", "dim", "max_length", "pooling", "pooled_in_graph",
                                 "normalize", "query_prefix", "passage_prefix", "onnx_file", "precision")} == {
        "name": "tiny-bi-encoder", "kind": "embedder", "kind_source": "rag_model.json", "dim": 16,
        "max_length": 128, "pooling": "mean", "pooled_in_graph": False, "normalize": True,
        "query_prefix": "", "passage_prefix": "", "onnx_file": "model.onnx", "precision": "fp32",
    }
    assert [i["name"] for i in info["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert info["inputs"][0] == {"name": "input_ids", "type": "INT64", "shape": ["batch", "sequence"]}
    assert info["outputs"] == [{"name": "last_hidden_state", "type": "FLOAT", "shape": ["batch", "sequence", 16]}]
    assert info["fingerprint"] == ModelFolder.load(tiny_bi_encoder).fingerprint
    size = (tiny_bi_encoder / "model.onnx").stat().st_size
    assert info["onnx_files"] == [{"path": "model.onnx", "bytes": size, "precision": "fp32", "query_graph_of": None}]
    assert info["int8_ops"] == [] and info["warnings"] == []


def test_info_cross_encoder_kind_from_config(tmp_path):
    folder = make_cross_encoder(tmp_path / "ce", n_logits=2, rag_model=False, max_length=64)
    info = rag_json("models", "info", folder)
    assert (info["kind"], info["kind_source"], info["n_logits"], info["max_length"]) == (
        "cross-encoder", "config.json architectures", 2, 64)
    assert "dim" not in info and "pooling" not in info
    assert info["outputs"] == [{"name": "logits", "type": "FLOAT", "shape": ["batch", 2]}]


def test_info_kind_from_graph_and_mismatch_warning(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi", rag_model=False)
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["architectures"]
    (folder / "config.json").write_text(json.dumps(cfg))
    info = rag_json("models", "info", folder)
    assert (info["kind"], info["kind_source"], info["warnings"]) == ("embedder", "graph outputs", [])

    cfg["architectures"] = ["BertForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(cfg))
    res = rag("models", "info", folder)
    assert res.exit_code == 0
    assert "kind            cross-encoder" in res.stdout
    assert "look like an embedder" in res.stderr and "config.json architectures" in res.stderr


def test_info_not_a_model(tmp_path):
    res = rag("models", "info", tmp_path / "nothing-here")
    assert res.exit_code == 2 and "no such folder" in res.stderr and res.stdout == ""


# ----------------------------------------------------------------- verify
def test_verify_tiny_bi_encoder_scores_are_exact(tiny_bi_encoder):
    res = rag("models", "verify", tiny_bi_encoder, "--json")
    out = json.loads(res.stdout)
    assert (out["kind"], out["score"], out["precision"]) == ("embedder", "cosine", "fp32")
    assert [c["lang"] for c in out["checks"]] == ["en", "zh"]
    for c in out["checks"]:
        q = tiny_vector(tiny_bi_encoder, c["query"])
        rel = float(q @ tiny_vector(tiny_bi_encoder, c["relevant"]))
        irr = float(q @ tiny_vector(tiny_bi_encoder, c["irrelevant"]))
        assert c["relevant_score"] == pytest.approx(rel, abs=1e-5)
        assert c["irrelevant_score"] == pytest.approx(irr, abs=1e-5)
        assert c["ok"] is (rel > irr)
    # a random model: the Chinese texts are all [UNK] to its vocabulary, the check fails
    assert [c["ok"] for c in out["checks"]] == [True, False] and out["ok"] is False
    assert res.exit_code == 1


def test_verify_tiny_cross_encoder_scores_are_exact(tiny_cross_encoder):
    res = rag("models", "verify", tiny_cross_encoder, "--precision", "fp32", "--json")
    out = json.loads(res.stdout)
    assert (out["kind"], out["score"]) == ("cross-encoder", "logit")
    for c in out["checks"]:
        rel = tiny_score(tiny_cross_encoder, c["query"], c["relevant"])
        irr = tiny_score(tiny_cross_encoder, c["query"], c["irrelevant"])
        assert (c["relevant_score"], c["irrelevant_score"]) == (pytest.approx(rel, abs=1e-5), pytest.approx(irr, abs=1e-5))
        assert c["margin"] == pytest.approx(rel - irr, abs=1e-5)
    assert res.exit_code == (0 if out["ok"] else 1) == 1


@pytest.mark.parametrize("missing", ["tokenizer.json", "config.json", "model.onnx"])
def test_verify_invalid_folder_names_the_missing_file(tiny_bi_encoder, tmp_path, missing):
    folder = tmp_path / "m"
    shutil.copytree(tiny_bi_encoder, folder)
    (folder / missing).unlink()
    if missing == "config.json":  # needed only when rag_model.json does not say the kind either
        (folder / "rag_model.json").unlink()
    res = rag("models", "verify", folder)
    assert res.exit_code == 2, res.stderr
    assert missing in res.stderr and res.stdout == ""


# --------------------------------------------------------------- quantize
TEXTS = ["what is the capital of france ?", "paris is the capital city of france .",
         "the cat sat on the mat", "dogs ran fast in the river", "how does a search index answer a query ?"]


def test_quantize_bi_encoder_to_new_folder(tiny_bi_encoder, tmp_path):
    from rag_cli.models.encoder import BiEncoder

    out = tmp_path / "int8"
    res = rag_json("models", "quantize", tiny_bi_encoder, "--out", out)
    assert listing(out) == {"config.json", "model_quantized.onnx", "model_quantized_query.onnx", "rag_model.json",
                            "tokenizer.json", "tokenizer_config.json"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers
    assert (res["onnx_file"], res["path"], res["fp32_matmuls"]) == ("model_quantized.onnx", str(out.resolve()), [])
    assert res["query_onnx_file"] == "model_quantized_query.onnx"
    assert res["bytes_int8"] == (out / "model_quantized.onnx").stat().st_size
    for name in ("tokenizer.json", "config.json", "rag_model.json"):
        assert sha(out / name) == sha(tiny_bi_encoder / name)

    info = rag_json("models", "info", out)
    assert info["precision"] == "int8" and {"MatMulInteger", "DynamicQuantizeLinear"} <= set(info["int8_ops"])
    query_bytes = (out / "model_quantized_query.onnx").stat().st_size
    assert info["onnx_files"] == [
        {"path": "model_quantized.onnx", "bytes": res["bytes_int8"], "precision": "int8", "query_graph_of": None},
        {"path": "model_quantized_query.onnx", "bytes": query_bytes, "precision": "fp32",
         "query_graph_of": "model_quantized.onnx"}]
    assert info["query_onnx_file"] == "model_quantized_query.onnx"
    assert info["fingerprint"] != ModelFolder.load(tiny_bi_encoder).fingerprint
    text = rag("models", "info", out).stdout
    assert "query_onnx_file model_quantized_query.onnx" in text and "(query graph of model_quantized.onnx)" in text
    verify = rag("models", "verify", out, "--json")  # the random tiny model may fail its sanity check (exit 1)
    assert verify.exit_code in (0, 1) and json.loads(verify.stdout)["query_onnx_file"] == "model_quantized_query.onnx"

    # int8-only folder: int8 picks the quantised file, fp32 has none, ModelFolder falls back to it
    assert resolve_model(out).onnx_file == out / "model_quantized.onnx"
    with pytest.raises(BadInput, match="no float32 graph .* only the int8 model_quantized.onnx"):
        resolve_model(out, precision="fp32")
    fp32 = BiEncoder(ModelFolder.load(tiny_bi_encoder), threads=1).encode(TEXTS)
    int8 = BiEncoder(ModelFolder.load(out), threads=1).encode(TEXTS)
    cos = (fp32 * int8).sum(1)  # unit vectors
    assert cos.min() > 0.99, cos
    assert np.abs(fp32 - int8).max() > 1e-6  # really quantised, not a copy
    assert res["agreement"]["value"] > 0.99

    # queries run the query graph: float32 MatMuls, only the embedding tables in int8
    import onnx

    query_graph = onnx.load(str(out / "model_quantized_query.onnx"))
    ops = {n.op_type for n in query_graph.graph.node}
    assert "DequantizeLinear" in ops and not ops & manage.INT8_OPS
    enc = BiEncoder(ModelFolder.load(out), threads=1)
    queries = enc.encode_queries(TEXTS)
    assert enc._session is None  # the int8 graph was not needed
    q_cos = (fp32 * queries).sum(1)
    assert q_cos.min() > 0.9999 and q_cos.min() > cos.min(), (q_cos, cos)
    assert np.abs(queries - int8).max() > 1e-6
    # the fingerprint covers the query graph: without it the folder is another model
    with_query = ModelFolder.load(out).fingerprint
    (out / "model_quantized_query.onnx").unlink()
    alone = ModelFolder.load(out)
    assert alone.query_onnx_path is None and alone.fingerprint != with_query
    np.testing.assert_array_equal(BiEncoder(alone, threads=1).encode_queries(TEXTS), int8)


def test_quantize_in_place_adds_the_int8_file(tiny_cross_encoder, tmp_path):
    from rag_cli.models.cross_encoder import CrossEncoder

    folder = tmp_path / "ce"
    shutil.copytree(tiny_cross_encoder, folder)
    before = {n: sha(folder / n) for n in listing(folder)}
    res = rag_json("models", "quantize", folder)
    assert listing(folder) == set(before) | {"model_quantized.onnx"}  # no query graph for a cross-encoder
    assert all(sha(folder / n) == h for n, h in before.items())  # nothing else changed
    # a cross-encoder has no use for X_query.onnx: not labelled as one, not in the fingerprint
    fingerprint = ModelFolder.load(folder).fingerprint
    shutil.copy(folder / "model.onnx", folder / "model_query.onnx")
    info = rag_json("models", "info", folder, "--precision", "fp32")
    assert all(f["query_graph_of"] is None for f in info["onnx_files"]) and info["query_onnx_file"] is None
    assert info["fingerprint"] == fingerprint
    (folder / "model_query.onnx").unlink()
    assert resolve_model(folder).onnx_file == folder / "model_quantized.onnx"
    assert resolve_model(folder, precision="fp32").onnx_file == folder / "model.onnx"
    pairs = [(a, b) for a in TEXTS[:2] for b in TEXTS]
    s32 = CrossEncoder(ModelFolder.load(folder), threads=1).score_pairs(pairs)
    s8 = CrossEncoder(ModelFolder.load(folder, onnx_file="model_quantized.onnx"), threads=1).score_pairs(pairs)
    np.testing.assert_allclose(s8, s32, atol=0.05)
    assert res["agreement"]["value"] < 0.05


def test_quantize_onnx_subfolder_layout(tiny_bi_encoder, tmp_path):
    folder = tmp_path / "optimum"
    (folder / "onnx").mkdir(parents=True)
    for name in ("tokenizer.json", "config.json", "rag_model.json"):
        shutil.copy(tiny_bi_encoder / name, folder / name)
    shutil.copy(tiny_bi_encoder / "model.onnx", folder / "onnx" / "model.onnx")
    out = tmp_path / "out"
    res = rag_json("models", "quantize", folder, "--out", out)
    assert res["onnx_file"] == "onnx/model_quantized.onnx"
    assert listing(out) == {"tokenizer.json", "config.json", "rag_model.json", "onnx/model_quantized.onnx",
                            "onnx/model_quantized_query.onnx"}
    assert ModelFolder.load(out).query_onnx_path == out / "onnx" / "model_quantized_query.onnx"


def test_quantize_bad_inputs_leave_nothing(tiny_bi_encoder, tmp_path):
    res = rag("models", "quantize", tmp_path / "missing")
    assert res.exit_code == 2 and "not a folder" in res.stderr

    int8 = tmp_path / "int8"
    assert rag("models", "quantize", tiny_bi_encoder, "--out", int8).exit_code == 0
    res = rag("models", "quantize", int8, "--out", tmp_path / "again")
    assert res.exit_code == 2 and "no float32 graph" in res.stderr and not (tmp_path / "again").exists()
    assert "only the int8 model_quantized.onnx" in res.stderr

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    res = rag("models", "quantize", tiny_bi_encoder, "--out", busy)
    assert res.exit_code == 2 and "--out" in res.stderr
    assert listing(busy) == {"notes.txt"}


def test_quantize_read_only_folder_says_use_out(tiny_bi_encoder, tmp_path, monkeypatch):
    folder = tmp_path / "m"
    shutil.copytree(tiny_bi_encoder, folder)
    before = {n: sha(folder / n) for n in listing(folder)}
    real_access = manage.os.access
    monkeypatch.setattr(manage.os, "access",
                        lambda p, mode: False if (Path(p) == folder and mode == os.W_OK) else real_access(p, mode))
    res = rag("models", "quantize", folder)
    assert res.exit_code == 2 and "not writable" in res.stderr and "--out" in res.stderr, res.stderr
    assert {n: sha(folder / n) for n in listing(folder)} == before


def test_quantize_says_when_another_int8_graph_is_picked(tiny_bi_encoder, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_bi_encoder, folder)
    first = rag_json("models", "quantize", folder)
    assert "shadowed_by" not in first
    shutil.copy(folder / "model_quantized.onnx", folder / "model_int8.onnx")  # the default model's layout
    res = rag_json("models", "quantize", folder)
    assert res["shadowed_by"] == "model_int8.onnx" and res["onnx_file"] == "model_quantized.onnx"
    plain = rag("models", "quantize", folder)
    assert plain.exit_code == 0 and "picks model_int8.onnx" in plain.stderr


def test_quantize_graph_the_runtime_cannot_feed_writes_nothing(tiny_bi_encoder, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    folder = tmp_path / "m"
    shutil.copytree(tiny_bi_encoder, folder)
    model = onnx.load(str(folder / "model.onnx"))
    model.graph.input.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["b", "s"]))
    onnx.save_model(model, str(folder / "model.onnx"))
    before = {n: sha(folder / n) for n in listing(folder)}
    res = rag("models", "quantize", folder)
    assert res.exit_code == 2 and "position_ids" in res.stderr
    assert {n: sha(folder / n) for n in listing(folder)} == before


def test_quantize_failure_is_atomic(tiny_bi_encoder, tmp_path, monkeypatch):
    import rag_cli.models.convert.quantize as q

    out = tmp_path / "int8"
    assert rag("models", "quantize", tiny_bi_encoder, "--out", out).exit_code == 0
    before = {n: sha(out / n) for n in listing(out)}

    def boom(src, dst, tokenizer_json=None):
        Path(dst).write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(q, "quantize_int8", boom)
    res = rag("models", "quantize", tiny_bi_encoder, "--out", out)
    assert res.exit_code == 1 and "disk full" in res.stderr
    assert {n: sha(out / n) for n in listing(out)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8"]


# ------------------------------------------------------------------- list
def test_list_empty_cache_and_project(tiny_bi_encoder, tiny_cross_encoder, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAG_CACHE", str(cache))
    pulled = cache / "models" / "Org--tiny"
    shutil.copytree(tiny_bi_encoder, pulled)
    proj = tmp_path / "proj"
    assert rag("init", proj).exit_code == 0
    out = rag_json("models", "list", "-p", proj)
    assert out["cache"] == {"path": str(cache), "models_dir": str(cache / "models"),
                            "bytes": sum(p.stat().st_size for p in pulled.rglob("*") if p.is_file())}
    (d,) = out["defaults"]
    assert (d["name"], d["kind"], d["converted"], d["precisions"]) == (DEFAULT_MODEL, "embedder", False, [])
    assert d["path"] == str(cache / "models" / DEFAULT_MODEL)
    assert out["cached"] == [{"name": "Org/tiny", "path": str(pulled), "precisions": ["fp32"],
                              "bytes": out["cache"]["bytes"]}]
    assert out["project"]["embedder"] == {"value": DEFAULT_MODEL, "path": str(cache / "models" / DEFAULT_MODEL),
                                          "status": "default, converted on first use", "precisions": []}
    assert out["project"]["reranker"]["status"] == "not configured"

    (proj / "rag.toml").write_text(
        f'[model]\nembedder = "Org/tiny"\nprecision = "fp32"\nreranker = "{tiny_cross_encoder}"\n')
    out = rag_json("models", "list", "-p", proj)
    assert out["project"] == {
        "path": str(proj), "precision": "fp32",
        "embedder": {"value": "Org/tiny", "path": str(pulled), "status": "pulled", "precisions": ["fp32"]},
        "reranker": {"value": str(tiny_cross_encoder), "path": str(tiny_cross_encoder.resolve()),
                     "status": "folder", "precisions": ["fp32"]},
    }
    # a pulled model is a --model NAME everywhere
    assert resolve_model("Org/tiny").folder == pulled
    assert rag_json("models", "list", "-p", tmp_path / "no-project")["project"] is None


# ------------------------------------------------------------------- pull
@pytest.fixture
def hub(tmp_path, tiny_bi_encoder):
    """A local stand-in for a Hub repository in the Xenova layout (sentence-transformers files too)."""
    repo = tmp_path / "hub-repo"
    (repo / "onnx").mkdir(parents=True)
    (repo / "1_Pooling").mkdir()
    shutil.copy(tiny_bi_encoder / "model.onnx", repo / "onnx" / "model.onnx")
    for name in ("tokenizer.json", "config.json", "tokenizer_config.json"):
        shutil.copy(tiny_bi_encoder / name, repo / name)
    (repo / "onnx" / "model_fp16.onnx").write_bytes(b"not wanted")
    (repo / "pytorch_model.bin").write_bytes(b"not wanted")
    (repo / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (repo / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Transformer"},
                                                   {"type": "sentence_transformers.models.Normalize"}]))
    (repo / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": "passage: "}}))
    return repo


def fake_snapshot_download(repo: Path, calls: list):
    def download(repo_id, *, revision=None, allow_patterns=None, local_dir=None, **kw):
        calls.append({"repo_id": repo_id, "revision": revision, "allow_patterns": allow_patterns,
                      "local_dir": local_dir, **kw})
        for p in repo.rglob("*"):
            rel = str(p.relative_to(repo))
            if p.is_file() and any(fnmatch.fnmatch(rel, pat) for pat in allow_patterns):
                (Path(local_dir) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(p, Path(local_dir) / rel)
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True)
        return str(local_dir)
    return download


def test_pull_into_the_cache(hub, tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("RAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls: list = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download(hub, calls))
    out = rag_json("models", "pull", "Org/tiny-st", "--revision", "v1")
    dest = tmp_path / "cache" / "models" / "Org--tiny-st"
    (call,) = calls
    assert (call["repo_id"], call["revision"], call["allow_patterns"]) == ("Org/tiny-st", "v1", list(manage.PULL_PATTERNS))
    assert Path(call["local_dir"]).parent == dest.parent and call["local_dir"] != str(dest)  # a temporary folder
    assert out["path"] == str(dest) and out["precisions"] == ["fp32"]
    assert out["files"] == sorted(["onnx/model.onnx", "tokenizer.json", "config.json", "tokenizer_config.json",
                                   "1_Pooling/config.json", "modules.json", "config_sentence_transformers.json",
                                   "rag_model.json"])
    assert out["rag_model"] == json.loads((dest / "rag_model.json").read_text()) == {
        "name": "Org/tiny-st", "source": "huggingface:Org/tiny-st@v1", "pooling": "cls", "normalize": True,
        "query_prefix": "query: ", "passage_prefix": "passage: ",
    }
    folder = ModelFolder.load(resolve_model("Org/tiny-st").folder)
    assert (folder.name, folder.pooling, folder.query_prefix) == ("Org/tiny-st", "cls", "query: ")
    listed = rag_json("models", "list")["cached"]
    assert [m["name"] for m in listed] == ["Org/tiny-st"]
    res = rag("models", "verify", "Org/tiny-st", "--json")
    assert res.exit_code in (0, 1) and json.loads(res.stdout)["path"] == str(dest)


def test_pull_repo_without_onnx_leaves_nothing(hub, tmp_path, monkeypatch):
    import huggingface_hub

    (hub / "onnx" / "model.onnx").unlink()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download(hub, []))
    out = tmp_path / "out"
    res = rag("models", "pull", "Org/no-onnx", "--out", out)
    assert res.exit_code == 2 and "no ONNX export" in res.stderr and "optimum-cli export onnx" in res.stderr
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["hub-repo"]


def test_pull_offline_is_exit_1_without_a_download(monkeypatch, tmp_path):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", mock.Mock(side_effect=AssertionError("network")))
    res = rag("models", "pull", "Org/x", "--out", tmp_path / "x")
    assert res.exit_code == 1 and "offline" in res.stderr and "HF_HUB_OFFLINE" in res.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("error, code, text", [
    ("local", 1, "cannot be reached"),
    ("repo", 2, "no such model"),
    ("revision", 2, "revision 'main' does not exist"),
])
def test_pull_hub_errors(monkeypatch, tmp_path, error, code, text):
    import huggingface_hub
    from huggingface_hub import errors

    resp = mock.Mock(headers={}, status_code=404)
    exc = {"local": errors.LocalEntryNotFoundError("connection error"),
           "repo": errors.RepositoryNotFoundError("404", response=resp),
           "revision": errors.RevisionNotFoundError("404", response=resp)}[error]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", mock.Mock(side_effect=exc))
    res = rag("models", "pull", "Org/x", "--revision", "main", "--out", tmp_path / "x")
    assert res.exit_code == code and text in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_pull_without_huggingface_hub(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    res = rag("models", "pull", "Org/x", "--out", tmp_path / "x")
    assert res.exit_code == 2 and "pip install 'rag-cli[hub]'" in res.stderr


def test_pull_bad_id():
    res = rag("models", "pull", "not-an-id")
    assert res.exit_code == 2 and "Hugging Face model id" in res.stderr


# ------------------------------------------------------- the default model
def test_default_model_info_verify_list(default_model):
    import onnx

    from rag_cli.models.convert.quantize import float_matmuls

    info = rag_json("models", "info", DEFAULT_MODEL)
    assert {k: info[k] for k in ("kind", "dim", "max_length", "pooling", "normalize", "query_prefix",
                                 "passage_prefix", "onnx_file", "precision")} == {
        "kind": "embedder", "dim": 384, "max_length": 512, "pooling": "mean", "normalize": True,
        "query_prefix": "query: ", "passage_prefix": "passage: ", "onnx_file": "model_int8.onnx", "precision": "int8",
    }
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= set(info["int8_ops"])
    assert [(f["path"], f["precision"], f["query_graph_of"]) for f in info["onnx_files"]] == [
        ("model.onnx", "fp32", None), ("model_int8.onnx", "int8", None),
        ("model_int8_query.onnx", "fp32", "model_int8.onnx")]
    assert info["query_onnx_file"] == "model_int8_query.onnx"
    assert info["fingerprint"] == ModelFolder.load(default_model, onnx_file="model_int8.onnx").fingerprint
    fp32 = rag_json("models", "info", DEFAULT_MODEL, "--precision", "fp32")
    assert (fp32["onnx_file"], fp32["precision"], fp32["int8_ops"]) == ("model.onnx", "fp32", [])
    assert fp32["query_onnx_file"] is None

    # the int8 graph is the calibrated recipe: float32 MatMuls only for each FFN's outlier channels
    int8 = onnx.load(str(default_model / "model_int8.onnx"), load_external_data=False)
    outlier = [n.name for n in int8.graph.node if n.op_type == "MatMul"]
    assert len(outlier) == 24 and all(name.endswith("MatMul_outlier") for name in outlier)

    # the graph is fused (attention inside Attention nodes): without calibration
    # the recipe keeps only the FFN down-projection of each of the 12 layers in float32
    kept = float_matmuls(onnx.load(str(default_model / "model.onnx"), load_external_data=False))
    assert len(kept) == 12 and all(map(is_ffn_down, kept))

    for precision in ("int8", "fp32"):
        res = rag("models", "verify", DEFAULT_MODEL, "--precision", precision, "--json")
        out = json.loads(res.stdout)
        assert res.exit_code == 0 and out["ok"] and out["precision"] == precision, out
        for c in out["checks"]:
            assert 0.7 < c["irrelevant_score"] < c["relevant_score"] <= 1.0, c

    (d,) = rag_json("models", "list")["defaults"]
    assert (d["converted"], d["installed"], d["precisions"], d["path"]) == (True, True, ["int8", "fp32"],
                                                                            str(default_model))


def test_pulled_cross_encoder_is_a_reranker_name(tiny_cross_encoder, tmp_path, monkeypatch):
    from rag_cli.models.loading import load_cross_encoder

    monkeypatch.setenv("RAG_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BadInput, match="Org/ce"):
        load_cross_encoder("Org/ce")
    shutil.copytree(tiny_cross_encoder, tmp_path / "cache" / "models" / "Org--ce")
    ce = load_cross_encoder("Org/ce")
    assert ce.folder.path == tmp_path / "cache" / "models" / "Org--ce"
    q, p = "what is the capital of france ?", "paris is the capital city of france ."
    assert ce.score(q, [p])[0] == pytest.approx(tiny_score(tiny_cross_encoder, q, p), abs=1e-5)


# ------------------------------------------------------------------- small CLI conveniences
def test_version_precision_case_and_quantize_names_dir(tiny_bi_encoder, tmp_path):
    from rag_cli import __version__

    res = rag("--version")
    assert res.exit_code == 0 and res.stdout == f"rag-cli {__version__}\n"
    # --precision is case-insensitive; a bad value still exits 2
    assert rag_json("models", "info", tiny_bi_encoder, "--precision", "FP32")["precision"] == "fp32"
    res = rag("models", "info", tiny_bi_encoder, "--precision", "FP16")
    assert res.exit_code == 2 and "fp16" in res.stderr
    # quantize takes a positional DIR, and its errors say so (not --model)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = rag("models", "quantize", empty)
    assert res.exit_code == 2 and f"DIR '{empty}': the folder has no ONNX model" in res.stderr, res.stderr
    assert "--model" not in res.stderr.split("optimum-cli")[0]


def test_quantize_in_place_keeps_external_data_names(tmp_path):
    """A graph with its weights in an external-data file (how exports over 2 GB are saved): the
    int8 graph and its query graph get data files named after their final names, nothing hidden."""
    import onnx

    from rag_cli.models.encoder import BiEncoder

    from tiny_models import make_bi_encoder

    folder = make_bi_encoder(tmp_path / "m", dim=512)  # weights large enough for onnx to store them outside
    model = onnx.load(str(folder / "model.onnx"))
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx_data", size_threshold=1024)
    assert (folder / "model.onnx_data").is_file()
    res = rag_json("models", "quantize", folder)
    names = listing(folder)
    assert not [n for n in names if n.startswith(".")] and not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert {"model_quantized.onnx", "model_quantized_query.onnx"} <= names
    data = sorted(n for n in names - {"model.onnx_data"} if not n.endswith((".onnx", ".json")))
    assert data and all(n.startswith(("model_quantized.onnx", "model_quantized_query.onnx")) for n in data), names
    assert res["bytes_int8"] > (folder / "model_quantized.onnx").stat().st_size  # the data file counted
    enc = BiEncoder(ModelFolder.load(folder, onnx_file="model_quantized.onnx"), threads=1)
    assert enc.folder.query_onnx_path == folder / "model_quantized_query.onnx"
    fp32 = BiEncoder(ModelFolder.load(folder), threads=1).encode(TEXTS)
    assert (fp32 * enc.encode_queries(TEXTS)).sum(1).min() > 0.9999
    assert (fp32 * enc.encode_passages(TEXTS)).sum(1).min() > 0.99
