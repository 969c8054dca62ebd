"""Hardening against bad vectors, foreign models, awkward files and odd runs:
each test builds the files it needs (model folders, corpora, damaged
project files) and runs the real CLI or the stage on them."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import onnx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.errors import BadInput
from rag_cli.store.embeddings import bad_vector_rows, read_embeddings
from tiny_models import VOCAB, make_bi_encoder

_runner = CliRunner()


def rag(*args):
    return _runner.invoke(app, [str(a) for a in args])


def ok(*args):
    res = rag(*args)
    assert res.exit_code == 0, (args, res.stdout, res.stderr, res.exception)
    return res


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


DOCS = {
    "cats.md": "the cat sat on the mat .\n",
    "dogs.md": "the dog ran fast in the city .\n",
    "paris.md": "paris is the capital of france .\n",
    "rivers.md": "the river in london is blue .\n",
    "my cats.md": "a red cat and a blue bird .\n",
}


def chunk_ids_by_doc(project: Path) -> dict[str, str]:
    t = pq.read_table(project / "chunks.parquet", columns=["chunk_id", "doc_id"]).to_pylist()
    return {Path(r["doc_id"]).name: r["chunk_id"] for r in t}


def poison_word(folder: Path, word: str, value: float) -> None:
    """Set the embedding row of `word` in the tiny model's graph to `value` (NaN, inf)."""
    model = onnx.load(str(folder / "model.onnx"))
    for i, init in enumerate(model.graph.initializer):
        if init.name == "emb":
            emb = numpy_helper.to_array(init).copy()
            emb[VOCAB[word]] = value
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(emb, "emb"))
    onnx.save(model, str(folder / "model.onnx"))


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, tiny_bi_encoder) -> Path:
    """A project of DOCS, chunked and embedded with the tiny bi-encoder."""
    root = tmp_path_factory.mktemp("hard")
    docs = write_docs(root / "docs", DOCS)
    p = root / "proj"
    ok("chunk", docs, "--model", tiny_bi_encoder, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    ok("embed", "-p", p)
    return p


@pytest.fixture
def project(embedded, tmp_path) -> Path:
    shutil.copytree(embedded, tmp_path / "proj")
    return tmp_path / "proj"


# ------------------------------------------------------------------ vectors
def test_bad_vector_rows_finds_nan_inf_and_zero_rows():
    v = np.ones((6, 4), np.float32)
    v[1, 2] = np.nan
    v[3] = 0.0
    v[4, 0] = -np.inf
    assert bad_vector_rows(v).tolist() == [1, 3, 4]
    assert bad_vector_rows(np.zeros((0, 4), np.float32)).tolist() == []


def test_embed_fails_on_nan_vectors_and_caches_none(tmp_path):
    model = make_bi_encoder(tmp_path / "model")
    docs = write_docs(tmp_path / "docs", DOCS)
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    poison_word(model, "cat", np.nan)
    res = rag("embed", "--model", model, "-p", p)
    assert res.exit_code == 1, (res.stdout, res.stderr)
    ids = chunk_ids_by_doc(p)
    assert repr(ids["cats.md"]) in res.stderr and "NaN/inf" in res.stderr, res.stderr
    assert repr(ids["dogs.md"]) not in res.stderr
    assert not (p / "embeddings.parquet").exists()
    for part in (p / "cache" / "vectors").rglob("part-*.parquet"):
        vec = np.stack(pq.read_table(part).column("vector").to_numpy(zero_copy_only=False))
        assert np.isfinite(vec).all() and bad_vector_rows(vec).size == 0


def overflow_output(folder: Path) -> None:
    """Make every token vector of the tiny model +inf (tanh * 0 + inf), as an fp16 export that overflows does."""
    m = onnx.load(str(folder / "model.onnx"))
    for node in m.graph.node:
        if node.op_type == "Tanh":
            node.output[0] = "tanh"
    m.graph.initializer.extend([numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                                numpy_helper.from_array(np.array(np.inf, np.float32), "overflow")])
    m.graph.node.extend([onnx.helper.make_node("Mul", ["tanh", "zero"], ["nothing"]),
                         onnx.helper.make_node("Add", ["nothing", "overflow"], ["last_hidden_state"])])
    onnx.save(m, str(folder / "model.onnx"))


@pytest.mark.parametrize("normalize", [True, False])
def test_inf_vectors_fail_cleanly_without_a_numpy_warning(tmp_path, normalize):
    """#23 item 19: `RuntimeWarning: invalid value encountered in divide` (with its source line) reached stderr
    before the clean NaN/inf error."""
    import warnings

    model = make_bi_encoder(tmp_path / "model", normalize=normalize)
    docs = write_docs(tmp_path / "docs", DOCS)
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    overflow_output(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = rag("embed", "--model", model, "-p", p)
        assert res.exit_code == 1 and "NaN/inf" in res.stderr, (res.stdout, res.stderr)
        assert "5 chunk(s)" in res.stderr
        # the query path pools and normalises the same way
        from rag_cli.models.encoder import BiEncoder
        from rag_cli.models.folder import ModelFolder

        q = BiEncoder(ModelFolder.load(model)).encode_queries(["cat"])
        assert not np.isfinite(q).all() and bad_vector_rows(q).tolist() == [0]
        # a norm past float32's range is taken in float64: a unit vector, not a zero one
        from rag_cli.models.encoder import l2_normalize

        assert np.allclose(l2_normalize(np.array([[3e38, 3e38]], np.float32)), [[0.5 ** 0.5, 0.5 ** 0.5]])
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def cancel_output(folder: Path, scale: float) -> None:
    """Make the tiny model's token vectors cancel: each token's vector is `scale` * (t - mean over its text's
    tokens), so the mean-pooled vector is 0 up to float32 rounding (as a degenerate graph's can be)."""
    m = onnx.load(str(folder / "model.onnx"))
    for node in m.graph.node:
        if node.op_type == "Tanh":
            node.output[0] = "tanh"
    m.graph.initializer.append(numpy_helper.from_array(np.array(scale, np.float32), "scale"))
    m.graph.node.extend([  # the masked mean over the text's tokens (padding left out, as rag's mean pooling does)
        onnx.helper.make_node("Mul", ["tanh", "mask3"], ["tanh_m"]),
        onnx.helper.make_node("ReduceSum", ["tanh_m", "axis1"], ["tanh_sum"], keepdims=1),
        onnx.helper.make_node("Div", ["tanh_sum", "mask_count"], ["tanh_mean"]),
        onnx.helper.make_node("Sub", ["tanh", "tanh_mean"], ["centred"]),
        onnx.helper.make_node("Mul", ["centred", "scale"], ["last_hidden_state"])])
    onnx.save(m, str(folder / "model.onnx"))


@pytest.mark.parametrize("normalize, scale", [(True, 1.0), (False, 1e3)])  # 1e3: above the absolute floor
def test_a_pooled_vector_of_near_zero_norm_is_refused(tmp_path, normalize, scale):
    """#23 item 20: a pooled vector whose norm is rounding noise (tokens that cancel) was stored as a unit
    vector of that noise; now it is refused as a zero vector is, naming the chunks."""
    from rag_cli.models.encoder import BiEncoder, NEAR_ZERO_NORM, NEAR_ZERO_SHARE
    from rag_cli.models.folder import ModelFolder

    assert (NEAR_ZERO_SHARE, NEAR_ZERO_NORM) == (1e-4, 1e-6)
    model = make_bi_encoder(tmp_path / "model", normalize=normalize)
    docs = write_docs(tmp_path / "docs", {"one.md": "the cat sat on the mat .\n", "two.md": "the dog ran .\n"})
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    cancel_output(model, scale)
    raw = BiEncoder(ModelFolder.load(model))
    res = rag("embed", "--model", model, "-p", p)
    assert res.exit_code == 1, (res.stdout, res.stderr)
    err = " ".join(res.stderr.split())
    assert "2 chunk(s)" in err and "(zero norm)" in err and "near-zero" in err, err
    assert not (p / "embeddings.parquet").exists()
    q = raw.encode_queries(["cat"])
    assert bad_vector_rows(q).tolist() == [0]  # a query too: refused, never a unit vector of noise


def test_near_zero_rows_are_relative_to_the_token_vectors():
    from rag_cli.models.encoder import near_zero_rows

    pooled = np.array([[3e-5, 0.0], [1e-3, 0.0], [5e-7, 0.0], [5e-7, 0.0]], np.float32)
    scale = np.array([1.0, 1.0, 1e-6, np.nan], np.float32)  # mean token norm of each text (NaN: no tokens given)
    # 3e-5 < 1e-4 x 1: cancelled; 1e-3: kept; 5e-7: below the absolute floor 1e-6 whatever the tokens
    assert near_zero_rows(pooled, scale).tolist() == [True, False, True, True]
    assert near_zero_rows(pooled[:2] * 1e3).tolist() == [False, False]  # pooled outputs: the absolute floor only


def test_embed_fails_on_zero_vectors(tmp_path):
    model = make_bi_encoder(tmp_path / "model", normalize=False)
    docs = write_docs(tmp_path / "docs", DOCS)
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    # W = 0 and b = 0: tanh(0) = 0 for every token, so every vector is zero
    m = onnx.load(str(model / "model.onnx"))
    for i, init in enumerate(m.graph.initializer):
        if init.name in ("W", "b"):
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(init)),
                                                                    init.name))
    onnx.save(m, str(model / "model.onnx"))
    res = rag("embed", "--model", model, "-p", p)
    assert res.exit_code == 1, (res.stdout, res.stderr)
    assert "zero norm" in res.stderr and "5 chunk(s)" in res.stderr, res.stderr
    assert not (p / "embeddings.parquet").exists()


