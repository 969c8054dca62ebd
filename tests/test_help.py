"""Help that a person reads (#31 item 24): a command's help says what it
does, one line per option and one or two examples, and links a docs/ page
for the explanations; measured figures (bench results, scores with three or
more decimals, percentages) live in docs/ and bench/results/, never in help."""

from __future__ import annotations

import re

import pytest
import typer.main

from rag_cli.cli import app

MAX_LINES = 25  # lines of a command's description (its docstring), options apart
MAX_OPTION = 160  # characters of one option's help: about one line of a wide terminal
FIGURE = re.compile(r"bench/|\b\d+\.\d{3,}\b|\b\d+(?:\.\d+)? ?%")


def _commands():
    def walk(command, path):
        yield " ".join(path), command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), ["rag"]))


def faults(command) -> list[str]:
    """What is wrong with `command`'s help: too long, an option's help past a line, or a measured figure."""
    text = command.help or ""
    out = []
    if len(text.strip().splitlines()) > MAX_LINES:
        out.append(f"{len(text.strip().splitlines())} lines of description (at most {MAX_LINES})")
    for param in command.params:
        h = getattr(param, "help", None) or ""
        if len(h) > MAX_OPTION:
            out.append(f"{param.opts[0]}: {len(h)} characters of help (at most {MAX_OPTION})")
        text += "\n" + h
    out += [f"a measured figure: {m.group(0)!r}" for m in FIGURE.finditer(text)]
    return out


@pytest.mark.parametrize("name, command", _commands(), ids=[n for n, _ in _commands()])
def test_help_is_short_and_holds_no_figures(name, command):
    """Every command: a short description, one line per option, no measured figure."""
    assert faults(command) == [], name


def test_eval_run_help_links_its_page_and_has_an_example():
    text = dict(_commands())["rag eval run"].help
    assert "docs/evaluation.md" in text and "rag eval run --qrels" in text

