"""The ONNX model runtime (rag_cli.models) against tiny models whose outputs
are recomputed exactly in numpy (tests/tiny_models.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from rag_cli.errors import BadInput
from rag_cli.models.cross_encoder import CrossEncoder, logits_to_scores, sigmoid
from rag_cli.models.encoder import BiEncoder
from rag_cli.models.folder import ModelFolder, file_sha256
from rag_cli.models.onnx_runtime import default_threads, plan_batches
from rag_cli.models.tokens import count_tokens

from tiny_models import CLS, SEP, ids_of, load_weights, make_bi_encoder, make_cross_encoder

TEXTS = [
    "the cat sat on the mat",
    "dog",
    "paris is the capital of france",
    "what does the model do with a query vector",
    "red blue green",
    "",
    "the dog ran fast and the cat ran slow in the city of london",
    "berlin",
    "how to index a document chunk",
    "which river is in england",
]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Keep the fingerprint cache out of the real home folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


# ----------------------------------------------------------- numpy references
def ref_bi_encoder(folder: Path, text: str, pooling: str = "mean", normalize: bool = True) -> np.ndarray:
    w = load_weights(folder)
    ids = [CLS, *ids_of(text), SEP]
    e = w["emb"][ids]
    if "type_emb" in w:
        e = e + w["type_emb"][0]
    h = np.tanh((e + e.mean(axis=0)) @ w["W"] + w["b"])
    v = h.mean(axis=0) if pooling == "mean" else h[0]
    return v / np.linalg.norm(v) if normalize else v


def ref_cross_logits(folder: Path, query_ids: list[int], passage_ids: list[int]) -> np.ndarray:
    w = load_weights(folder)
    ids = [CLS, *query_ids, SEP, *passage_ids, SEP]
    types = [0] * (len(query_ids) + 2) + [1] * (len(passage_ids) + 1)
    x = (w["emb"][ids] + w["type_emb"][types]).mean(axis=0)
    return x @ w["w"] + w["c"]


# ------------------------------------------------------------ cross-encoder
def test_cross_encoder_scores_are_exact(tmp_path):
    folder = make_cross_encoder(tmp_path / "ce")
    ce = CrossEncoder(ModelFolder.load(folder))
    query = "what is the capital of france"
    passages = ["paris is the capital of france", "the cat sat on the mat", "berlin", ""]
    got = ce.score(query, passages)
    want = np.array([ref_cross_logits(folder, ids_of(query), ids_of(p))[0] for p in passages])
    assert got.dtype == np.float32 and got.shape == (4,)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert ce.n_truncated == 0


def test_cross_encoder_two_logits_gives_log_odds(tmp_path):
    folder = make_cross_encoder(tmp_path / "ce2", n_logits=2)
    ce = CrossEncoder(ModelFolder.load(folder))
    query, passages = "who ran", ["the dog ran fast", "blue fish"]
    got = ce.score(query, passages)
    logits = np.array([ref_cross_logits(folder, ids_of(query), ids_of(p)) for p in passages])
    np.testing.assert_allclose(got, logits[:, 1] - logits[:, 0], atol=1e-5)
    softmax1 = np.exp(logits[:, 1]) / np.exp(logits).sum(axis=1)
    np.testing.assert_allclose(sigmoid(got), softmax1, atol=1e-6)


def test_cross_encoder_truncates_only_the_passage(tmp_path):
    folder = make_cross_encoder(tmp_path / "ce", max_length=10)
    ce = CrossEncoder(ModelFolder.load(folder))
    query = "what is the capital of france"  # 6 tokens + [CLS] [SEP] = 8: room for 1 passage token
    passages = ["paris is the capital of france", "berlin"]
    tok = ce.tokenizer.tokenize_pairs([(query, p) for p in passages])
    assert list(tok.ids[0]) == [CLS, *ids_of(query), SEP, ids_of("paris")[0], SEP]
    assert tok.truncated.tolist() == [True, False]
    got = ce.score(query, passages)
    np.testing.assert_allclose(got[0], ref_cross_logits(folder, ids_of(query), ids_of("paris"))[0], atol=1e-5)
    np.testing.assert_allclose(got[1], ref_cross_logits(folder, ids_of(query), ids_of("berlin"))[0], atol=1e-5)
    assert ce.n_truncated == 1 and ce.truncated.tolist() == [True, False]


def test_cross_encoder_query_longer_than_max_length_is_cut_and_flagged(tmp_path):
    ce = CrossEncoder(ModelFolder.load(make_cross_encoder(tmp_path / "ce", max_length=6)))
    scores = ce.score("what is the capital of france", ["paris", "the capital of france is paris"])
    assert scores.shape == (2,) and np.isfinite(scores).all()
    assert ce.n_truncated == 2
    assert all(len(a) == 6 for a in ce.tokenizer.tokenize_pairs([("what is the capital of france", "paris")]).ids)


def test_cross_encoder_batches_restore_order(tmp_path):
    ce = CrossEncoder(ModelFolder.load(make_cross_encoder(tmp_path / "ce")))
    pairs = [(TEXTS[i], TEXTS[(i * 3 + 1) % len(TEXTS)]) for i in range(len(TEXTS))]
    batched = ce.score_pairs(pairs, batch_tokens=24)
    one_by_one = np.array([ce.score_pairs([p])[0] for p in pairs])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-6)


def test_logits_to_scores_rejects_multiclass():
    with pytest.raises(BadInput, match="shape"):
        logits_to_scores(np.zeros((2, 3), dtype=np.float32))


def test_sigmoid_is_stable():
    np.testing.assert_allclose(sigmoid(np.array([-1000.0, 0.0, 1000.0])), [0.0, 0.5, 1.0])


# --------------------------------------------------------------- bi-encoder
@pytest.mark.parametrize("with_tt", [True, False], ids=["token_type_ids", "no_token_type_ids"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_bi_encoder_matches_numpy(tmp_path, with_tt, pooling):
    folder = make_bi_encoder(tmp_path / "bi", with_token_type_ids=with_tt, pooling=pooling)
    enc = BiEncoder(ModelFolder.load(folder))
    got = enc.encode(TEXTS)
    want = np.stack([ref_bi_encoder(folder, t, pooling) for t in TEXTS])
    assert got.shape == (len(TEXTS), 16) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert ("token_type_ids" in enc.input_dtypes) == with_tt


def test_mean_and_cls_pooling_differ(tmp_path):
    mean = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "m", pooling="mean"))).encode(TEXTS[:3])
    cls = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "c", pooling="cls"))).encode(TEXTS[:3])
    assert not np.allclose(mean, cls, atol=1e-3)


def test_normalize_switch(tmp_path):
    folder = make_bi_encoder(tmp_path / "raw", normalize=False)
    raw = BiEncoder(ModelFolder.load(folder)).encode(TEXTS)
    np.testing.assert_allclose(raw, np.stack([ref_bi_encoder(folder, t, normalize=False) for t in TEXTS]), atol=1e-5)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    unit = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "unit"))).encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_order_restored_after_length_sorting(tmp_path):
    enc = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "bi")))
    calls = []
    batched = enc.encode(TEXTS, batch_tokens=20, progress=lambda done, total: calls.append((done, total)))
    one_by_one = np.concatenate([enc.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-6)
    assert len(calls) > 2, "a small budget gives several batches"
    assert calls[-1] == (len(TEXTS), len(TEXTS))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


@pytest.mark.parametrize("threads", [1, 3])
def test_batches_in_parallel_match_numpy_in_order(tmp_path, threads):
    folder = make_bi_encoder(tmp_path / "bi")
    enc = BiEncoder(ModelFolder.load(folder), threads=threads, parallel_batches=True)
    assert enc.workers == min(threads, default_threads())  # CPU only: one batch per thread, at most one per core
    texts = TEXTS * 3
    calls = []
    got = enc.encode(texts, batch_tokens=12, progress=lambda done, total: calls.append(done))
    assert len(calls) > 2 * enc.workers, "more batches than are kept in flight"
    np.testing.assert_allclose(got, np.stack([ref_bi_encoder(folder, t) for t in texts]), atol=1e-5)
    assert calls == sorted(calls) and calls[-1] == len(texts)


def test_parallel_batches_stop_early_and_raise(tmp_path):
    enc = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "bi")), threads=2, parallel_batches=True)
    tok = enc.tokenizer.tokenize(TEXTS * 4)
    seen = []

    def reduce(out, mask):
        seen.append(len(out))
        if len(seen) == 5:
            raise ValueError("batch 5 fails")
        return out[:, 0]

    it = enc.iter_batched(tok, enc.output, reduce, batch_tokens=10)
    first = next(it)
    it.close()  # a caller that stops early: pending batches are dropped, nothing hangs
    assert len(first[0]) >= 1 and len(seen) <= 2 * enc.workers + 1
    seen.clear()
    with pytest.raises(ValueError, match="batch 5 fails"):
        list(enc.iter_batched(tok, enc.output, reduce, batch_tokens=10))


def test_batches_side_by_side_unless_the_cpu_has_amx(tmp_path, monkeypatch):
    from rag_cli.models import onnx_runtime

    folder = ModelFolder.load(make_bi_encoder(tmp_path / "bi"))
    for flags, workers in ((frozenset({"avx2", "avx512_vnni"}), 2), (frozenset({"avx512_vnni", "amx_int8"}), 1)):
        monkeypatch.setattr(onnx_runtime, "cpu_flags", lambda flags=flags: flags)
        enc = BiEncoder(folder, threads=2)
        assert enc.parallel_batches is (workers > 1) and enc.workers == min(workers, default_threads())
        assert BiEncoder(folder, threads=2, parallel_batches=False).workers == 1
    got = BiEncoder(folder, threads=2).encode(TEXTS)  # one batch at a time on two threads: the same vectors
    np.testing.assert_allclose(got, BiEncoder(folder, threads=1).encode(TEXTS), atol=1e-6)


def test_prefixes_are_applied(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi", query_prefix="query ", passage_prefix="document ")
    enc = BiEncoder(ModelFolder.load(folder))
    np.testing.assert_allclose(enc.encode_queries(["red cat"])[0], ref_bi_encoder(folder, "query red cat"), atol=1e-5)
    np.testing.assert_allclose(enc.encode_passages(["red cat"])[0], ref_bi_encoder(folder, "document red cat"), atol=1e-5)


def test_truncated_texts_are_counted(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi", max_length=6)
    enc = BiEncoder(ModelFolder.load(folder))
    texts = ["the cat sat", "the cat sat on the mat", "a b c d", "one two three four five six seven"]
    counts = enc.count_tokens(texts)
    assert counts.tolist() == [5, 8, 6, 9]
    vectors = enc.encode(texts)
    assert enc.n_truncated == 2 and enc.truncated.tolist() == [False, True, False, True]
    # a cut text is encoded as its first max_length - 2 words
    np.testing.assert_allclose(vectors[1], ref_bi_encoder(folder, "the cat sat on"), atol=1e-5)
    np.testing.assert_array_equal(count_tokens(folder, texts), counts)
    np.testing.assert_array_equal(count_tokens(folder, texts, add_special_tokens=False), counts - 2)


def test_empty_input(tmp_path):
    enc = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "bi", dim=12)))
    assert enc.encode([]).shape == (0, 12)
    assert enc.dim == 12
    with pytest.raises(TypeError):
        enc.encode("a single string")


def test_dim_probed_when_neither_graph_nor_config_says(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi", dim=12)
    config = json.loads((folder / "config.json").read_text())
    del config["hidden_size"]
    (folder / "config.json").write_text(json.dumps(config))
    model = onnx.load(str(folder / "model.onnx"))
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "dim"  # no static size
    onnx.save(model, str(folder / "model.onnx"))
    enc = BiEncoder(ModelFolder.load(folder), threads=1)
    assert enc.folder.config_dim is None
    assert enc.dim == 12 and enc.encode([]).shape == (0, 12)


def test_kind_mismatch_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="not an embedder"):
        BiEncoder(ModelFolder.load(make_cross_encoder(tmp_path / "ce")))
    with pytest.raises(BadInput, match="not a cross-encoder"):
        CrossEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "bi")))


def test_plan_batches_covers_all_within_budget():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 300, size=500)
    batches = plan_batches(lengths, batch_tokens=1024)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(500))
    for b in batches:
        assert len(b) == 1 or len(b) * lengths[b].max() <= 1024
    assert plan_batches(np.array([5000, 3]), batch_tokens=100)[0].tolist() == [0]


def test_plan_batches_plain_keeps_input_order():
    lengths = np.array([10, 30, 5, 40, 40, 1, 100])
    batches = plan_batches(lengths, batch_tokens=100, length_sorted=False)
    # [10, 30, 5] pads to 3 x 30 = 90; adding 40 would pad to 4 x 40; [40, 40, 1] = 120 > 100
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4], [5], [6]]
    sorted_ = plan_batches(lengths, batch_tokens=100)
    assert [b.tolist() for b in sorted_] == [[6], [3, 4], [1, 0, 2], [5]]


# ---------------------------------------------------------- model folders
def test_defaults_without_rag_model_json(tmp_path):
    bi = ModelFolder.load(make_bi_encoder(tmp_path / "bi", rag_model=False, max_length=40))
    assert (bi.kind, bi.pooling, bi.normalize, bi.max_length, bi.query_prefix) == ("embedder", "mean", True, 40, "")
    assert bi.name == "bi" and bi.config_dim == 16
    ce = ModelFolder.load(make_cross_encoder(tmp_path / "ce", rag_model=False, max_length=50))
    assert (ce.kind, ce.normalize, ce.max_length) == ("cross-encoder", False, 50)


def test_max_length_falls_back_to_position_embeddings(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi", rag_model=False)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": int(1e30)}))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="xlm-roberta", max_position_embeddings=514)
    (folder / "config.json").write_text(json.dumps(config))
    assert ModelFolder.load(folder).max_length == 512
    del config["max_position_embeddings"]
    (folder / "config.json").write_text(json.dumps(config))
    assert ModelFolder.load(folder).max_length == 512


def test_onnx_subfolder_and_onnx_file(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi")
    (folder / "onnx").mkdir()
    (folder / "model.onnx").rename(folder / "onnx" / "model.onnx")
    assert ModelFolder.load(folder).onnx_path == folder / "onnx" / "model.onnx"
    (folder / "onnx" / "model.onnx").rename(folder / "model_int8.onnx")
    mf = ModelFolder.load(folder, onnx_file="model_int8.onnx")
    assert mf.onnx_path == folder / "model_int8.onnx"
    assert BiEncoder(mf).encode(["cat"]).shape == (1, 16)


@pytest.mark.parametrize(
    "missing, says",
    [("model.onnx", "model.onnx"), ("tokenizer.json", "tokenizer.json"), ("config.json", "config.json")],
)
def test_missing_file_is_bad_input(tmp_path, missing, says):
    # config.json is needed only when nothing else says the kind (rag_model.json here)
    folder = make_bi_encoder(tmp_path / "bi", rag_model=missing != "config.json")
    (folder / missing).unlink()
    with pytest.raises(BadInput) as err:
        ModelFolder.load(folder)
    assert str(folder) in str(err.value) and says in str(err.value)
    assert err.value.exit_code == 2


def test_missing_folder_and_onnx_file_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        ModelFolder.load(tmp_path / "nope")
    folder = make_bi_encoder(tmp_path / "bi")
    with pytest.raises(BadInput, match=r"model_int8\.onnx.*model\.onnx"):
        ModelFolder.load(folder, onnx_file="model_int8.onnx")


def test_bad_rag_model_json_is_bad_input(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi")
    (folder / "rag_model.json").write_text(json.dumps({"pooling": "max"}))
    with pytest.raises(BadInput, match=r"rag_model\.json: pooling is 'max'; it must be one of mean, cls"):
        ModelFolder.load(folder)
    (folder / "rag_model.json").write_text("{not json")
    with pytest.raises(BadInput, match="rag_model.json"):
        ModelFolder.load(folder)


def test_unloadable_onnx_is_bad_input(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi")
    (folder / "model.onnx").write_bytes(b"not an onnx graph")
    encoder = BiEncoder(ModelFolder.load(folder))  # the graph is loaded on first use
    with pytest.raises(BadInput, match="model.onnx"):
        encoder.encode_passages(["a passage"])


# ------------------------------------------------------------- fingerprint
def _set_rag(folder: Path, **changes) -> None:
    rag = json.loads((folder / "rag_model.json").read_text())
    rag.update(changes)
    (folder / "rag_model.json").write_text(json.dumps(rag))


def test_fingerprint_tracks_files_and_settings(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi")
    base = ModelFolder.load(folder)
    assert len(base.fingerprint) == 64
    assert base.short_fingerprint == f"tiny-bi-encoder@{base.fingerprint[:12]}"
    assert ModelFolder.load(folder).fingerprint == base.fingerprint
    assert ModelFolder.load(make_bi_encoder(tmp_path / "same")).fingerprint == base.fingerprint

    _set_rag(folder, pooling="cls")
    assert ModelFolder.load(folder).fingerprint != base.fingerprint
    _set_rag(folder, pooling="mean")
    assert ModelFolder.load(folder).fingerprint == base.fingerprint
    for change in ({"normalize": False}, {"query_prefix": "query: "}, {"max_length": 64}):
        _set_rag(folder, **change)
        assert ModelFolder.load(folder).fingerprint != base.fingerprint, change
        _set_rag(folder, **{"normalize": True, "query_prefix": "", "max_length": 128})

    other = make_bi_encoder(tmp_path / "other", seed=7)
    (folder / "model.onnx").write_bytes((other / "model.onnx").read_bytes())
    assert ModelFolder.load(folder).fingerprint != base.fingerprint


def test_file_hash_cache_is_keyed_by_size_and_mtime(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"a" * (1 << 20))
    first = file_sha256(big)
    cache_file = tmp_path / "cache" / "rag-cli" / "file-sha256.json"
    assert json.loads(cache_file.read_text()) == {f"{big.resolve()}|{1 << 20}|{big.stat().st_mtime_ns}": first}
    big.write_bytes(b"b" * (1 << 20))
    os.utime(big, ns=(1, 2))
    assert file_sha256(big) != first


def test_execution_providers(monkeypatch):
    import onnxruntime as ort

    from rag_cli.models.onnx_runtime import execution_providers

    assert execution_providers() == execution_providers("cpu") == ["CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(BadInput, match=r"--provider 'cuda'.*CUDAExecutionProvider.*available here: cpu"):
        execution_providers("cuda")
    with pytest.raises(BadInput, match=r"--provider 'gpu': expected one of cpu, cuda, coreml"):
        execution_providers("gpu")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert execution_providers("CUDA") == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _shrink_embedding_table(folder: Path, rows: int) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(folder / "model.onnx"))
    for t in model.graph.initializer:
        if t.name == "emb":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t)[:rows], "emb"))
    onnx.save(model, str(folder / "model.onnx"))


def test_tokenizer_of_another_model_is_bad_input(tmp_path):
    folder = make_bi_encoder(tmp_path / "bi")
    _shrink_embedding_table(folder, 10)  # "paris" has id 37
    enc = BiEncoder(ModelFolder.load(folder))
    assert enc.encode(["the a"]).shape == (1, 16)  # ids within the table still run
    with pytest.raises(BadInput, match=r"token id 37 is outside the 10-row embedding table: the tokenizer and "):
        enc.encode(["paris is the capital"])
    # a long input whose bad id could also be a position: both causes are named
    with pytest.raises(BadInput, match=r"index 11 \(a token id, or a position .*\) .* either the tokenizer .* or "
                                       r"the graph takes fewer positions"):
        enc.encode(["the " * 11 + "and"])


def test_position_beyond_the_graph_is_bad_input(tmp_path, monkeypatch):
    enc = BiEncoder(ModelFolder.load(make_bi_encoder(tmp_path / "bi")))

    class Session:  # what onnxruntime says when a position id is past the position table
        def run(self, outputs, feed):
            raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while "
                               "running Gather node. Name:'pos' Status Message: indices element out of data "
                               "bounds, idx=8 must be within the inclusive range [-8,7]")

    assert enc.output  # loads the graph and picks its output before the session is replaced
    monkeypatch.setattr(enc, "_session", Session())
    with pytest.raises(BadInput, match=r"a 8-token input needs position 8, outside a 8-row table: the graph takes "
                                       r"fewer positions than max_length 128 \(set max_length to at most 6 in .*rag_model.json"):
        enc.encode(["the cat sat on the mat"])
