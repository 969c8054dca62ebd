"""The suite's own promise (tests/conftest.py): a test whose input is missing
never skips silently. Under CI (``CI`` set) it fails; elsewhere it skips with
a reason that names what is missing and where it was looked for.

Each kind of input is taken away from a real test of the suite, run in a
child pytest:

- shared data: ``RAG_TEST_DATA`` points at an empty folder;
- the contract checker: ``RAG_TEST_CHECK_CONTRACT`` points at a missing file;
- a dev-extra package: a ``pytrec_eval`` module that raises ImportError comes
  first on ``PYTHONPATH``;
- the default model's files: an empty ``semantra_multilingual`` package comes
  first on ``PYTHONPATH`` (so rag_cli's resolver finds no tokenizer.json).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# one real test per kind of input, each cheap once its input is there
NODES = {
    "data": "tests/test_evaluate.py::test_read_scifact",
    "contract": "tests/test_chunking.py::test_tables_pass_contract_check",
    "package": "tests/test_evaluate.py::test_evaluate_run_means_equal_pytrec_eval_with_missing_as_zero",
    "model": "tests/test_chunking.py::test_oversized_token_unit_counted",
}


@pytest.fixture(scope="module")
def nothing_there(tmp_path_factory) -> dict[str, str]:
    """The environment of a child pytest in which every input of NODES is missing (CI unset)."""
    root = tmp_path_factory.mktemp("nothing-there")
    (root / "data").mkdir()
    fake = root / "site"
    (fake / "semantra_multilingual").mkdir(parents=True)
    (fake / "semantra_multilingual" / "__init__.py").write_text("", encoding="utf-8")
    (fake / "pytrec_eval.py").write_text('raise ImportError("simulated: pytrec_eval is not installed")\n',
                                         encoding="utf-8")
    env = os.environ.copy()
    env.pop("CI", None)
    env["RAG_TEST_DATA"] = str(root / "data")
    env["RAG_TEST_CHECK_CONTRACT"] = str(root / "no-such-check_contract.py")
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"root": str(root), **env}


def child_pytest(env: dict[str, str], basetemp: Path) -> subprocess.CompletedProcess:
    env = dict(env)
    root = Path(env.pop("root"))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--basetemp", str(basetemp),
         *NODES.values()],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    res.stdout = res.stdout.replace(str(root), "<root>")
    return res


def expect_reasons(out: str) -> None:
    """Each missing input is named with the place it was looked for."""
    assert "test data scifact not found; looked at <root>/data/scifact;" in out, out
    assert "set RAG_TEST_DATA" in out, out
    assert "the contract checker check_contract.py not found; looked at <root>/no-such-check_contract.py" in out, out
    assert "Python package pytrec-eval-terrier (import pytrec_eval: simulated: pytrec_eval is not installed)" in out, out
    assert "multilingual-e5-small tokenizer.json not found; looked at semantra_multilingual/assets/" in out, out


@pytest.mark.slow
def test_under_ci_missing_inputs_fail(nothing_there, tmp_path):
    res = child_pytest({**nothing_there, "CI": "true"}, tmp_path / "t")
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    assert "4 errors" in out and "passed" not in out and "skipped" not in out, out
    for node in NODES.values():
        assert f"ERROR {node}" in out, (node, out)
    assert out.count("[CI is set: a missing test input fails the test instead of skipping it]") >= 4, out
    expect_reasons(out)


@pytest.mark.slow
def test_without_ci_missing_inputs_skip_with_the_reason(nothing_there, tmp_path):
    res = child_pytest({**nothing_there, "CI": ""}, tmp_path / "t")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "4 skipped" in out and "CI is set" not in out, out
    expect_reasons(out)
