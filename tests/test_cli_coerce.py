"""rag_cli.cli.coerce: plain command-line values coerced without pydantic give what typer's own
(pydantic) coercion gives, values and errors alike, and `rag search` never imports pydantic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

import rag_cli.cli.root  # noqa: F401  (installs the fast path)

typer_core = pytest.importorskip("typer.core")
coercion = pytest.importorskip("typer._coercion")
models = pytest.importorskip("typer.models")

ROOT = Path(__file__).resolve().parents[1]
VALUES = ["0", "7", "007", "+5", "-3", "-0", "99999999999999999999", "1.5", "1.", ".5", "-1e5", "2E-3", "1e400",
          "1_000", " 5", "5 ", "", "abc", "٣", "１", "inf", "x.txt", "/tmp", ".", "-", "a b", "é", 5, 0, -2, True,
          False, 1.5, 2.0]
LISTS = [(), ("a", "b"), ["1", "2"], ("1", "x"), ("1.5", "2"), "a", ("", "x")]
ANNOTATIONS = [str, int, float, Path, bool, Optional[int], Optional[float], Optional[str], Optional[Path]]
LIST_ANNOTATIONS = [list[str], Optional[list[str]], list[int], list[float], list[Path]]


def _outcome(rp, value):
    try:
        got = rp._coerce_value(value, param=None, ctx=None)
    except Exception as exc:  # noqa: BLE001  (the error is what is compared)
        return ("error", type(exc).__name__, str(exc))
    return ("ok", got, type(got))


@pytest.mark.parametrize("annotation", ANNOTATIONS + LIST_ANNOTATIONS, ids=str)
def test_fast_coercion_equals_typers_own(annotation):
    real = typer_core.build_runtime_param.__wrapped__
    desc = coercion.resolve_type_descriptor(annotation, models.OptionInfo())
    fast, slow = typer_core.build_runtime_param(desc), real(desc)
    assert type(fast).__name__ == "_Fast"
    for value in (LISTS if annotation in LIST_ANNOTATIONS else VALUES):
        assert _outcome(fast, value) == _outcome(slow, value), (annotation, value)


def test_options_that_change_coercion_keep_typers_own():
    from rag_cli.cli.coerce import plain_kind

    assert plain_kind(int, models.OptionInfo(min=1)) is None
    assert plain_kind(Path, models.OptionInfo(exists=True)) is None
    assert plain_kind(str, models.OptionInfo(parser=str.upper)) is None
    assert plain_kind(dict, models.OptionInfo()) is None
    assert plain_kind(Optional[int], models.OptionInfo()) == ("leaf", int)
    assert plain_kind(Optional[list[str]], models.OptionInfo()) == ("list", str)


def test_rag_search_never_imports_pydantic_and_a_bad_value_still_gets_typers_message(tmp_path, make_sample_project):
    p = make_sample_project(tmp_path / "p")
    code = ("import sys, runpy\n"
            "tried = []\n"
            "class F:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'pydantic': tried.append(name)\n"
            "sys.meta_path.insert(0, F())\n"
            "import os\n"
            "real = os._exit\n"
            "def done(code):\n"
            "    sys.stderr.write(f'@@tried {sorted(set(tried))}\\n'); sys.stderr.flush(); real(code)\n"
            "os._exit = done\n"
            "sys.argv = ['rag'] + sys.argv[1:]\n"
            "runpy.run_module('rag_cli', run_name='__main__')\n")
    for mode in ("sparse", "hybrid"):
        res = subprocess.run([sys.executable, "-c", code, "search", "What does b control in BM25?", "--mode", mode,
                              "-k", "3", "--candidates", "20", "-p", str(p.root), "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        assert "@@tried []" in res.stderr
    bad = subprocess.run([sys.executable, "-m", "rag_cli", "search", "x", "-k", "abc", "-p", str(p.root)],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "Input should be a valid integer" in bad.stderr
