"""docs/commands.md is generated from the CLI itself (`python -m rag_cli.cli.docs
--write`), as sqlite-utils generates its CLI reference with cog: these tests
fail when the file and the CLI differ, or a command or option has no help."""

from __future__ import annotations

import difflib

import typer.main

from rag_cli.cli import app
from rag_cli.cli.docs import DOC, generate


def test_commands_md_is_what_the_cli_generates():
    diff = list(difflib.unified_diff(DOC.read_text(encoding="utf-8").splitlines(), generate().splitlines(),
                                     "docs/commands.md", "generated", lineterm="", n=1))
    assert not diff, "docs/commands.md is stale: run `python -m rag_cli.cli.docs --write`\n" + "\n".join(diff[:60])


def test_every_command_and_option_has_help():
    def walk(command, path):
        yield command, path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    for command, path in walk(typer.main.get_command(app), ["rag"]):
        assert (command.help or "").strip(), path
        for param in command.params:
            assert (getattr(param, "help", None) or "").strip(), (path, param.name)
        assert f"`{' '.join(path)}" in DOC.read_text(encoding="utf-8"), path


def test_every_config_key_is_in_the_docs():
    from rag_cli.config import all_settings

    text = DOC.read_text(encoding="utf-8")
    for s in all_settings():
        assert f"| {s.place} | {s.key} |" in text, (s.place, s.key)
