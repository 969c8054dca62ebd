"""`rag eval`'s outputs checked before any work (`rag_cli.evaluate.outputs`),
unreadable run files as bad input, ids from user files printed as plain
text, the --compare Markdown baseline first, and the --queries help/docs."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app

QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n"
RUN = "q1 Q0 d1 1 3.0 a\nq2 Q0 d9 1 3.0 a\n"
CORPUS = "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"text {i}"}) + "\n" for i in (1, 2, 3))
QUERIES = '{"_id": "q1", "text": "one"}\n{"_id": "q2", "text": "two"}\n'


@pytest.fixture
def files(tmp_path):
    (tmp_path / "qrels.tsv").write_text(QRELS)
    (tmp_path / "a.trec").write_text(RUN)
    (tmp_path / "b.trec").write_text(RUN.replace(" a\n", " b\n"))
    (tmp_path / "corpus.jsonl").write_text(CORPUS)
    (tmp_path / "queries.jsonl").write_text(QUERIES)
    return tmp_path


def _eval(*args) -> object:
    return CliRunner().invoke(app, ["eval", *map(str, args)])


def _unchanged(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("args, said", [
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "a.trec"], "-o a.trec is also --run a.trec"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "qrels.tsv"], "-o qrels.tsv is also --qrels qrels.tsv"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "r.json", "--md", "a.trec"], "--md a.trec is also --run"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "same.out", "--md", "same.out"],
     "--md same.out is also -o same.out"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "./sub/../a.trec"], "is also --run a.trec"),
    (["compare", "--qrels", "qrels.tsv", "a.trec", "b.trec", "-o", "b.trec"], "-o b.trec is also RUNS b.trec"),
    (["compare", "--qrels", "qrels.tsv", "a.trec", "b.trec", "-o", "c.json", "--md", "qrels.tsv"],
     "--md qrels.tsv is also --qrels"),
    (["make-unanswerable", "1", "--corpus", "corpus.jsonl", "--queries", "queries.jsonl", "--qrels", "qrels.tsv",
      "-o", "."], "-o . is the folder of --corpus corpus.jsonl"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "."], "-o .: is a folder"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "a.trec/x.json"], "a.trec is a file, not a folder"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "r.json", "--plots", "a.trec"], "--plots a.trec is also"),
    (["--qrels", "qrels.tsv", "--run", "a.trec", "-o", "r.json", "--plots", "/proc/rag-x"],
     "--plots /proc/rag-x: cannot write into the folder"),
])
def test_outputs_checked_before_any_work(files, monkeypatch, args, said):
    (files / "sub").mkdir()
    (files / "same.out").write_text("old")
    monkeypatch.chdir(files)
    before = _unchanged(files)
    res = _eval(*args)
    assert res.exit_code == 2, res.output
    assert said in " ".join(res.output.split()), res.output
    assert _unchanged(files) == before  # nothing written, no input replaced
    assert sorted(p.name for p in files.iterdir()) == sorted([*before, "sub"])


def test_hard_link_to_the_run_is_the_run(files):
    os.link(files / "a.trec", files / "link.trec")
    res = _eval("--qrels", files / "qrels.tsv", "--run", files / "a.trec", "-o", files / "link.trec")
    assert res.exit_code == 2 and "is also --run" in res.output
    assert (files / "a.trec").read_text() == RUN


def test_md_folder_in_a_project_leaves_the_old_report(files):
    """`--md PROJECT` (a folder) fails before eval/NAME.json is rewritten."""
    report = files / "proj" / "eval" / "a-qrels.json"
    report.parent.mkdir(parents=True)
    report.write_text("old")
    res = _eval("--qrels", files / "qrels.tsv", "--run", files / "a.trec", "--md", files / "proj", "-p", files / "proj")
    assert res.exit_code == 2 and "--md" in res.output and "is inside the project folder" in res.output, res.output
    assert report.read_text() == "old"
    res = _eval("--qrels", files / "qrels.tsv", "--run", files / "a.trec", "-p", files / "proj")
    assert res.exit_code == 0 and json.loads(report.read_text())["n_queries"] == 2  # the default path checked


def test_plots_without_matplotlib_fail_first(files, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    res = _eval("--qrels", files / "qrels.tsv", "--run", files / "a.trec", "-o", files / "r.json",
                "--plots", files / "plots")
    assert res.exit_code == 2 and "--plots needs matplotlib" in res.output, res.output
    assert not (files / "r.json").exists() and not (files / "plots").exists()


def test_writable_new_folders_are_not_left_behind(files):
    from rag_cli.evaluate.outputs import check_eval_files

    check_eval_files({"--run": files / "a.trec"}, {"-o": files / "x" / "y" / "r.json"}, plots=None)
    assert not (files / "x").exists()


def test_run_not_utf8_or_not_parquet_is_bad_input(files):
    (files / "latin1.trec").write_bytes("q1 Q0 d\xe9 1 1.0 x\n".encode("latin-1"))
    res = _eval("--qrels", files / "qrels.tsv", "--run", files / "latin1.trec")
    assert res.exit_code == 2, res.output
    assert f"{files / 'latin1.trec'}: not UTF-8 text" in " ".join(res.output.split())
    (files / "x.parquet").write_bytes(b"\xff\xfeq\x001\x00")
    res = _eval("--qrels", files / "qrels.tsv", "--run", files / "x.parquet")
    assert res.exit_code == 2, res.output
    assert f"{files / 'x.parquet'}: not a Parquet file" in " ".join(res.output.split())


EVIL = "\x1b[31mq2\x1b]0;PWNED\x07"


def test_ids_in_warnings_are_plain_text(files):
    (files / "evil.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{EVIL}\td2\t1\n")
    (files / "evil.trec").write_text(f"q1 Q0 d1 1 3.0 a\n{EVIL}x Q0 d2 1 3.0 a\n")
    res = _eval("--qrels", files / "evil.tsv", "--run", files / "evil.trec")
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "1 of 2 qrels queries are not in the run" in out and ": q2" in out
    assert "1 run query is not in the qrels and ignored: q2x" in out
    assert "\x1b" not in res.output and "\x07" not in res.output and "PWNED" not in res.output


def test_compare_markdown_baseline_first_and_cells_escaped(files):
    (files / "a|b.trec").write_text(RUN)
    (files / f"{EVIL}.trec").write_text(RUN.replace(" a\n", " e\n"))
    md = files / "cmp.md"
    res = _eval("compare", "--qrels", files / "qrels.tsv", files / "a|b.trec", files / f"{EVIL}.trec",
                "--ks", "1", "--permutations", "10", "-o", files / "c.json", "--md", md)
    assert res.exit_code == 0, res.output
    text = md.read_text()
    assert "## baseline a|b.trec vs q2.trec" in text
    assert "| metric | a\\|b.trec | q2.trec | diff |" in text
    assert "\x1b" not in text and "\x07" not in text
    header = next(line for line in text.splitlines() if line.startswith("| metric"))
    assert len(re.findall(r"(?<!\\)\|", header)) == 8  # 7 cells


def test_queries_help_states_the_depth():
    import typer.main

    params = {p.name: p for p in typer.main.get_command(app).commands["eval"].commands["run"].params}
    assert "max(--ks)" in params["queries"].help and "-k 100" not in params["queries"].help


def test_eval_docs_name_only_eval_flags_or_say_whose():
    """Each sentence of the `rag eval` sections of docs/commands.md (the group
    and its subcommands) names flags of `rag eval`, or says which command the
    others belong to."""
    import typer.main

    commands = typer.main.get_command(app).commands
    flags = {cmd: {o for p in commands[cmd].params for o in p.opts} for cmd in commands}

    def subcommands(group):
        for cmd in group.commands.values():
            yield from subcommands(cmd) if hasattr(cmd, "commands") else [cmd]
    flags["eval"] = {o for cmd in subcommands(commands["eval"]) for p in cmd.params for o in p.opts}
    text = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    section = text[text.index("## `rag eval"):]
    section = section[:section.index("\n## `rag models")]
    for sentence in re.split(r"(?<!\.)\.\s", section):  # not at "..."
        named = set(re.findall(r"`rag (\w+)", sentence))
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", sentence):
            assert flag in flags["eval"] or any(flag in flags[c] for c in named if c in flags), (flag, sentence)
