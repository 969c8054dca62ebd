"""Bad input to the real `rag` CLI: exit code 2, a message on stderr that names
the input at fault, nothing on stdout, and no new or changed file in the
project folder (no leftover temporary files either).

A project of the sample corpus is built once with the tiny bi-encoder of
tests/tiny_models.py (fast); each test works on its own copy.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
SAMPLE_QUESTIONS = REPO / "sample_corpus" / "questions.jsonl"
SAMPLE_QRELS = REPO / "sample_corpus" / "qrels.tsv"

_runner = CliRunner()


def rag(*args):
    return _runner.invoke(app, [str(a) for a in args])


def snapshot(folder: Path) -> dict[str, tuple[int, int]] | None:
    """{relative path: (size, mtime_ns)} of every file and folder under `folder` (hidden ones too)."""
    if not folder.exists():
        return None
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.stat()
            out[str(path.relative_to(folder))] = (st.st_size if path.is_file() else -1, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_bi_encoder) -> Path:
    """A complete project (chunks, embeddings, index, one run) made with the tiny bi-encoder."""
    p = tmp_path_factory.mktemp("errors") / "proj"
    for args in (("chunk", SAMPLE_DOCS, "--model", tiny_bi_encoder), ("embed",), ("index",),
                 ("search", "--queries", SAMPLE_QUESTIONS, "--name", "base", "-k", 20)):
        res = rag(*args, "-p", p)
        assert res.exit_code == 0, (args, res.stdout, res.stderr, res.exception)
    return p


@pytest.fixture
def project(built, tmp_path) -> Path:
    p = tmp_path / "proj"
    shutil.copytree(built, p)
    return p


def assert_bad_input(args, folder: Path, *names: str):
    """Run `rag ARGS`: exit 2, stderr names every one of `names`, stdout empty, `folder` untouched."""
    before = snapshot(folder)
    res = rag(*args)
    after = snapshot(folder)
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, res.exception)
    message = " ".join(res.stderr.split())
    flat = "".join(res.stderr.split())  # rich wraps long lines, even inside a path (see test_message_keeps_paths_whole)
    for name in names:
        assert "".join(str(name).split()) in flat, f"{name!r} not in: {res.stderr}"
    assert res.stdout == ""
    assert after == before, "the project folder changed"
    return message


# ------------------------------------------------------------------ rag chunk
def test_missing_source_file(project, tmp_path):
    missing = tmp_path / "no-such-file.md"
    assert_bad_input(["chunk", missing, "-p", project], project, missing)


def test_empty_folder(project, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_bad_input(["chunk", empty, "-p", project], project, empty)


def test_corpus_without_text_stops_at_chunk(tmp_path, tiny_bi_encoder):
    """A corpus whose only record gives no chunk (a title, no text) is exit 2 at `rag chunk`, naming the
    record (#23 item 18: chunk and embed used to succeed with nothing and `rag index` failed)."""
    corpus = tmp_path / "empty.jsonl"
    corpus.write_text('{"_id": "a", "title": "t", "text": ""}\n', encoding="utf-8")  # a title, no text: no chunk
    p = tmp_path / "p"
    rag("chunk", corpus, "--model", tiny_bi_encoder, "-p", p)  # makes the folder (and its lock file)
    assert_bad_input(["chunk", corpus, "--model", tiny_bi_encoder, "-p", p], p, "no documents found",
                     f"{corpus} (record 'a'): only a title, no text")


def test_overlap_not_smaller_than_size(project):
    msg = assert_bad_input(["chunk", SAMPLE_DOCS, "--size", 64, "--overlap", 64, "-p", project], project,
                           "--overlap 64", "--size 64")
    assert "smaller" in msg


def test_size_zero(project):
    assert_bad_input(["chunk", SAMPLE_DOCS, "--size", 0, "-p", project], project, "--size 0")


def test_unknown_strategy(project):
    assert_bad_input(["chunk", SAMPLE_DOCS, "--strategy", "bogus", "-p", project], project,
                     "--strategy", "bogus", "recursive")


@pytest.mark.parametrize("flags,names", [
    (["--size", "64", "--overlap", "100"], ["--overlap 100", "--size 64", "smaller"]),
    (["--size", "-5"], ["--size -5", "greater than 0"]),
    (["--overlap", "-1"], ["--overlap -1", "≥ 0"]),
    (["--unit", "words"], ["--unit", "words", "tokens", "chars"]),
    (["--strategy", "Recursive"], ["--strategy", "Recursive", "recursive, fixed, markdown"]),
])
def test_chunk_bad_sizes_and_names(project, flags, names):
    assert_bad_input(["chunk", SAMPLE_DOCS, *flags, "-p", project], project, *names)


@pytest.mark.parametrize("key,value,names", [
    ("overlap", 256, ["--overlap 256", "--size 256"]),
    ("size", 0, ["--size 0"]),
    ("strategy", '"bogus"', ["--strategy", "bogus"]),
])
def test_chunk_bad_config_values(project, key, value, names):
    # the same checks apply to values that come from rag.toml (defaults: size 256, overlap 32)
    import re
    config = project / "rag.toml"
    text = config.read_text()
    new_text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text, count=1)
    assert new_text != text
    config.write_text(new_text)
    assert_bad_input(["chunk", SAMPLE_DOCS, "-p", project], project, *names)


