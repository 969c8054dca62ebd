"""#31 item 22: under `--json` a failure leaves one JSON object on stdout,
`{"error": {"message", "exit_code", "flag"}}`, besides the message on stderr
(scripts read stdout): for bad input (exit 2), usage errors click raises
(exit 2) and a failed piece of work (exit 1)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.cli.common import error_json


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("args, code, flag, says", [
    (["search", "bm25", "-k", "0"], 2, "-k", "must be ≥ 1"),
    (["search", "bm25", "-k", "abc"], 2, "-k", "valid integer"),
    (["search", "bm25", "--bogus"], 2, "--bogus", "No such option"),
    (["eval", "run", "--bogus"], 2, "--bogus", "No such option"),
    (["chunk", "no/such/source"], 2, None, "does not exist"),
    (["index", "--hnsw-m", "1"], 2, "--hnsw-m", "≥ 2"),
])
def test_a_failure_under_json_prints_one_error_object_on_stdout(tmp_path, args, code, flag, says):
    res = _run(*args, "--json", "-p", tmp_path / "p")
    assert res.exit_code == code, res.output
    err = json.loads(res.stdout)["error"]
    assert err["exit_code"] == code and err["flag"] == flag and says in err["message"], err
    assert says in " ".join(res.stderr.split())  # the message is still on stderr


def test_without_json_stdout_stays_empty(tmp_path):
    res = _run("search", "bm25", "-k", "0", "-p", tmp_path / "p")
    assert res.exit_code == 2 and res.stdout == ""
    res = _run("search", "bm25", "-k", "abc", "-p", tmp_path / "p")
    assert res.exit_code == 2 and res.stdout == ""


def test_a_json_flag_after_double_dash_is_an_argument(tmp_path):
    res = _run("search", "-k", "abc", "-p", tmp_path / "p", "--", "--json")
    assert res.exit_code == 2 and res.stdout == ""


def test_an_unexpected_exception_under_json_is_exit_1_with_the_object(tmp_path, monkeypatch):
    import rag_cli.project as project

    def broken(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(project.Project, "status", broken)
    res = _run("status", "--json", "-p", tmp_path / "p")
    assert res.exit_code == 1
    err = json.loads(res.stdout)["error"]
    assert err["exit_code"] == 1 and err["message"].startswith("RuntimeError: disk on fire") and err["flag"] is None


def test_the_flag_is_the_first_one_the_message_names(capsys):
    for message, flag in [("--k1 -1 (config index.bm25_k1): must be ≥ 0", "--k1"), ("a non-empty -k 3", "-k"),
                          ("value -1 is not allowed", None), ("use --unit chars for this file", "--unit")]:
        error_json(message, 2)
        assert json.loads(capsys.readouterr().out)["error"]["flag"] == flag, message


def test_the_flag_is_not_taken_from_advice_in_a_quoted_command():
    """"--answers X: ... written by `rag ask --queries`" is a fault of --answers, not of --queries."""
    import io
    from contextlib import redirect_stdout

    from rag_cli.cli.common import error_json

    buf = io.StringIO()
    with redirect_stdout(buf):
        error_json("no such file; is it an answers file written by `rag ask --queries`? (--answers x.parquet)", 2)
        error_json("use `rag ask --queries` first", 2)
    first, second = (json.loads(x) for x in buf.getvalue().replace("}\n{", "}\n\x00{").split("\x00"))
    assert first["error"]["flag"] == "--answers"
    assert second["error"]["flag"] == "--queries"  # no flag outside the quote: the quoted one is the best guess
