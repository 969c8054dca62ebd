"""Unit tests of the project folder: config, manifest, atomic writes."""

import os

import pytest

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.project import DEFAULT_CONFIG, Project


def test_config_defaults_flags_and_write_back(tmp_path):
    p = Project(tmp_path / "proj")
    assert p.load_config() == DEFAULT_CONFIG
    cfg = p.config("chunk", {"size": 128, "overlap": None}, save=True)
    assert cfg["size"] == 128 and cfg["overlap"] == DEFAULT_CONFIG["chunk"]["overlap"]
    assert Project(tmp_path / "proj").load_config()["chunk"]["size"] == 128  # written back
    cfg = p.config("chunk", {"size": 64}, save=False)
    assert cfg["size"] == 64 and p.load_config()["chunk"]["size"] == 128


def test_config_rejects_unknown_keys_and_bad_toml(tmp_path):
    p = Project(tmp_path)
    p.config_path.write_text("[chunk]\nsise = 3\n")
    with pytest.raises(BadInput, match="unknown key 'sise'"):
        p.load_config()
    p.config_path.write_text("[chunk\n")
    with pytest.raises(BadInput, match="rag.toml: not valid TOML"):
        p.load_config()


def test_manifest_records_stages(tmp_path):
    p = Project(tmp_path)
    p.record("chunk", rows=3)
    p.record("embed", rows=3, model_fingerprint="abc")
    m = p.load_manifest()
    assert m["chunk"]["rows"] == 3 and m["embed"]["model_fingerprint"] == "abc"
    assert "tool_version" in m["chunk"] and m["chunk"]["time"].endswith("Z")


def test_atomic_write_leaves_old_file_on_error(tmp_path):
    target = tmp_path / "f.txt"
    atomic.write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]
    assert (target.stat().st_mode & 0o777) == (0o666 & ~_umask())


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_require_names_the_stage(tmp_path):
    p = Project(tmp_path)
    with pytest.raises(BadInput, match="run `rag chunk` first"):
        p.require(p.chunks_path, "chunk")


def test_flags_are_checked_before_anything_is_written(tmp_path):
    p = Project(tmp_path / "proj")
    with pytest.raises(BadInput, match=r"--k1 -1 \(config index.bm25_k1\): must be ≥ 0"):
        p.config("index", {"bm25_k1": -1}, save=True)
    with pytest.raises(BadInput, match=r"--b 1.5 \(config index.bm25_b\): must be from 0 to 1"):
        p.config("index", {"bm25_b": 1.5}, save=True)
    with pytest.raises(BadInput, match=r"--precision 'fp16' \(config model.precision\): must be one of int8, fp32"):
        p.config("model", {"precision": "fp16"}, save=True)
    with pytest.raises(BadInput, match=r"-k 2.5 \(config search.k\) should be a int"):
        p.config("search", {"k": 2.5}, save=True)
    assert not p.root.exists()
    # boundaries are allowed: b in [0, 1], k1 = 0, rrf_k = 0 (RRF 1/(k + rank), rank from 1)
    assert p.config("index", {"bm25_b": 0, "bm25_k1": 0})["bm25_b"] == 0
    assert p.config("index", {"bm25_b": 1.0}, save=True)["bm25_b"] == 1.0
    assert p.load_config()["index"]["bm25_b"] == 1.0
    assert p.config("search", {"rrf_k": 0})["rrf_k"] == 0


def test_config_file_values_are_range_checked(tmp_path):
    p = Project(tmp_path)
    p.config_path.write_text("[index]\nhnsw_m = 1\n")
    with pytest.raises(BadInput, match=r"rag.toml: \[index\] hnsw_m = 1: must be ≥ 2 \(flag --hnsw-m\)"):
        p.load_config()


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", ".", "..", "", " "])
def test_output_names_stay_inside_the_project(tmp_path, name):
    p = Project(tmp_path)
    for path in (lambda: p.run_path(name), lambda: p.answers_path(name), lambda: p.eval_path(name)):
        with pytest.raises(BadInput, match="--name"):
            path()
    assert p.run_path("bm25-test") == tmp_path / "runs" / "bm25-test.parquet"