@pytest.mark.parametrize("bad", [["--size", "0"], ["--strategy", "bogus"], ["/no/such/file.md"],
                                 ["--overlap", "300"], ["--size", "10", "--overlap", "10"], ["--unit", "lines"]])
def test_chunk_errors_in_a_new_project_create_nothing(tmp_path, bad):
    p = tmp_path / "new"
    args = ["chunk", *bad] if bad[0].startswith("/") else ["chunk", SAMPLE_DOCS, *bad]
    assert_bad_input([*args, "-p", p], tmp_path, bad[-1])
    assert not p.exists()


# ------------------------------------------------------------------ rag search / eval
@pytest.mark.parametrize("query", ["\x07\x1b", "\u200b\u200b", "\x00 -- ?!"], ids=["control", "format", "punct"])
def test_a_query_without_a_letter_or_digit_is_empty(project, query):
    """Control, format and punctuation characters only: no word to search for (a bi-encoder would still return
    its nearest chunks), so exit 2, for a search and a question alike."""
    assert_bad_input(["search", query, "--mode", "dense", "-p", project], project, "the query is empty")
    assert_bad_input(["ask", query, "-p", project], project, "the query is empty")


def test_unknown_mode(project):
    assert_bad_input(["search", "hnsw", "--mode", "bogus", "-p", project], project, "--mode", "bogus", "hybrid")


def test_search_without_index(tmp_path):
    p = tmp_path / "empty-project"
    p.mkdir()
    assert_bad_input(["search", "hnsw", "-p", p], p, p / "index", "rag index")
    assert list(p.iterdir()) == []


def test_eval_queries_without_index(tmp_path):
    p = tmp_path / "empty-project"
    p.mkdir()
    assert_bad_input(["eval", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS, "-p", p], p,
                     p / "index", "rag index")
    assert list(p.iterdir()) == []


def test_eval_missing_qrels(project, tmp_path):
    missing = tmp_path / "missing-qrels.tsv"
    assert_bad_input(["eval", "--run", project / "runs" / "base.parquet", "--qrels", missing, "-p", project],
                     project, missing)


def test_eval_malformed_qrels_line(project, tmp_path):
    bad = tmp_path / "bad-qrels.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\tbm25.md\t1\nq2 chunking.md\n", encoding="utf-8")
    msg = assert_bad_input(["eval", "--run", project / "runs" / "base.parquet", "--qrels", bad, "-p", project],
                           project, bad)
    assert "3" in msg.replace(str(bad), ""), f"the line number 3 is not named: {msg}"


# Each subcommand of `rag eval` takes its own flags; one of another subcommand is rejected (exit 2, "No such
# option" naming the flag and the subcommands that take it) before anything is read or written: rag.toml, -o,
# --md and --plots stay as they were.
@pytest.mark.parametrize("args,names", [
    (["--qrels", SAMPLE_QRELS, "--run", "RUN", "--unanswerable", "A"], ["--unanswerable", "eval answers"]),
    (["tune", "refusal", "--answers", "A", "--unanswerable", "U", "--gold", "G"], ["--gold", "eval answers"]),
    (["tune", "refusal", "--answers", "A", "--unanswerable", "U", "--plots", "OUT/plots"],
     ["No such option: --plots"]),
    (["answers", "--answers", "A", "--gold", "G", "--test-answers", "A", "--max-false-refusal", "0.1"],
     ["--test-answers", "eval tune refusal"]),
    (["answers", "--answers", "A", "--gold", "G", "--unanswerable", "U", "--plots", "OUT/plots"],
     ["No such option: --plots"]),
    (["answers", "--answers", "A", "--gold", "G", "--judge-repeats", "2"], ["--judge-repeats", "need --judge"]),
    (["answers", "--answers", "A", "--gold", "G", "--max-false-refusal", "0.05"], ["--max-false-refusal"]),
    (["tune", "fusion", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS, "--max-false-refusal", "0.1",
      "--unanswerable", "A"], ["--max-false-refusal", "eval tune refusal"]),
    (["make-unanswerable", "3", "--corpus", "C", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS,
      "-o", "OUT/x5", "--md", "OUT/x5.md", "--plots", "OUT/p5"], ["No such option: --md"]),
    (["make-unanswerable", "3", "--corpus", "C", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS,
      "-o", "OUT/x5", "--ks", "1,5"], ["--ks"]),
    (["funnel", "--qrels", SAMPLE_QRELS, "--queries", SAMPLE_QUESTIONS, "--mode", "dense"], ["--mode", "eval run"]),
    (["compare", "--qrels", SAMPLE_QRELS, "R1", "R2", "--queries", SAMPLE_QUESTIONS], ["--queries"]),
    (["perturb", "--qrels", SAMPLE_QRELS, "--queries", SAMPLE_QUESTIONS, "--perturb", "case", "--run", "R"],
     ["--run", "eval run"]),
    (["--qrels", SAMPLE_QRELS, "--run", "R", "--seed", "0"], ["--seed"]),  # the old "= the default" case
    (["--qrels", SAMPLE_QRELS, "--run", "R", "--permutations", "10"], ["--permutations"]),
    (["tune", "bogus"], ["No such command 'bogus'", "'fusion' or 'refusal'"]),
    (["tune", "bogus", "--queries", SAMPLE_QUESTIONS], ["No such command 'bogus'"]),
    (["--qrels", SAMPLE_QRELS, "--compare", "R1", "R2"], ["--compare", "now a subcommand"]),  # an old spelling
])
def test_eval_rejects_flags_of_another_mode(project, tmp_path, args, names):
    out = tmp_path / "out"
    out.mkdir()
    args = [str(a).replace("OUT", str(out)) for a in args]
    before = (project / "rag.toml").read_bytes()
    msg = assert_bad_input(["eval", *args, "-p", project], project, *names)
    assert "--qrels FILE is needed" not in msg
    assert (project / "rag.toml").read_bytes() == before and list(out.iterdir()) == []


