"""Inputs are checked before any model is loaded or converted: a new user's
typo costs no model conversion (#20)."""

from __future__ import annotations

from typer.testing import CliRunner

from rag_cli.cli import app


def test_a_missing_source_fails_before_the_default_model_is_converted(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAG_CACHE", str(cache))
    for command in ("chunk", "build"):
        res = CliRunner().invoke(app, [command, str(tmp_path / "does-not-exist"), "-p", str(tmp_path / "p")])
        assert res.exit_code == 2, res.output
        assert "does-not-exist' does not exist" in res.output
        assert not cache.exists() and not (tmp_path / "p").exists()


def test_a_missing_gguf_fails_before_llama_cpp_is_imported(monkeypatch):
    import sys

    import pytest

    from rag_cli.errors import BadInput
    from rag_cli.generate.llama_cpp import LlamaCppGenerator

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # importing it would raise ImportError
    with pytest.raises(BadInput, match="no such GGUF file"):
        LlamaCppGenerator("/nope.gguf")
