"""Unit tests of the project folder: typed config, manifest, atomic writes, the lock."""

import os

import pytest

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.config import DEFAULT_CONFIG, ChunkConfig, Config
from rag_cli.project import Project


def test_config_defaults_options_and_write_back(tmp_path):
    p = Project(tmp_path / "proj")
    assert p.config == Config() and p.config.to_dict() == DEFAULT_CONFIG
    cfg, changed = p.config.with_options("chunk", {"size": 128, "overlap": None})
    assert changed and cfg.chunk.size == 128 and cfg.chunk.overlap == ChunkConfig().overlap
    assert p.config.with_options("chunk", {"size": 256})[1] is False  # the default: nothing changed
    cfg.save(p.config_path)
    assert Project(tmp_path / "proj").config.chunk.size == 128  # written back
    assert Config.load(p.config_path) == cfg


def test_config_rejects_unknown_keys_and_bad_toml(tmp_path):
    p = Project(tmp_path)
    p.config_path.write_text("[chunk]\nsise = 3\n")
    with pytest.raises(BadInput, match="unknown key 'sise'"):
        p.config
    p.config_path.write_text("[chunk\n")
    with pytest.raises(BadInput, match="rag.toml: not valid TOML"):
        p.config


def test_manifest_records_stages(tmp_path):
    p = Project(tmp_path)
    p.record("chunk", rows=3)
    p.record("embed", rows=3, model_fingerprint="abc")
    m = p.manifest()
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


def test_options_are_checked_before_anything_is_written(tmp_path):
    p = Project(tmp_path / "proj")
    with pytest.raises(BadInput, match=r"--k1 -1 \(config index.bm25_k1\): must be ≥ 0"):
        p.index(bm25_k1=-1)
    with pytest.raises(BadInput, match=r"--b 1.5 \(config index.bm25_b\): must be from 0 to 1"):
        p.index(bm25_b=1.5)
    with pytest.raises(BadInput, match=r"--precision 'fp16' \(config model.precision\): must be one of int8, fp32"):
        p.chunk(["nowhere"], precision="fp16")
    with pytest.raises(BadInput, match=r"-k 2.5 \(config search.k\) should be an integer like 10"):
        p.search("x", k=2.5)
    with pytest.raises(BadInput, match="nowhere"):  # a missing source, found inside the lock
        p.chunk(["nowhere"], unit="chars")
    assert not p.root.exists()
    # boundaries are allowed: b in [0, 1], k1 = 0, rrf_k = 0 (RRF 1/(k + rank), rank from 1)
    assert p.config.with_options("index", {"bm25_b": 0, "bm25_k1": 0})[0].index.bm25_b == 0
    assert p.config.with_options("index", {"bm25_b": 1.0})[0].index.bm25_b == 1.0
    assert p.config.with_options("search", {"rrf_k": 0})[0].search.rrf_k == 0


def test_config_file_values_are_range_checked(tmp_path):
    p = Project(tmp_path)
    p.config_path.write_text("[index.hnsw]\nhnsw_m = 1\n")
    with pytest.raises(BadInput, match=r"rag.toml: \[index.hnsw\] hnsw_m = 1: must be ≥ 2 \(flag --hnsw-m\)"):
        p.config


def test_backend_settings_live_in_their_sub_tables(tmp_path):
    """[index.hnsw], [index.ivf], [index.faiss], [index.milvus] hold the backends' keys (written so by save,
    read back); a key of a sub-table written flat in [index] (rag.toml before the sub-tables), the old name
    `rerank` of [index.faiss] rescore, an unknown key or sub-table: BadInput naming the file and where the
    key belongs."""
    import tomllib

    p = Project(tmp_path)
    cfg, _ = p.config.with_options("index", {"hnsw_m": 8, "rescore": 50, "uri": "m.db", "nlist": 4})
    cfg.save(p.config_path)
    toml = tomllib.loads(p.config_path.read_text())
    assert toml["index"]["hnsw"] == {"hnsw_m": 8, "hnsw_ef_construction": 200, "hnsw_ef": 128}
    assert toml["index"]["faiss"]["rescore"] == 50 and toml["index"]["milvus"]["uri"] == "m.db"
    assert toml["index"]["ivf"]["nlist"] == 4 and "hnsw_m" not in toml["index"]
    assert Project(tmp_path).config == cfg
    for text, message in (("[index]\nhnsw_m = 8\n", r"\[index\] hnsw_m: write it as hnsw_m under \[index.hnsw\]"),
                          ("[index]\nrerank = 50\n", r"\[index\] rerank: write it as rescore under \[index.faiss\]"),
                          ("[index.faiss]\nrerank = 5\n", r"\[index.faiss\] rerank: write it as rescore under "
                                                           r"\[index.faiss\]"),
                          ("[index.hnsw]\nnprobe = 5\n", r"\[index.hnsw\] nprobe: write it as nprobe under \[index.ivf\]"),
                          ("[index.hnsw]\nbackend = 'exact'\n", r"\[index.hnsw\] backend: write it as backend under "
                                                                r"\[index\]"),
                          ("[index.hnsw]\nm = 5\n", r"unknown key 'm' in \[index.hnsw\]; known: hnsw_m, "),
                          ("[index.annoy]\nm = 5\n",
                           r"unknown key 'annoy' in \[index\]; known: backend, .*\[index.faiss\]")):
        p.config_path.write_text(text)
        with pytest.raises(BadInput, match=str(p.config_path).replace("\\", "\\\\") + ": " + message):
            Project(tmp_path).config


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", ".", "..", "", " "])
def test_output_names_stay_inside_the_project(tmp_path, name):
    p = Project(tmp_path)
    for path in (lambda: p.run_path(name), lambda: p.answers_path(name), lambda: p.eval_path(name)):
        with pytest.raises(BadInput, match="--name"):
            path()
    assert p.run_path("bm25-test") == tmp_path / "runs" / "bm25-test.parquet"