# ------------------------------------------------------------------ rag rerank / ask
def test_rerank_without_model(project):
    assert_bad_input(["rerank", "--run", project / "runs" / "base.parquet", "-p", project], project, "--model")


def test_ask_k_zero(project):
    assert_bad_input(["ask", "what is hnsw", "-k", 0, "-p", project], project, "-k 0")


def test_message_keeps_paths_whole(tmp_path):
    p = tmp_path / ("a-project-folder-with-a-rather-long-name-" + "x" * 40)
    p.mkdir()
    res = rag("search", "hnsw", "-p", p)
    assert res.exit_code == 2
    assert str(p / "index") in res.stderr, res.stderr


# ------------------------------------------------------------------ damaged files, odd queries
@pytest.mark.parametrize("damaged", ["meta.json", "dense/hnsw.bin", "chunks.arrow"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "same size"])
def test_damaged_index_file_says_rebuild(project, damaged, damage):
    from rag_cli.store.index_folder import current_generation

    path = current_generation(project / "index") / damaged
    data = path.read_bytes()
    path.write_bytes({"garbage": b"garbage", "truncated": data[:-10],
                      "same size": data[:-1] + bytes([data[-1] ^ 1])}[damage])
    message = assert_bad_input(["search", "hnsw", "-p", project], project, path, "rag index", "rag rollback")
    assert "is damaged" in message


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
@pytest.mark.parametrize("stage", ["embed", "index"])
def test_damaged_chunks_parquet_says_rerun_chunk(project, stage, damage):
    # was exit 1 with a bare "ArrowInvalid: Parquet magic bytes not found in footer"
    path = project / "chunks.parquet"
    path.write_bytes(b"garbage" if damage == "garbage" else path.read_bytes()[:-100])
    message = assert_bad_input([stage, "-p", project], project, path, "rag chunk")
    assert "cannot be read as Parquet" in message


def test_chunks_parquet_without_chunk_id_says_rerun_chunk(project):
    import pyarrow as pa

    path = project / "chunks.parquet"
    pq.write_table(pa.table({"text": ["a"]}), path)
    message = assert_bad_input(["index", "-p", project], project, path, "chunk_id", "rag chunk")
    assert "lacks the column(s) chunk_id, doc_id" in message


def test_damaged_run_file_names_it(project):
    run = project / "runs" / "base.parquet"
    run.write_bytes(run.read_bytes()[:-50])
    assert_bad_input(["eval", "--run", run, "--qrels", SAMPLE_QRELS, "-p", project], project, run,
                     "cannot be read as Parquet")


def test_bad_config_value_names_the_key(project):
    cfg = project / "rag.toml"
    cfg.write_text(cfg.read_text().replace('mode = "hybrid"', 'mode = 3'))
    assert_bad_input(["search", "hnsw", "-p", project], project, "rag.toml", "[search] mode", "str")


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_query(project, query):
    assert_bad_input(["search", query, "-p", project], project, "query is empty")
    assert_bad_input(["ask", query, "-p", project], project, "query is empty")


