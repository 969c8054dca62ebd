"""Unit tests of the project folder: config, manifest, atomic writes."""

import os

import pytest

from rag_cli import atomic
from rag_cli.errors import BadInput
from rag_cli.project import DEFAULT_CONFIG, Project


def test_config_defaults_flags_and_write_back(tmp_path):
    p = Project(tmp_path / "proj")
    assert p.load_config() == DEFAULT_CONFIG
    cfg = p.config("chunk", {"size": 128, "overlap": None})
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
