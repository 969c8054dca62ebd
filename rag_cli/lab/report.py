"""`Report`: the result of one experiment of the lab, in the manner of
ranx's `Report`: the report dict (`to_dict()`, the JSON of eval/NAME.json),
where it was written (`path`), the warnings `rag eval` says about it, its
rich tables (`render`), its Markdown (`markdown`), `save` and
`write_summaries` (Markdown and PNG plots).

Each experiment module defines a subclass (`kind`) that knows its tables
and its warnings; this base class knows everything else. Text from a user's
file (ids, run and file names) is printed through
`rag_cli.safe_text.plain`, never parsed as rich markup.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar


def count(n: int, word: str) -> str:
    """`1 query`, `3 queries`, `2 documents`."""
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def ids(values: list, shown: int = 10) -> str:
    """The first `shown` ids, comma-separated, and how many more there are."""
    more = f", ... ({len(values) - shown} more)" if len(values) > shown else ""
    return ", ".join(map(str, values[:shown])) + more


def stdout_console():
    """The console the CLI prints reports on: stdout, soft-wrapped (long lines never hard-wrapped)."""
    from rich.console import Console

    return Console(soft_wrap=True)


def stderr_console():
    """The console of warnings and notes: stderr, soft-wrapped."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


class Report:
    """One experiment's report.

    `Report(data, path=None)`: `data` is the report dict (JSON-ready: str
    keys, numbers, lists); `path` the file it was written to (eval/NAME.json
    or -o), or None when it was not written.

    Subclasses set `kind` and override `print_tables` (what goes to
    stdout), `_messages` (warnings and notes for stderr) and, where the CLI
    says more than "written: PATH", `written_line`.
    """

    kind: ClassVar[str] = "report"

    def __init__(self, data: dict, path: str | os.PathLike | None = None):
        self.data = data
        self.path = Path(path) if path is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={str(self.path) if self.path else None!r})"

    def __getitem__(self, key: str) -> Any:
        """Read access by key, as to the dict (`report["metrics"]`)."""
        return self.data[key]

    def __contains__(self, key: str) -> bool:
        return key in self.data

    # -- the dict -------------------------------------------------------------
    def to_dict(self) -> dict:
        """The report dict: what is written to `path` and what `--json` prints (the dict itself, not a copy)."""
        return self.data

    def as_tuple(self) -> tuple[dict, Path | None]:
        """(`to_dict()`, `path`): the report dict and where it was written, as one pair."""
        return self.data, self.path

    # -- what is said about it -------------------------------------------------
    def messages(self) -> list[tuple[str, str]]:
        """[(level, text)] for stderr, in order: level "warning" (printed in
        yellow) or "note" (plain). The CLI prints them unless -q, with or
        without --json. Ids from user files in them are made plain text
        (`rag_cli.safe_text.plain`: no escape sequences or control characters)."""
        from rag_cli.safe_text import plain

        return [(level, plain(text)) for level, text in self._messages()]

    def _messages(self) -> list[tuple[str, str]]:
        """`messages()` before `plain`: what a subclass says."""
        return []

    def warnings(self) -> list[str]:
        """The plain-text warnings of `messages()` (e.g. a run shallower than
        k, repeated rows, answers recorded in another project)."""
        return [text for level, text in self.messages() if level == "warning"]

    def written_line(self) -> str | None:
        """The note printed after the tables (unless -q, not with --json):
        "written: PATH", or None when nothing was written."""
        return f"written: {self.path}" if self.path is not None else None

    # -- rendering -------------------------------------------------------------
    def print_tables(self, console) -> None:
        """Print the report's tables and summary lines on `console` (a rich Console)."""

    def print_messages(self, err=None) -> None:
        """Print `messages()` on `err` (a rich Console; default stderr):
        warnings in yellow, notes plain; never parsed as markup."""
        from rag_cli.safe_text import plain, plain_text

        err = err or stderr_console()
        for level, text in self.messages():
            if level == "warning":
                err.print(plain_text(text, style="yellow"))
            else:
                err.print(plain(text), highlight=False, markup=False)

    def render(self, console=None, quiet: bool = False, *, err=None) -> None:
        """Print what `rag eval` prints for this report: the tables on
        `console` (default stdout); then, unless `quiet`, `messages()` and
        `written_line()` on `err` (default stderr)."""
        from rag_cli.safe_text import plain

        self.print_tables(console or stdout_console())
        if quiet:
            return
        err = err or stderr_console()
        self.print_messages(err)
        line = self.written_line()
        if line:
            err.print(plain(line), highlight=False, markup=False)

    def markdown(self) -> str:
        """The Markdown summary (`rag_cli.evaluate.markdown.to_markdown`)."""
        from rag_cli.evaluate.markdown import to_markdown

        return to_markdown(self.data)

    # -- files -------------------------------------------------------------------
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the report as indented UTF-8 JSON, atomically, to `path`
        (default: `self.path`; a given path becomes `self.path`). Returns
        the path. Raises ValueError when neither is set."""
        from rag_cli.store.eval_reports import write_report

        if path is not None:
            self.path = Path(path)
        if self.path is None:
            raise ValueError("Report.save: no path given and the report has none")
        write_report(self.path, self.data)
        return self.path

    def write_summaries(self, md: str | os.PathLike | None = None, plots: str | os.PathLike | None = None,
                        name: str | None = None) -> list[Path]:
        """Write the Markdown summary to `md` and the PNG plots into the
        folder `plots` as NAME-KIND.png (NAME: `name`, else the stem of
        `path`, else "eval"; see `rag_cli.evaluate.plots`, which needs
        matplotlib). Returns the paths written, Markdown first."""
        from rag_cli import atomic

        written: list[Path] = []
        if md is not None:
            atomic.write_text(md, self.markdown())
            written.append(Path(md))
        if plots is not None:
            from rag_cli.evaluate.plots import plot_report

            name = name or (self.path.stem if self.path is not None else "eval")
            written += plot_report(self.data, plots, name)
        return written