def test_missing_execution_provider(project):
    import onnxruntime as ort

    assert_bad_input(["embed", "--provider", "tpu", "-p", project], project, "--provider 'tpu'", "cpu, cuda, coreml")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA, so --provider cuda is not a missing provider here")
    assert_bad_input(["embed", "--provider", "cuda", "-p", project], project, "--provider 'cuda'",
                     "CUDAExecutionProvider", "available here: cpu")


def test_damaged_embeddings_are_rebuilt(project):
    (project / "embeddings.parquet").write_bytes(b"garbage")
    res = rag("embed", "--json", "-p", project)
    assert res.exit_code == 0, res.stderr
    import json

    summary = json.loads(res.stdout)
    # rebuilt from the vector cache (PROJECT/cache/vectors), nothing embedded again
    assert summary["n_reused"] == summary["n_chunks"] > 0 and summary["n_embedded"] == 0
    assert "cannot be read as Parquet" in summary["rebuilt_unreadable"]
    good = (project / "embeddings.parquet").read_bytes()
    # without the cache too, every chunk is embedded again, to the same vectors
    (project / "embeddings.parquet").write_bytes(b"garbage")
    shutil.rmtree(project / "cache")
    summary = json.loads(rag("embed", "--json", "-p", project).stdout)
    assert summary["n_reused"] == 0 and summary["n_embedded"] == summary["n_chunks"] > 0
    assert pq.read_table(project / "embeddings.parquet").equals(pq.read_table(io.BytesIO(good)))


def test_beir_folder_reads_only_its_corpus(tmp_path, tiny_bi_encoder):
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "alpha beta"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "alpha?"}\n')
    res = rag("chunk", folder, "--format", "beir", "--unit", "chars", "--size", 100, "--overlap", 10,
              "--model", tiny_bi_encoder, "--json", "-p", tmp_path / "p")
    assert res.exit_code == 0, res.stderr
    import json

    assert json.loads(res.stdout)["n_docs"] == 1


# ------------------------------------------------------------------ relative model folders
def test_relative_model_folders_work_and_are_saved_absolute(tmp_path, monkeypatch):
    from tiny_models import make_bi_encoder, make_cross_encoder

    make_bi_encoder(tmp_path / "be")
    make_cross_encoder(tmp_path / "ce")
    monkeypatch.chdir(tmp_path)
    for args in (("chunk", SAMPLE_DOCS, "--model", "be"), ("embed", "--model", "be"), ("index",),
                 ("search", "--queries", SAMPLE_QUESTIONS, "--name", "base"),
                 ("rerank", "--run", "pbe/runs/base.parquet", "--model", "ce")):
        res = rag(*args, "-p", "pbe")
        assert res.exit_code == 0, (args, res.stderr, res.exception)
    import tomllib

    model = tomllib.loads((tmp_path / "pbe" / "rag.toml").read_text())["model"]
    assert (model["embedder"], model["reranker"]) == (str((tmp_path / "be").resolve()),
                                                      str((tmp_path / "ce").resolve()))
    import json

    res = rag("models", "info", "ce", "--precision", "fp32", "--json")
    assert res.exit_code == 0, res.stderr
    assert (json.loads(res.stdout)["onnx_file"], json.loads(res.stdout)["kind"]) == ("model.onnx", "cross-encoder")
    res = rag("models", "verify", "ce", "--precision", "fp32", "--json")
    # the random tiny model may fail the sanity check (exit 1), but the folder is found and run
    assert res.exit_code in (0, 1) and json.loads(res.stdout)["onnx_file"] == "model.onnx", res.stderr
    res = rag("models", "quantize", "ce", "--json")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "ce" / "model_quantized.onnx").is_file()
    # the saved absolute paths work from any directory
    monkeypatch.chdir("/")
    project = tmp_path / "pbe"
    res = rag("rerank", "what is hnsw", "-p", project, "--json")
    assert res.exit_code == 0, res.stderr
    assert rag("search", "what is hnsw", "-p", project).exit_code == 0


def test_default_model_names_are_saved_as_names(tmp_path, monkeypatch):
    # a value that is not a folder stays as typed (a default name, a pulled OWNER/NAME id)
    from rag_cli.models.defaults import model_setting

    monkeypatch.chdir(tmp_path)
    assert model_setting("multilingual-e5-small") == "multilingual-e5-small"
    assert model_setting("Xenova/ms-marco-MiniLM-L-6-v2") == "Xenova/ms-marco-MiniLM-L-6-v2"
    (tmp_path / "m").mkdir()
    assert model_setting("m") == str((tmp_path / "m").resolve())


# ------------------------------------------------------------------ failed commands leave rag.toml alone
def test_bad_precision_is_not_saved(project):
    assert_bad_input(["embed", "--precision", "fp16", "-p", project], project, "--precision", "fp16", "int8")
    assert_bad_input(["chunk", SAMPLE_DOCS, "--precision", "fp16", "-p", project], project, "--precision", "fp16")
    assert rag("search", "hnsw", "-p", project).exit_code == 0


