"""The `rag` app: its root callback (`--version`) and `main`, the entry point.
The command modules register their commands on `app`."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from rag_cli.cli.coerce import install as _install_coerce
from rag_cli.cli.common import RagTyper

_install_coerce()  # plain values without pydantic (rag_cli.cli.coerce)

HELP = "Retrieval-augmented generation in the shell: chunk, embed, index, search, rerank, ask, eval."

app = RagTyper(name="rag", help=HELP)


def _print_version(value: bool) -> None:
    if value:
        from rag_cli import __version__

        typer.echo(f"rag-cli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Retrieval-augmented generation in the shell: chunk, embed, index, search, rerank, ask, eval."""


def _terminated(signum, frame) -> None:
    """SIGTERM (cron timeouts, `kill`): unwind like Ctrl-C, so that temporary
    files are removed and nothing half-written is renamed into place."""
    raise KeyboardInterrupt


def main() -> None:
    """Entry point of `rag` and `python -m rag_cli`.

    Once the command has finished (its files written and renamed, the project
    lock released, its output flushed) the process ends with `os._exit`: the
    interpreter's teardown would only free memory (the tokenizer alone takes
    a quarter of a second to free; docs/startup.md).
    """
    import signal

    signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `rag search ... | head`: the reader is gone
        pass
    os._exit(code)
