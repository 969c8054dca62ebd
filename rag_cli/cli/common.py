"""What every command shares: the typer app class whose commands handle
errors once (`handle_errors`), the consoles, JSON output, notes and
warnings on stderr, and the progress bar.

Exit codes: 0 success, 1 the work failed, 2 bad usage or bad input; 130
interrupted. Under `--json` a failed command also prints one JSON object on
stdout, `{"error": {"message", "exit_code", "flag"}}` (`error_json`), so a
script that reads stdout sees the failure; the message still goes to stderr.
Heavy imports (rich) happen inside the functions, so
`rag --help` stays instant.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
from typing import Any

import typer
from typer.core import TyperCommand

from rag_cli.errors import Interrupted, RagError
from rag_cli.json_shapes import json_safe
from rag_cli.progress import QUIET


def stderr():
    """A rich console on stderr; messages are never hard-wrapped (paths stay greppable)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def stdout():
    """A rich console on stdout (soft-wrapped)."""
    from rich.console import Console

    return Console(soft_wrap=True)


def error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is printed verbatim (no rich markup, no control characters)."""
    from rich.text import Text

    from rag_cli.safe_text import plain

    stderr().print(Text.assemble(("error:", "bold red"), " ", plain(message)))


def note(message: str) -> None:
    """A plain message on stderr (printed verbatim: no markup, no highlighting; ids and names from user
    files in it made plain text by `rag_cli.safe_text.plain`)."""
    from rag_cli.safe_text import plain

    stderr().print(plain(message), highlight=False, markup=False)


def warn(message: str) -> None:
    """A message on stderr in yellow (printed verbatim, made plain text as `note`)."""
    from rag_cli.safe_text import plain_text

    stderr().print(plain_text(message, style="yellow"))


def line(text: str) -> None:
    """One line on stdout, printed verbatim (no markup, no highlighting)."""
    stdout().print(text, highlight=False, markup=False)


#: A command-line flag named in a message: `--filter`, `--k1` or `-k`, not `-1` or the `-empty` of `non-empty`.
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9]|-[a-zA-Z])(?![\w-])")


def error_json(message: str, exit_code: int, flag: str | None = None) -> None:
    """Print `{"error": {"message", "exit_code", "flag"}}` on stdout (the `--json` form of a failure).
    `flag` defaults to the first command-line flag `message` names outside a quoted command
    (the `--queries` of "written by `rag ask --queries`" is advice, not the flag at fault), else null."""
    if flag is None:
        m = _FLAG.search(re.sub(r"`[^`]*`", "", message)) or _FLAG.search(message)
        flag = m.group(1) if m else None
    emit_json({"error": {"message": message, "exit_code": exit_code, "flag": flag}})


def _fail(message: str, exit_code: int, json_out: bool) -> typer.Exit:
    """`error: MESSAGE` on stderr (and the JSON error on stdout with --json); the Exit to raise."""
    error(message)
    if json_out:
        error_json(message, exit_code)
    return typer.Exit(exit_code)


def handle_errors(fn):
    """Turn RagError into a message on stderr and its exit code (1 or 2),
    Ctrl-C into exit 130, and any other exception into exit 1 naming it
    (RAG_DEBUG=1: the traceback); under `--json` (a `json_out` keyword) the
    same failure is also printed on stdout (`error_json`). Every command of a
    `RagTyper` gets it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        json_out = bool(kwargs.get("json_out"))
        quiet = QUIET.set(bool(kwargs.get("quiet")))
        try:
            return fn(*args, **kwargs)
        except RagError as exc:
            raise _fail(str(exc), exc.exit_code, json_out)
        except KeyboardInterrupt as exc:
            what = str(exc) if isinstance(exc, Interrupted) else "the previous files are intact"
            message = f"interrupted; {what}" if what else "interrupted"
            stderr().print(message, highlight=False, markup=False)
            if json_out:
                error_json(message, 130)
            raise typer.Exit(130)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as exc:  # a bug or an environment problem: say so, exit 1
            if os.environ.get("RAG_DEBUG"):
                raise
            raise _fail(f"{type(exc).__name__}: {exc} (set RAG_DEBUG=1 for the traceback)", 1, json_out)
        finally:
            QUIET.reset(quiet)

    return wrapper


class RagCommand(TyperCommand):
    """A command whose usage errors (an unknown option, a value of the wrong
    type, a missing argument: exit 2, printed by click on stderr) are also
    printed on stdout as the `--json` error object when `--json` was given."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        wants_json = "--json" in (args[:args.index("--")] if "--" in args else args)
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException as exc:  # typer's click UsageError and its kinds (BadParameter, NoSuchOption)
            if wants_json and hasattr(exc, "format_message"):
                param = getattr(exc, "param", None)
                flag = getattr(exc, "option_name", None) or (param.opts[0] if param is not None and
                                                              getattr(param, "opts", None) else None)
                error_json(exc.format_message(), exc.exit_code, flag)
            raise


class RagTyper(typer.Typer):
    """A typer app whose every command is wrapped in `handle_errors` and is a
    `RagCommand` (or a subclass): errors are handled in one place, not in each command."""

    def __init__(self, **kwargs: Any):
        super().__init__(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, **kwargs)

    def command(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("cls", RagCommand)
        register = super().command(*args, **kwargs)

        def decorate(fn):
            register(handle_errors(fn))
            return fn

        return decorate


def as_dict(result: Any) -> Any:
    """A library result as a dict: `result.to_dict()` (a typed result) or the dict itself."""
    return result.to_dict() if hasattr(result, "to_dict") else result


def emit_json(obj: Any) -> None:
    """Print `obj` as strict JSON: a NaN or infinite float is written as null."""
    sys.stdout.write(json.dumps(json_safe(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n")


@contextlib.contextmanager
def progress(quiet: bool):
    """Yield the library's progress callback (task, done, total), rendered as
    a rich progress bar on stderr, or None when quiet or stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    tasks: dict[str, int] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=stderr(), transient=True) as bar:
        def update(task: str, done: int, total: int | None) -> None:
            if task not in tasks:
                tasks[task] = bar.add_task(task, total=total)
            bar.update(tasks[task], completed=done, total=total)

        yield update


def given(options: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line (not None; a nested dict, such as
    `llm`, likewise): the library's config and defaults stand for the rest."""
    out = {}
    for key, value in options.items():
        if isinstance(value, dict):
            value = given(value)
        if value is not None:
            out[key] = value
    return out


def count(n: int, word: str) -> str:
    """`1 text`, `2 texts`, `1 query`, `3 queries`."""
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"