def test_failed_rerank_does_not_save_the_reranker(project, tmp_path):
    missing = tmp_path / "no-such-model"
    assert_bad_input(["rerank", "--run", project / "runs" / "base.parquet", "--model", missing, "-p", project],
                     project, missing)
    bad_run = tmp_path / "bad.parquet"
    bad_run.write_bytes(b"garbage")
    from tiny_models import make_cross_encoder

    ce = make_cross_encoder(tmp_path / "ce")
    assert_bad_input(["rerank", "--run", bad_run, "--model", ce, "-p", project], project, bad_run)


@pytest.mark.parametrize("args", [
    ["index"], ["embed"], ["search", "hnsw"], ["ask", "what is hnsw"],
    ["rerank", "--run", SAMPLE_QUESTIONS, "--model", "CE"], ["rerank", "hnsw", "--model", "CE"],
    # `eval --run RUN --qrels Q` needs no project folder any more (it scores the
    # run and creates nothing; tests/test_eval_depth.py); `eval --queries` still does
    ["eval", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS],
])
def test_commands_that_need_a_project_do_not_create_one(built, tmp_path, tiny_cross_encoder, args):
    p = tmp_path / "missing"
    args = [tiny_cross_encoder if a == "CE" else built / "runs" / "base.parquet" if a == "RUN" else a for a in args]
    assert_bad_input([*args, "-p", p], tmp_path, p)
    assert not p.exists()


# ------------------------------------------------------------------ numeric settings
@pytest.mark.parametrize("args,names", [
    (["index", "--k1", "-1"], ["--k1 -1", "index.bm25_k1", "≥ 0"]),
    (["index", "--b", "2"], ["--b 2", "index.bm25_b", "from 0 to 1"]),
    (["index", "--k1", "nan"], ["--k1 nan", "finite"]),
    (["index", "--hnsw-m", "1"], ["--hnsw-m 1", "index.hnsw.hnsw_m", "≥ 2"]),
    (["index", "--ef", "0"], ["--ef 0", "index.hnsw.hnsw_ef"]),
    (["index", "--ef-construction", "0"], ["--ef-construction 0", "index.hnsw.hnsw_ef_construction"]),
    (["embed", "--threads", "-1"], ["--threads -1", "model.threads"]),
    (["search", "hnsw", "-k", "0"], ["-k 0", "search.k"]),
    (["ask", "what is hnsw", "--min-score", "1.5"], ["--min-score 1.5", "ask.min_score", "from -1 to 1"]),
    (["ask", "what is hnsw", "--min-score-en", "1.5"], ["--min-score-en 1.5", "ask.min_score_en", "from -1 to 1"]),
    (["ask", "what is hnsw", "--min-coverage", "-0.1"], ["--min-coverage -0.1", "ask.min_coverage"]),
    (["ask", "what is hnsw", "-k", "0"], ["-k 0", "ask.k"]),
])
def test_numeric_flags_are_checked(project, args, names):
    assert_bad_input([*args, "-p", project], project, *names)


@pytest.mark.parametrize("section,key,value,names", [
    ("search", "rrf_k", -1, ["[search] rrf_k = -1", "≥ 0"]),
    ("search", "candidates", 0, ["[search] candidates = 0", "≥ 1"]),
    ("ask", "strong_score", 1.5, ["[ask] strong_score = 1.5", "from -1 to 1", "--strong-score"]),
    ("ask", "min_score_en", -1.5, ["[ask] min_score_en = -1.5", "from -1 to 1", "--min-score-en"]),
    ("ask", "max_sentences", 0, ["[ask] max_sentences = 0"]),
    ("index", "bm25_b", 1.5, ["[index] bm25_b = 1.5", "--b"]),
])
def test_numeric_config_values_are_checked(project, section, key, value, names):
    import re

    cfg = project / "rag.toml"
    text = cfg.read_text()
    head, _, tail = text.partition(f"[{section}]")
    new_text = head + f"[{section}]" + re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", tail, count=1)
    assert new_text != text
    cfg.write_text(new_text)
    assert_bad_input(["ask", "what is hnsw", "-p", project], project, "rag.toml", *names)


# ------------------------------------------------------------------ messages name the right flag
def test_rerank_candidates_message_names_candidates(project, tiny_cross_encoder):
    msg = assert_bad_input(["rerank", "x", "--candidates", "-1", "--model", tiny_cross_encoder, "-p", project],
                           project, "--candidates -1")
    assert "-k" not in msg