def _rewrite_vectors(path: Path, vectors: list[list[float]], list_type: pa.DataType | None = None) -> None:
    table = pq.read_table(path)
    col = pa.array(vectors, type=list_type or table.schema.field("vector").type)
    i = table.column_names.index("vector")
    table = table.set_column(i, pa.field("vector", col.type), col)
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), path)


def test_index_refuses_nan_and_zero_vectors(project):
    emb = read_embeddings(project / "embeddings.parquet")
    vecs = emb.vectors.astype(np.float64).tolist()
    vecs[1][3] = math.nan
    vecs[2] = [0.0] * emb.dim
    _rewrite_vectors(project / "embeddings.parquet", vecs)
    res = rag("index", "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert f"{emb.chunk_ids[1]!r} (NaN/inf)" in res.stderr and f"{emb.chunk_ids[2]!r} (zero norm)" in res.stderr
    assert "2 chunk(s)" in res.stderr
    assert not (project / "index").exists()


def test_mixed_vector_sizes_name_both_sizes(project):
    emb = read_embeddings(project / "embeddings.parquet")
    vecs = emb.vectors.tolist()
    vecs[3] = vecs[3][:8]
    _rewrite_vectors(project / "embeddings.parquet", vecs, pa.list_(pa.float32()))
    res = rag("index", "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    msg = " ".join(res.stderr.split())
    assert "sizes 8 and 16" in msg and f"size 8: {emb.chunk_ids[3]!r}" in msg
    assert f"size 16: {emb.chunk_ids[0]!r}" in msg
    assert not (project / "index").exists()


def test_json_output_has_no_nan(capsys):
    from rag_cli.cli import _emit_json

    _emit_json({"hits": [{"score": math.nan}, {"score": math.inf}, {"score": 0.5}], "n": 2})
    out = capsys.readouterr().out
    assert "NaN" not in out and "Infinity" not in out
    assert json.loads(out) == {"hits": [{"score": None}, {"score": None}, {"score": 0.5}], "n": 2}


def test_index_space_is_checked_when_opened(project):
    """A generation whose files are intact (files.json agrees) but whose dense index is not cosine."""
    from rag_cli.hashing import sha256_file
    from rag_cli.store.index_folder import current_generation, switch_current

    ok("index", "-p", project)
    gen = current_generation(project / "index")
    dense_json = gen / "dense" / "rag_dense.json"
    params = json.loads(dense_json.read_text())
    params["space"] = "l2"
    dense_json.write_text(json.dumps(params))
    listing = json.loads((gen / "files.json").read_text())
    listing["files"]["dense/rag_dense.json"] = {"size": dense_json.stat().st_size, "sha256": sha256_file(dense_json)}
    (gen / "files.json").write_text(json.dumps(listing))
    switch_current(project / "index", gen.name)  # CURRENT records the sha256 of files.json
    res = rag("search", "cat", "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    msg = " ".join(res.stderr.split())
    assert "space 'l2'" in msg and "cosine" in msg
    assert "ValueError" not in msg and "rag index" in msg  # #23 item 22: no Python class name in the message


def test_a_model_mismatch_names_both_dimensions(project, tmp_path):
    """#23 item 22: the mismatch named the two fingerprints but not the vector sizes (8 vs 16) that differ."""
    ok("index", "-p", project)
    other = make_bi_encoder(tmp_path / "eight", dim=8)
    toml = project / "rag.toml"
    lines = [f'embedder = "{other}"' if line.startswith("embedder =") else line
             for line in toml.read_text().splitlines()]
    toml.write_text("\n".join(lines) + "\n")
    res = rag("search", "cat", "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    msg = " ".join(res.stderr.split())
    assert "was built with model" in msg and "16-dimension vectors" in msg and "gives 8" in msg, msg


# ------------------------------------------------------------------ fusion and runs
def test_rrf_counts_a_duplicate_once_at_its_first_rank():
    from rag_cli.index.fusion import rrf

    fused = dict(rrf([[7, 8, 7, 9], [9]], k=60))
    assert fused[7] == pytest.approx(1 / 61)  # not 1/61 + 1/63
    assert fused[8] == pytest.approx(1 / 62)
    assert fused[9] == pytest.approx(1 / 64 + 1 / 61)


def test_trec_run_escapes_ids_with_whitespace(project, tmp_path):
    from urllib.parse import unquote

    ok("index", "-p", project)
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query_id": "q 1", "query": "red cat"}) + "\n", encoding="utf-8")
    res = ok("search", "--queries", queries, "--mode", "sparse", "-k", 5, "--format", "trec", "--name", "t",
             "-p", project)
    lines = (project / "runs" / "t.trec").read_text().splitlines()
    assert lines and all(len(line.split()) == 6 for line in lines)
    docnos = [line.split()[2] for line in lines]
    cat_id = chunk_ids_by_doc(project)["my cats.md"]
    assert cat_id.replace(" ", "%20") in docnos and unquote(cat_id.replace(" ", "%20")) == cat_id
    assert {line.split()[0] for line in lines} == {"q%201"}
    msg = " ".join(res.stderr.split())
    assert "2 id(s) contain whitespace" in msg and "'q 1' -> 'q%201'" in msg, msg


def test_trec_field_round_trips():
    from urllib.parse import unquote

    from rag_cli.store.runs import trec_field

    for value in ("plain%id", "a b", "5%\tx", "国 标\u3000x"):
        field = trec_field(value)
        assert len(field.split()) == 1
        assert field == value if value == "plain%id" else unquote(field) == value
    assert trec_field("5%\tx") == "5%25%09x"


@pytest.mark.parametrize("args", [
    ["search", "--queries", "{queries}", "--name", "r"],
    ["embed"],
    ["index"],
])
def test_corrupt_manifest_fails_before_outputs(project, tmp_path, args):
    ok("index", "-p", project)
    (project / "manifest.json").write_text("{not json", encoding="utf-8")
    before = {f: f.stat().st_mtime_ns for f in project.rglob("*") if f.is_file()}
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query_id": "q1", "query": "red cat"}) + "\n", encoding="utf-8")
    res = rag(*[a.format(queries=queries) for a in args], "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert "manifest.json" in res.stderr
    after = {f: f.stat().st_mtime_ns for f in project.rglob("*") if f.is_file()}
    assert after == before


# ------------------------------------------------------------------ foreign model folders
def _bare_model(folder: Path, *, keep: tuple[str, ...] = ()) -> Path:
    """A tiny bi-encoder folder with only model.onnx, tokenizer.json and `keep`."""
    make_bi_encoder(folder, rag_model=False)
    for name in ("config.json", "tokenizer_config.json", "rag_model.json"):
        if name not in keep and (folder / name).exists():
            (folder / name).unlink()
    return folder


def _sentence_transformers_files(folder: Path, prompts: dict | None, max_seq_length: int | None = 64) -> None:
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 16, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    if prompts is not None:
        (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    if max_seq_length is not None:
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))


def test_folder_without_config_json_but_rag_model_json_is_accepted(tmp_path):
    from rag_cli.models.folder import ModelFolder

    model = _bare_model(tmp_path / "m")
    (model / "rag_model.json").write_text(json.dumps({"kind": "embedder", "max_length": 40, "pooling": "mean"}))
    folder = ModelFolder.load(model)
    assert (folder.kind, folder.max_length, folder.pooling, folder.config) == ("embedder", 40, "mean", {})
    docs = write_docs(tmp_path / "docs", DOCS)
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    ok("embed", "-p", p)
    assert read_embeddings(p / "embeddings.parquet").vectors.shape == (5, 16)


def test_folder_without_config_json_reads_sentence_transformers_files(tmp_path):
    from rag_cli.models.folder import ModelFolder

    model = _bare_model(tmp_path / "multilingual-e5-tiny")
    _sentence_transformers_files(model, {"query": "query: ", "document": "passage: "})
    folder = ModelFolder.load(model)
    assert (folder.kind, folder.pooling, folder.normalize, folder.max_length) == ("embedder", "cls", True, 64)
    assert (folder.query_prefix, folder.passage_prefix) == ("query: ", "passage: ")
    assert folder.warnings == []


def test_folder_that_cannot_say_its_kind_or_length_is_refused_naming_the_fact(tmp_path):
    from rag_cli.errors import BadInput
    from rag_cli.models.folder import ModelFolder

    bare = _bare_model(tmp_path / "bare")
    with pytest.raises(BadInput, match="whether it is an embedder or a cross-encoder.*\"kind\""):
        ModelFolder.load(bare)
    st = _bare_model(tmp_path / "st")
    _sentence_transformers_files(st, None, max_seq_length=None)
    with pytest.raises(BadInput, match="max_length"):
        ModelFolder.load(st)


def test_e5_folder_without_prefixes_warns(tmp_path):
    from rag_cli.models.folder import ModelFolder

    model = make_bi_encoder(tmp_path / "multilingual-e5-small", rag_model=False)
    folder = ModelFolder.load(model)
    assert len(folder.warnings) == 1 and "'query: ' / 'passage: '" in folder.warnings[0]
    docs = write_docs(tmp_path / "docs", DOCS)
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    res = ok("embed", "-p", p)
    assert "no prefixes are set" in " ".join(res.stderr.split())
    # prefixes stated (even as empty) silence it
    (model / "rag_model.json").write_text(json.dumps({"query_prefix": "", "passage_prefix": ""}))
    assert ModelFolder.load(model).warnings == []
    # a folder not of that family gets no warning
    assert ModelFolder.load(make_bi_encoder(tmp_path / "bge-small", rag_model=False)).warnings == []


# ------------------------------------------------------------------ cross-encoder scores
class FixedLogits:
    """A stand-in cross-encoder whose logits are given (score_pairs in pair order)."""

    n_truncated = 0

    def __init__(self, logits):
        self.logits = np.asarray(logits, np.float32)

    def score_pairs(self, pairs, progress=None):
        assert len(pairs) == len(self.logits)
        return self.logits


def test_sigmoid_keeps_large_logits_apart():
    from rag_cli.models.cross_encoder import sigmoid

    p = sigmoid(np.array([18.0, 19.0, -40.0], np.float32))
    assert p.dtype == np.float64 and p[0] < p[1] < 1.0
    assert p[0] == pytest.approx(1 / (1 + math.exp(-18)), rel=1e-15) and p[2] > 0.0


def test_rerank_orders_by_logit_and_applies_min_score():
    from rag_cli.stages.rerank import rerank_rows
    from rag_cli.store.runs import RunRow

    ids = ["a#0", "b#0", "c#0", "d#0", "e#0"]
    rows = [RunRow("q", "query", i + 1, cid, cid[0], 1.0 - i / 10, "dense") for i, cid in enumerate(ids)]
    texts = {cid: cid for cid in ids}
    logits = [18.0, 19.0, 40.0, 41.0, -3.0]
    out, _ = rerank_rows(rows, texts, FixedLogits(logits), top_in=5, top_out=5, probability=True, min_score=0.5)
    assert [r.chunk_id for r in out] == ["d#0", "c#0", "b#0", "a#0"]  # -3 (p = 0.047) dropped
    assert out[2].score != out[3].score and out[3].score == pytest.approx(1 / (1 + math.exp(-18)), rel=1e-15)
    raw, _ = rerank_rows(rows, texts, FixedLogits(logits), top_in=5, top_out=5, min_score=19.0)
    assert [(r.chunk_id, r.score) for r in raw] == [("d#0", 41.0), ("c#0", 40.0), ("b#0", 19.0)]


def test_printed_scores_keep_distinct_values_distinct():
    from rag_cli.cli import _score_digits

    a, b = 1 / (1 + math.exp(-18)), 1 / (1 + math.exp(-19))
    d = _score_digits([a, b])
    assert f"{a:.{d}f}" != f"{b:.{d}f}" and d > 4
    assert _score_digits([0.5, 0.25]) == 4 and _score_digits([0.3, 0.3]) == 4


def test_rerank_cli_states_the_scale_and_min_score(project, tiny_cross_encoder):
    ok("index", "-p", project)
    full = json.loads(ok("rerank", "cat", "--model", tiny_cross_encoder, "--sigmoid", "--json", "-p", project).stdout)
    assert full["score_scale"].startswith("probability")
    scores = [r["score"] for r in full["results"]]
    assert len(scores) == 5
    cut = sorted(scores)[2]
    kept = json.loads(ok("rerank", "cat", "--model", tiny_cross_encoder, "--sigmoid", "--min-score", cut,
                         "--json", "-p", project).stdout)
    assert [r["score"] for r in kept["results"]] == [s for s in scores if s >= cut]
    raw = ok("rerank", "cat", "--model", tiny_cross_encoder, "-p", project)
    assert "scores: logit" in " ".join(raw.stdout.split())


@pytest.mark.parametrize("args, problem", [
    (["--min-score", "nan"], "--min-score nan: must be a finite number"),
    (["--min-score", "inf"], "--min-score inf: must be a finite number"),
    (["--min-score", "-inf", "--sigmoid"], "--min-score -inf: must be a finite number"),
    (["--sigmoid", "--min-score", "1.5"], "--min-score 1.5: must be from 0 to 1 (a probability, with --sigmoid)"),
    (["--sigmoid", "--min-score", "-0.1"], "--min-score -0.1: must be from 0 to 1 (a probability, with --sigmoid)"),
])
def test_rerank_refuses_a_min_score_that_drops_every_result(project, tiny_cross_encoder, tmp_path, args, problem):
    """#23 item 13: NaN, inf, or a probability outside [0, 1] kept no result without a word; now exit 2."""
    from rag_cli.stages.rerank import rerank_rows
    from rag_cli.store.runs import RunRow

    ok("index", "-p", project)
    res = rag("rerank", "cat", "--model", tiny_cross_encoder, *args, "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert problem in " ".join(res.stderr.split())
    run = tmp_path / "run.parquet"
    ok("search", "--queries", write_docs(tmp_path / "q", {"q.tsv": "q1\tcat\n"}) / "q.tsv", "-o", run, "-p", project)
    res = rag("rerank", "--run", run, "--model", tiny_cross_encoder, *args, "-p", project)
    assert res.exit_code == 2 and problem in " ".join(res.stderr.split())
    rows = [RunRow("q", "query", 1, "a#0", "a", 1.0, "dense")]
    with pytest.raises(BadInput, match="must be"):
        rerank_rows(rows, {"a#0": "a"}, FixedLogits([1.0]), probability="--sigmoid" in args,
                    min_score=float(args[args.index("--min-score") + 1]))


def test_rerank_accepts_edge_min_scores(project, tiny_cross_encoder):
    ok("index", "-p", project)
    assert len(json.loads(ok("rerank", "cat", "--model", tiny_cross_encoder, "--sigmoid", "--min-score", 0,
                             "--json", "-p", project).stdout)["results"]) == 5
    assert len(json.loads(ok("rerank", "cat", "--model", tiny_cross_encoder, "--min-score", -1e6,
                             "--json", "-p", project).stdout)["results"]) == 5


# ------------------------------------------------------------------ truncation
def _truncating_project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """DOCS chunked one chunk per file with a tiny model of max_length 9: the
    dogs and 'my cats' texts are 10 tokens with [CLS]/[SEP], the others 9."""
    model = make_bi_encoder(tmp_path / "model", max_length=9)
    docs = write_docs(tmp_path / "docs", DOCS)
    p = tmp_path / "proj"
    ok("chunk", docs, "--model", model, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    return model, p, chunk_ids_by_doc(p)


def test_truncation_names_chunks_and_is_stored_per_row(tmp_path):
    model, p, ids = _truncating_project(tmp_path)
    cut = sorted([ids["dogs.md"], ids["my cats.md"]])
    res = ok("embed", "-p", p)
    err = " ".join(res.stderr.split())
    assert "2 chunk(s) are longer than the model's max_length (9 tokens" in err, err
    for cid in cut:
        assert f"{cid!r} (10 tokens)" in err
    assert repr(ids["cats.md"]) not in err
    t = pq.read_table(p / "embeddings.parquet")
    assert t.schema.field("n_tokens").type == pa.int32() and t.schema.field("truncated").type == pa.bool_()
    assert t.schema.metadata[b"max_length"] == b"9"
    rows = {r["chunk_id"]: (r["n_tokens"], r["truncated"]) for r in t.select(["chunk_id", "n_tokens", "truncated"]).to_pylist()}
    assert rows == {ids["cats.md"]: (9, False), ids["dogs.md"]: (10, True), ids["paris.md"]: (9, False),
                    ids["rivers.md"]: (9, False), ids["my cats.md"]: (10, True)}
    assert read_embeddings(p / "embeddings.parquet").vectors.shape == (5, 16)
    # a rerun served from the cache still reports it
    res = ok("embed", "-p", p, "--json")
    out = json.loads(res.stdout)
    assert out["n_embedded"] == 0 and out["n_truncated"] == 2
    assert sorted(r["chunk_id"] for r in out["truncated"]) == cut and {r["n_tokens"] for r in out["truncated"]} == {10}
    assert pq.read_table(p / "embeddings.parquet", columns=["truncated"]).column(0).to_pylist().count(True) == 2


def test_on_truncate_error_fails_naming_chunks_and_writes_nothing(tmp_path):
    model, p, ids = _truncating_project(tmp_path)
    res = rag("embed", "-p", p, "--on-truncate", "error")
    assert res.exit_code == 2, (res.stdout, res.stderr)
    err = " ".join(res.stderr.split())
    assert f"{ids['dogs.md']!r} (10 tokens)" in err and "nothing was embedded or written" in err, err
    # #23 item 22: nothing was cut (nothing was embedded): the message says they would be
    assert "were cut" not in err and "would be cut to it" in err, err
    assert not (p / "embeddings.parquet").exists() and not (p / "cache" / "vectors").exists()
    assert rag("embed", "-p", p, "--on-truncate", "drop").exit_code == 2
    # the config key works too, and warn is the default
    (p / "rag.toml").write_text((p / "rag.toml").read_text().replace('on_truncate = "warn"', 'on_truncate = "error"'))
    assert 'on_truncate = "error"' in (p / "rag.toml").read_text()
    assert rag("embed", "-p", p).exit_code == 2
    ok("embed", "-p", p, "--on-truncate", "warn")
    assert (p / "embeddings.parquet").exists()


def test_chunk_warns_when_size_exceeds_the_models_max_length(tmp_path):
    model = make_bi_encoder(tmp_path / "model", max_length=16)
    docs = write_docs(tmp_path / "docs", DOCS)
    res = ok("chunk", docs, "--model", model, "--size", 15, "--overlap", 0, "-p", tmp_path / "p1")
    err = " ".join(res.stderr.split())
    # [CLS] and [SEP] take 2 of the 16 tokens: 14 is the most a chunk may have
    assert "--size 15 tokens is more than the embedder" in err and "use --size 14 or less" in err, err
    res = ok("chunk", docs, "--model", model, "--size", 14, "--overlap", 0, "-p", tmp_path / "p2")
    assert "--size" not in res.stderr
    res = ok("chunk", docs, "--model", model, "--size", 300, "--unit", "chars", "--overlap", 0, "-p", tmp_path / "p3")
    assert "--size" not in res.stderr


# ------------------------------------------------------------------ files
def test_split_markdown_table_repeats_its_header_in_every_part(tmp_path):
    rows = "\n".join(f"| compound {i} | {i * 7} mg | trial {i % 3} |" for i in range(40))
    text = ("# Dosage\n\nThe doses given in the trials.\n\n"
            "| Compound | Dose | Trial |\n|:--- | ---:| --- |\n" + rows + "\n\nAfter the table.\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "doses.md").write_text(text, encoding="utf-8")
    p = tmp_path / "proj"
    ok("chunk", docs, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    chunks = pq.read_table(p / "chunks.parquet").to_pylist()
    header = "| Compound | Dose | Trial |\n|:--- | ---:| --- |\n"
    with_rows = [c for c in chunks if "| compound " in c["text"]]
    assert len(with_rows) >= 5  # the table really is split
    assert all(c["embed_text"].count(header) == 1 for c in with_rows)
    first = with_rows[0]
    assert header in first["text"] and first["embed_text"] == "Dosage\n" + first["text"]
    for c in with_rows[1:]:
        assert header not in c["text"] and c["embed_text"] == "Dosage\n" + header + c["text"]
    # the stored text is still the exact span (the normalised text equals the input here: ASCII, LF)
    assert all(text[c["start_char"]:c["end_char"]] == c["text"] for c in chunks)
    after = [c for c in chunks if "After the table." in c["text"] and "| compound" not in c["text"]]
    assert all(header not in c["embed_text"] for c in after)


def _table_chunks(tmp_path: Path, text: str, *flags) -> list[dict]:
    docs = write_docs(tmp_path / "docs", {"t.md": text})
    ok("chunk", docs, "--unit", "chars", "--overlap", 0, *flags, "-p", tmp_path / "proj")
    chunks = pq.read_table(tmp_path / "proj" / "chunks.parquet").to_pylist()
    assert all(text[c["start_char"]:c["end_char"]] == c["text"] for c in chunks)  # still the exact span
    return chunks


LONG_ROW = "| " + " | ".join(f"result {i:02d}" for i in range(11)) + " | result 11 and the last 2 |"  # 160 chars


def test_a_table_row_longer_than_the_size_is_cut_at_cells(tmp_path):
    """#23 item 14: a 160-character row under --size 60 was cut at spaces, the last part a chunk `|` alone."""
    assert len(LONG_ROW) == 160
    header = "| " + " | ".join(f"c{i}" for i in range(12)) + " |\n|" + "---|" * 12
    text = header + "\n" + LONG_ROW + "\n| short | row | a | b | c | d | e | f | g | h | i | j |\n"
    chunks = _table_chunks(tmp_path, text, "--size", 60)
    parts = [c for c in chunks if "result" in c["text"]]
    assert len(parts) == 3
    assert all(c["text"].strip("|- \n:") for c in chunks), [c["text"] for c in chunks]  # no chunk of pipes alone
    assert all(c["text"].endswith(" |") for c in parts)  # whole cells: every part ends at a cell's closing pipe
    assert "".join(c["text"] for c in parts).replace("|", "").split() == LONG_ROW.replace("|", "").split()
    assert all(c["embed_text"].startswith(header + "\n") for c in parts)
    # a lone cell longer than the size is split inside, and still no chunk is a pipe alone
    wide = "| a | b |\n| --- | --- |\n| " + " ".join(["word"] * 30) + " | x |\n"
    assert all(c["text"].strip("|- \n:") for c in _table_chunks(tmp_path / "w", wide, "--size", 24))


def test_a_table_header_is_never_a_chunk_without_a_row(tmp_path):
    """#23 item 15: header + delimiter + first row over --size made the header lines a chunk of their own."""
    header = "| Compound name | Dose given | Trial |\n| --- | --- | --- |"
    text = "Doses.\n\n" + header + "\n| aspirin 100 | 100 mg | one |\n| b | 2 | x |\n| c | 3 | y |\n"
    chunks = _table_chunks(tmp_path, text, "--size", 60)
    assert all("| --- |" not in c["text"] or "aspirin" in c["text"] for c in chunks), [c["text"] for c in chunks]
    first = next(c for c in chunks if "aspirin" in c["text"])
    assert first["embed_text"].startswith(header + "\n")
    assert all(c["embed_text"].count("| Compound name |") == 1 for c in chunks if "|" in c["text"])
    # a cut between the header line and the delimiter row: the part that starts at the delimiter gets the header line
    text = "| " + " | ".join(f"column {i}" for i in range(5)) + " |\n|" + "---|" * 5 + "\n| 1 | 2 | 3 | 4 | 5 |\n"
    chunks = _table_chunks(tmp_path / "b", text, "--size", 60)
    assert [c["text"] for c in chunks] == ["|---|---|---|---|---|\n| 1 | 2 | 3 | 4 | 5 |"]
    assert chunks[0]["embed_text"] == text.rstrip("\n")
    # a table of a header alone is kept: nothing else carries it
    chunks = _table_chunks(tmp_path / "c", "| a | b |\n| --- | --- |\n\nAfter.\n", "--size", 16)
    assert [c["text"] for c in chunks] == ["| a | b |", "| --- | --- |", "After."]


def test_search_shows_a_split_tables_header_with_every_part(tmp_path, tiny_bi_encoder):
    """#23 item 16: the header was in embed_text only; a hit on a later part showed rows without column names."""
    rows = "\n".join(f"| cat {i} | dog {i} | {i} |" for i in range(30))
    text = "# Pets\n\n| Animal | Friend | N |\n| --- | --- | --- |\n" + rows + "\n"
    docs = write_docs(tmp_path / "docs", {"pets.md": text})
    p = tmp_path / "proj"
    ok("build", docs, "--model", tiny_bi_encoder, "--unit", "chars", "--size", 120, "--overlap", 0, "-p", p)
    chunks = pq.read_table(p / "chunks.parquet").to_pylist()
    header = "| Animal | Friend | N |\n| --- | --- | --- |"
    later = [c for c in chunks if header not in c["text"]]
    assert len(later) >= 3  # split, and the stored text is still the exact span
    res = json.loads(ok("search", "cat dog", "-k", 20, "--mode", "sparse", "--json", "-p", p).stdout)
    shown = {r["chunk_id"]: r["text"] for r in res["results"]}
    for c in later:
        assert shown[c["chunk_id"]] == header + "\n" + c["text"]
    table = _runner.invoke(app, ["search", "cat dog", "-k", "20", "--mode", "sparse", "-p", str(p)],
                           env={"COLUMNS": "400"})
    assert table.exit_code == 0 and table.stdout.count("| Animal | Friend | N |") == len(chunks)


def test_find_tables_follows_gfm():
    from rag_cli.chunking.tables import find_tables

    text = "intro\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |\n\nx | y\n---\nz\n"
    (t,) = find_tables(text)  # `x | y` over `---` is a setext heading, not a table (1 cell against 2)
    assert t.header == "| a | b |\n| --- | --- |"
    assert text[t.body:t.end] == "| 1 | 2 |\n| 3 | 4 |"
    assert find_tables("no pipes here\n---\n") == []


def test_short_gbk_file_warns_that_its_encoding_is_a_guess(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "gb.txt").write_bytes("国标".encode("gbk"))  # 4 bytes: GBK 国标, Big5 弊梓, EUC-JP 忽炎
    (docs / "long.txt").write_bytes(("这是一个用国标编码写的中文文件，内容比较长，可以用来检测编码是否正确。" * 3).encode("gbk"))
    p = tmp_path / "proj"
    res = ok("chunk", docs, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    err = " ".join(res.stderr.split())
    assert "gb.txt: the encoding is a guess: read as gb18030, but big5 and euc_jp also give plausible text" in err, err
    assert "--encoding big5" in err and "long.txt" not in err
    texts = {Path(r["doc_id"]).name: r["text"] for r in pq.read_table(p / "chunks.parquet").to_pylist()}
    assert texts["gb.txt"] == "国标"
    # --encoding forces one, for every text file, and silences the guess
    res = ok("chunk", docs / "gb.txt", "--encoding", "big5", "--unit", "chars", "--size", 300, "-p", p)
    assert "guess" not in res.stderr
    assert pq.read_table(p / "chunks.parquet").column("text").to_pylist() == ["弊梓"]
    ok("chunk", docs, "--encoding", "GBK", "--unit", "chars", "--size", 300, "-p", p)
    assert "国标" in pq.read_table(p / "chunks.parquet").column("text").to_pylist()
    # an unknown codec, or one that is not a text encoding, is refused before anything is read or written
    before = (p / "chunks.parquet").read_bytes()
    for bad in ("gbk2", "base64"):
        res = rag("chunk", docs, "--encoding", bad, "-p", p)
        assert res.exit_code == 2 and f"--encoding {bad!r}" in res.stderr, res.stderr
    assert (p / "chunks.parquet").read_bytes() == before
    # a file that does not decode with the forced encoding is skipped with the reason
    (docs / "utf8.txt").write_text("naïve café", encoding="utf-8")
    res = rag("chunk", docs / "utf8.txt", "--encoding", "ascii", "-p", p)
    assert res.exit_code == 2 and "does not decode as ascii" in res.stderr


def test_a_forced_encoding_that_gives_garbage_is_named(tmp_path):
    """#23 item 21: --encoding latin-1 or utf-16 forced on a GBK file decoded to garbage without a word."""
    zh = "检索增强生成是一种结合检索与生成的方法它先从文档中找到相关段落再让模型根据这些段落回答问题"
    zh = "".join(c for c in zh if not 0xD8 <= c.encode("gbk")[1] <= 0xDF)  # no surrogate when read as UTF-16 LE
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "gbk.txt").write_bytes(zh.encode("gbk"))
    (docs / "fr.txt").write_bytes("Le café est très bon, à côté de la gare. Ça va très bien.".encode("latin-1"))
    p = tmp_path / "proj"
    for enc in ("latin-1", "utf-16"):
        res = ok("chunk", docs / "gbk.txt", "--encoding", enc, "--unit", "chars", "--size", 300, "-p", p)
        err = " ".join(res.stderr.split())
        assert f"{docs / 'gbk.txt'}: --encoding" in err and "looks like the wrong encoding" in err, err
        assert "without --encoding it reads as gb18030" in err, err
    assert "private-use" in err  # utf-16 on these bytes gives private-use characters
    # the right encoding, or a Latin-1 file read as Latin-1: no warning
    for path, enc in ((docs / "gbk.txt", "gbk"), (docs / "fr.txt", "latin-1"), (docs / "fr.txt", "cp1252")):
        res = ok("chunk", path, "--encoding", enc, "--unit", "chars", "--size", 300, "-p", p)
        assert "wrong encoding" not in res.stderr, (enc, res.stderr)
    # replacement characters in a file read as UTF-8 are named too
    (docs / "repl.txt").write_text("a text with \ufffd\ufffd where bytes were lost", encoding="utf-8")
    res = ok("chunk", docs / "repl.txt", "--encoding", "utf-8", "--unit", "chars", "--size", 300, "-p", p)
    assert "2 replacement characters (U+FFFD)" in " ".join(res.stderr.split()), res.stderr


def test_no_documents_error_names_every_skipped_file(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "empty.md").write_bytes(b"")
    (docs / "blank.txt").write_text("  \n\n \t\n")
    (docs / "data.bin").write_bytes(b"\x00\x01")
    for i in range(12):
        (docs / f"e{i:02d}.md").write_text("\n")
    res = rag("chunk", docs, "-p", tmp_path / "proj")
    assert res.exit_code == 2
    err = " ".join(res.stderr.split())
    assert "15 file(s) skipped:" in err, err
    assert "blank.txt: no text (empty or whitespace only)" in err
    assert "data.bin: unsupported file type '.bin'" in err
    # sorted: blank.txt, data.bin, e00.md ... e11.md, empty.md; the first 10 are named
    assert "e00.md: no text" in err and "e07.md: no text" in err and "and 5 more" in err
    assert "e08.md" not in err and "empty.md" not in err
    assert not (tmp_path / "proj" / "chunks.parquet").exists()


# ------------------------------------------------------------------ big inputs
def test_a_file_of_headings_only_is_skipped_and_named(tmp_path, tiny_bi_encoder):
    """#23 item 18: a Markdown file of headings only gave 0 chunks without a word; embed then wrote an empty
    embeddings.parquet and index failed. Such a document is skipped, named with its reason, as a blank file is."""
    docs = write_docs(tmp_path / "docs", {"good.md": "# Cats\n\nthe cat sat on the mat .\n",
                                          "heads.md": "# Title\n\n## Part one\n\n### Part two\n"})
    p = tmp_path / "proj"
    res = ok("chunk", docs, "--model", tiny_bi_encoder, "--unit", "chars", "--size", 300, "-p", p)
    err = " ".join(res.stderr.split())
    assert f"skipped {docs / 'heads.md'}: only headings, no text under them" in err, err
    assert [Path(d).name for d in pq.read_table(p / "docs.parquet").column("doc_id").to_pylist()] == ["good.md"]
    assert json.loads((p / "manifest.json").read_text())["chunk"]["skipped"] == [
        {"path": str(docs / "heads.md"), "reason": "only headings, no text under them"}]
    # only such files (and blank ones): exit 2 naming each, as for a folder of blank files
    (docs / "good.md").unlink()
    (docs / "blank.txt").write_text(" \n")
    res = rag("chunk", docs, "--model", tiny_bi_encoder, "--unit", "chars", "--size", 300, "-p", tmp_path / "p2")
    assert res.exit_code == 2
    err = " ".join(res.stderr.split())
    assert "2 file(s) skipped:" in err and "heads.md: only headings, no text under them" in err, err
    assert "blank.txt: no text (empty or whitespace only)" in err
    assert not (tmp_path / "p2" / "chunks.parquet").exists()
    # rag update drops a file that is now headings only, naming it
    (docs / "good.md").write_text("# Dogs\n\nthe dog ran fast in the city .\n", encoding="utf-8")
    (docs / "other.md").write_text("paris is the capital of france .\n", encoding="utf-8")
    b = tmp_path / "built"
    ok("build", docs, "--model", tiny_bi_encoder, "--unit", "chars", "--size", 300, "-p", b)
    (docs / "other.md").write_text("# Paris\n", encoding="utf-8")
    res = ok("update", "-p", b)
    assert "other.md: only headings, no text under them" in " ".join(res.stderr.split()), res.stderr
    assert sorted(Path(d).name for d in pq.read_table(b / "docs.parquet").column("doc_id").to_pylist()) == ["good.md"]
    assert ok("status", "-p", b).stdout.strip().endswith("up to date")
    # a BEIR record of a title only is named the same way
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "title": "Cats", "text": "the cat sat."}\n'
                      '{"_id": "b", "title": "Only a title", "text": ""}\n', encoding="utf-8")
    res = ok("chunk", corpus, "--format", "beir", "--unit", "chars", "--size", 100, "-p", tmp_path / "beir")
    assert f"skipped {corpus} (record 'b'): only a title, no text" in " ".join(res.stderr.split())


def test_embed_refuses_a_chunks_file_without_chunks(project):
    """#23 item 18: embed wrote an empty embeddings.parquet for a chunks.parquet of 0 rows; now exit 2, as index."""
    t = pq.read_table(project / "chunks.parquet")
    pq.write_table(t.slice(0, 0), project / "chunks.parquet")
    (project / "embeddings.parquet").unlink()
    res = rag("embed", "-p", project)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert "chunks.parquet has no chunks" in " ".join(res.stderr.split())
    assert not (project / "embeddings.parquet").exists()


def test_skipped_file_names_with_a_newline_print_escaped(tmp_path):
    """#23 item 12, for the other lists of file names: skipped files and the no-documents error."""
    docs = write_docs(tmp_path / "docs", {"good.md": "the cat sat .\n", "bad\nskipped x: forged.md": ""})
    res = ok("chunk", docs, "--unit", "chars", "--size", 300, "-p", tmp_path / "p")
    assert f"skipped {docs}/bad\\nskipped x: forged.md: no text" in res.stderr, res.stderr
    assert "\nskipped x" not in res.stderr
    (docs / "good.md").unlink()
    res = rag("chunk", docs, "--unit", "chars", "--size", 300, "-p", tmp_path / "p2")
    assert res.exit_code == 2 and "bad\\nskipped x: forged.md" in res.stderr, res.stderr


def _scifact_subset(scifact_dir: Path, out: Path, n: int) -> Path:
    import gzip

    with gzip.open(scifact_dir / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        lines = [next(fh) for _ in range(n)]
    out.write_text("".join(lines), encoding="utf-8")
    return out


@pytest.mark.parametrize("strategy", ["recursive", "parent-child"])
def test_streamed_chunking_writes_what_one_piece_writes(tmp_path, scifact_dir, monkeypatch, strategy):
    import io

    from rag_cli.chunking import chunk_with_parents, chunks_table, docs_table
    from rag_cli.loaders import load_sources
    from rag_cli.stages import chunk as chunk_stage

    corpus = _scifact_subset(scifact_dir, tmp_path / "corpus.jsonl", 300)
    args = ["--unit", "chars", "--size", 400, "--overlap", 40, "--strategy", strategy, "--parent-size", 1200]
    p = tmp_path / "proj"
    ok("chunk", corpus, *args, "-p", p)
    docs = load_sources([str(corpus)]).documents
    chunks, parents = chunk_with_parents(docs, strategy=strategy, size=400, overlap=40, unit="chars",
                                         parent_size=1200)

    def one_piece(table) -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return buf.getvalue()

    # a corpus within one row group: the same bytes as the tables written in one piece
    assert (p / "docs.parquet").read_bytes() == one_piece(docs_table(docs))
    assert (p / "chunks.parquet").read_bytes() == one_piece(chunks_table(chunks))
    if strategy == "parent-child":
        assert (p / "parents.parquet").read_bytes() == one_piece(chunks_table(parents))
    # in row groups of 7 rows (and 5,000 characters): the same rows
    monkeypatch.setattr(chunk_stage, "ROW_GROUP", 7)
    monkeypatch.setattr(chunk_stage, "ROW_GROUP_CHARS", 5000)
    q = tmp_path / "proj2"
    ok("chunk", corpus, *args, "-p", q)
    got = pq.ParquetFile(q / "chunks.parquet")
    assert got.num_row_groups > len(chunks) // 7 // 2
    assert got.read().equals(chunks_table(chunks))
    assert pq.read_table(q / "docs.parquet").equals(docs_table(docs))
    assert pq.ParquetFile(q / "docs.parquet").num_row_groups > 300 // 7


def test_streamed_chunking_writes_nothing_on_a_late_error(tmp_path):
    docs = write_docs(tmp_path / "docs", {f"d{i:03d}.md": f"document {i} text .\n" for i in range(30)})
    p = tmp_path / "proj"
    ok("chunk", docs, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    before = {f: (p / f).read_bytes() for f in ("docs.parquet", "chunks.parquet")}
    # a second source whose doc ids clash with the first's: found only after 30 documents were chunked
    other = write_docs(tmp_path / "other" / "docs", {"d029.md": "clash .\n"})
    res = rag("chunk", docs, other, "--unit", "chars", "--size", 300, "--overlap", 0, "-p", p)
    assert res.exit_code == 2 and "comes from both" in res.stderr, res.stderr
    assert {f: (p / f).read_bytes() for f in before} == before
    assert [x.name for x in p.iterdir() if x.name.endswith(".tmp")] == []