@pytest.mark.parametrize("args,names", [
    (["eval", "--qrels", SAMPLE_QRELS], ["--run FILE", "--queries FILE", "neither"]),
    (["eval", "--qrels", SAMPLE_QRELS, "--run", "R", "--queries", SAMPLE_QUESTIONS], ["not both"]),
    (["search"], ["QUERY", "--queries FILE", "neither"]),
    (["search", "hnsw", "--queries", SAMPLE_QUESTIONS], ["not both"]),
    (["ask"], ["QUESTION", "--queries FILE", "neither"]),
    (["rerank"], ["QUERY", "--run FILE", "neither"]),
])
def test_one_of_two_inputs_says_which_case(project, args, names):
    msg = assert_bad_input([*args, "-p", project], project, *names)
    assert ("not both" in msg) == ("not both" in names)


# ------------------------------------------------------------------ --name stays inside the project
@pytest.mark.parametrize("bad", ["../escape", "a/b", ".", "..", ""])
@pytest.mark.parametrize("command", ["search", "rerank", "ask", "eval"])
def test_name_must_be_plain(project, tmp_path, tiny_cross_encoder, command, bad):
    args = {
        "search": ["search", "--queries", SAMPLE_QUESTIONS],
        "rerank": ["rerank", "--run", project / "runs" / "base.parquet", "--model", tiny_cross_encoder],
        "ask": ["ask", "--queries", SAMPLE_QUESTIONS],
        "eval": ["eval", "--run", project / "runs" / "base.parquet", "--qrels", SAMPLE_QRELS],
    }[command]
    before = sorted(os.listdir(tmp_path))
    assert_bad_input([*args, "--name", bad, "-p", project], project, f"--name {bad!r}")
    assert sorted(os.listdir(tmp_path)) == before


# ------------------------------------------------------------------ long queries: reported, never cut silently
LONG_QUERY = "bm25 " * 2000  # far over the tiny bi-encoder's max_length of 128 tokens


@pytest.mark.parametrize("command", [["search", "--mode", "dense"], ["search", "--mode", "hybrid"], ["ask"]])
def test_long_query_cut_is_reported(project, command):
    import json

    res = rag(*command, LONG_QUERY, "--json", "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert json.loads(res.stdout)["n_queries_truncated"] == 1
    message = " ".join(res.stderr.split())
    assert "1 query was longer than the bi-encoder's max_length (128 tokens)" in message, res.stderr
    res = rag(*command, "bm25 ranking", "--json", "-p", project)
    assert json.loads(res.stdout)["n_queries_truncated"] == 0 and "max_length" not in res.stderr


def test_long_queries_in_a_query_file_are_counted(project, tmp_path):
    import json

    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n"
                             for i, t in [("a", LONG_QUERY), ("b", "hnsw"), ("c", "chunk " * 300)]), encoding="utf-8")
    res = rag("search", "--queries", qfile, "--mode", "dense", "--json", "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert json.loads(res.stdout)["n_queries_truncated"] == 2
    assert "2 queries were longer" in " ".join(res.stderr.split())


def test_long_query_cut_is_reported_by_rerank(project, tiny_cross_encoder):
    import json

    res = rag("rerank", LONG_QUERY, "--mode", "dense", "--model", tiny_cross_encoder, "--json", "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert json.loads(res.stdout)["n_queries_truncated"] == 1
    assert "1 query was longer than the bi-encoder's max_length" in " ".join(res.stderr.split())


# ------------------------------------------------------------------ config keys that are flags too
def test_rrf_k_and_candidates_flags_reach_the_search(project):
    import json

    def top_score(*flags):
        res = rag("search", "hnsw graph", "--mode", "hybrid", "-k", 3, *flags, "--json", "-p", project)
        assert res.exit_code == 0, (res.stderr, res.exception)
        return json.loads(res.stdout)["results"][0]["score"]

    # RRF score = sum of 1/(rrf_k + rank): the fused best is >= 1/(1+1) with k=1,
    # and <= 2/(60+1) with the default k=60
    assert top_score("--rrf-k", 1) >= 0.5
    assert top_score() <= 2 / 61 + 1e-9
    assert top_score("--rrf-k", 1, "--candidates", 1) >= 0.5
    assert_bad_input(["search", "hnsw", "--candidates", 0, "-p", project], project, "--candidates")
    assert_bad_input(["search", "hnsw", "--rrf-k", -1, "-p", project], project, "--rrf-k")


def test_bm25_method_flag_is_used_and_written_back(project):
    import tomllib

    res = rag("index", "--bm25-method", "bm25l", "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert tomllib.loads((project / "rag.toml").read_text())["index"]["bm25_method"] == "bm25l"
    from rag_cli.index.sparse import SparseIndex
    from rag_cli.store.index_folder import current_generation

    assert SparseIndex.load(current_generation(project / "index") / "sparse").params["method"] == "bm25l"
    assert_bad_input(["index", "--bm25-method", "okapi", "-p", project], project, "--bm25-method 'okapi'", "lucene")


def test_strong_score_and_max_sentences_flags_reach_ask(project):
    import json

    # "zyxwv" is in no chunk, so the coverage is below 1 and only the cosine (< 1) could answer
    res = rag("ask", "What does ef control in HNSW zyxwv?", "--min-score", -1, "--min-coverage", 1,
              "--strong-score", 1, "--json", "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    out = json.loads(res.stdout)
    assert out["refused"] and "below strong_score 1.0" in out["reason"]
    res = rag("ask", "What does ef control in HNSW?", "--min-score", -1, "--min-coverage", 0,
              "--max-sentences", 1, "--json", "-p", project)
    out = json.loads(res.stdout)
    assert not out["refused"] and len(out["citations"]) == 1
    assert_bad_input(["ask", "hnsw", "--max-sentences", 0, "-p", project], project, "--max-sentences")


def test_entity_rule_settings_are_flags_of_ask(project):
    """#23 item 24: `rag ask` had no --entity-scope, --min-entity-coverage, --key-idf (nor --rerank-candidates),
    though every rag.toml key is a flag."""
    import json

    from rag_cli.config import all_settings

    # ask.refusal_weights is a fitted model (a list written by `rag eval tune refusal`), not a knob
    assert [s.key for s in all_settings() if not s.cli and s.section == "ask"] == ["refusal_weights"]
    helped = " ".join(rag("ask", "--help").stdout.split())
    for flag in ("--entity-scope", "--min-entity-coverage", "--key-idf", "--rerank-candidates"):
        assert flag in helped, flag
    # an English question with a key term no chunk holds: the entity rule judges it only with --entity-scope all
    question = ["What does ef control in HNSW zyxwv?", "--min-score", -1, "--min-coverage", 0, "--strong-score", 1]
    out = json.loads(rag("ask", *question, "--json", "-p", project).stdout)
    assert not out["refused"], out["reason"]
    res = rag("ask", *question, "--entity-scope", "all", "--min-entity-coverage", 1, "--key-idf", 0.5, "--json",
              "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    out = json.loads(res.stdout)
    assert out["refused"] and "key terms" in out["reason"] and "min_entity_coverage 1.0" in out["reason"]
    res = rag("ask", *question, "--entity-scope", "ALL", "--min-entity-coverage", 0, "--json", "-p", project)
    assert not json.loads(res.stdout)["refused"]  # 0 switches the rule off; the choice is case-insensitive
    assert_bad_input(["ask", "hnsw", "--entity-scope", "en", "-p", project], project, "--entity-scope", "zh, all")
    assert_bad_input(["ask", "hnsw", "--key-idf", 2, "-p", project], project, "--key-idf 2", "ask.key_idf")
    assert_bad_input(["ask", "hnsw", "--min-entity-coverage", "nan", "-p", project], project, "finite")
    assert_bad_input(["ask", "hnsw", "--rerank-candidates", 0, "-p", project], project, "--rerank-candidates 0")


def test_ask_uses_the_search_config_of_rag_toml(project, monkeypatch):
    """`search.candidates` and `search.rrf_k` of rag.toml reach the retrieval of `rag ask`."""
    from rag_cli.stages.search import Searcher

    seen = []
    original = Searcher.search

    def spy(self, queries, **kw):
        seen.append((kw["candidates"], kw["rrf_k"]))
        return original(self, queries, **kw)

    monkeypatch.setattr(Searcher, "search", spy)
    toml = project / "rag.toml"
    text = toml.read_text()
    assert "candidates = 100" in text and "rrf_k = 60" in text
    toml.write_text(text.replace("candidates = 100", "candidates = 7").replace("rrf_k = 60", "rrf_k = 3"))
    res = rag("ask", "What does ef control in HNSW?", "--json", "-p", project)
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert seen == [(7, 3)]


def test_counts_read_as_english():
    from rag_cli.cli import _count, _embedded, _update_line

    assert [_count(1, "query"), _count(3, "query"), _count(1, "text"), _count(0, "chunk")] == [
        "1 query", "3 queries", "1 text", "0 chunks"]
    assert _embedded({"n_embedded": 454, "n_texts_embedded": 353}) == "454 chunks embedded (353 distinct texts)"
    assert _embedded({"n_embedded": 1, "n_texts_embedded": 1}) == "1 chunk embedded"
    out = {"chunk": {"docs_added": 1, "docs_changed": 0, "docs_removed": 0, "docs_unchanged": 7, "chunks_added": 1,
                     "chunks_removed": 0},
           "embed": {"n_embedded": 1, "n_texts_embedded": 1},
           "index": {"unchanged": False, "generation": "gen-000002", "vectors_added": 1, "vectors_deleted": 0}}
    assert _update_line(out) == ("documents: 1 added, 0 changed, 0 removed, 7 unchanged; chunks: 1 added, 0 removed; "
                                 "1 chunk embedded; index gen-000002: 1 vectors added, 0 deleted")


def test_missing_relative_run_file_says_where_it_was_looked_for(tmp_path, monkeypatch):
    from rag_cli.errors import BadInput
    from rag_cli.store.runs import read_run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match=rf"runs/x.parquet: no such run file \(a relative path is read from the "
                                       rf"working directory {tmp_path}, not from the project folder"):
        read_run("runs/x.parquet")
    with pytest.raises(BadInput, match=r"x.parquet: no such run file$"):
        read_run(tmp_path / "x.parquet")


def test_help_of_every_command_keeps_bracketed_text():
    """Rich reads `[word]` in help as markup and drops it: every bracketed
    text of a help string (`\\[` escaped) must appear in the rendered --help."""
    import re

    import typer

    def walk(command, path):
        yield command, path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    checked = []
    for command, path in walk(typer.main.get_command(app), []):
        out = _runner.invoke(app, [*path, "--help"], env={"COLUMNS": "4000"}).output
        for text in [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]:
            for bracketed in re.findall(r"\\?\[[^\]]*\]", text):
                checked.append(bracketed)
                assert bracketed.lstrip("\\") in out, (path, bracketed)
    assert {r"\[api,cli]", r"\[generator]", r"\[ask]"} <= set(checked)


def test_project_given_as_a_file_or_missing(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a project")
    for args in (["search", "foo"], ["status"], ["build", tmp_path / "nothing"], ["ask", "foo"]):
        res = rag(*args, "-p", afile)
        assert res.exit_code == 2, (args, res.output)
        assert f"project folder {afile} is a file, not a folder" in " ".join(res.output.split())
    assert afile.read_text() == "not a project"
    for args in (["search", "foo"], ["ask", "foo"]):
        res = rag(*args, "-p", tmp_path / "none.rag")
        assert res.exit_code == 2 and "does not exist: run `rag chunk` first" in " ".join(res.output.split())
        assert not (tmp_path / "none.rag").exists()


def test_build_says_which_files_it_skipped(tmp_path, tiny_bi_encoder):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nBM25 ranks documents by term frequency.\n")
    (docs / "empty.md").write_text("")
    res = rag("build", docs, "--model", tiny_bi_encoder, "--unit", "chars", "-p", tmp_path / "p.rag")
    assert res.exit_code == 0, res.output
    assert f"skipped {docs / 'empty.md'}: no text" in " ".join(res.stderr.split())


@pytest.mark.parametrize("target", ["rag.toml", "chunks.parquet", "QUERIES"])
def test_search_queries_output_never_replaces_a_project_file_or_its_input(project, tmp_path, target):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "1", "text": "hnsw graph"}\n', encoding="utf-8")
    out = queries if target == "QUERIES" else project / target
    assert_bad_input(["search", "--queries", queries, "-o", out, "-p", project], project, "-o", str(out))
    assert queries.read_text(encoding="utf-8").startswith('{"_id"')


def test_search_queries_output_under_runs_or_outside_is_written(project, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "1", "text": "hnsw graph"}\n', encoding="utf-8")
    for out in (project / "runs" / "mine.parquet", tmp_path / "elsewhere.parquet"):
        res = rag("search", "--queries", queries, "-o", out, "-p", project)
        assert res.exit_code == 0, res.stderr
        assert out.exists()


def test_rag_toml_chunk_values_are_checked_when_read(tmp_path):
    p = tmp_path / "p"
    p.mkdir()
    (p / "rag.toml").write_text('[chunk]\nstrategy = "nope"\n', encoding="utf-8")
    res = rag("init", p)
    assert res.exit_code == 2 and "rag.toml [chunk]: --strategy 'nope' is not known" in res.stderr


def test_rag_toml_errors_name_a_flag_only_when_there_is_one(tmp_path):
    p = tmp_path / "p"
    p.mkdir()
    (p / "rag.toml").write_text("[sources]\nformat = 3\n", encoding="utf-8")
    res = rag("init", p)
    assert res.exit_code == 2 and "[sources] format = 3 should be a string" in res.stderr
    assert "flag" not in res.stderr


def test_eval_options_may_come_before_the_subcommand(project):
    run = project / "runs" / "base.parquet"
    res = rag("eval", "-p", project, "--json", "compare", run, run, "--qrels", SAMPLE_QRELS)
    assert res.exit_code == 0, res.stderr
    import json

    assert json.loads(res.stdout)["comparisons"]


def test_eval_online_without_a_query_log_says_how_to_get_one(project):
    res = rag("eval", "online", "-p", project)
    assert res.exit_code == 2 and "rag serve --log" in res.stderr
