"""The `rag` command: typer commands that parse flags, make one call to the
library (`rag_cli.project.Project`) and hand the result to a printer.

- `root`: the app, `--version` and `main` (the console script `rag`);
- `common`: errors handled once, consoles, JSON, notes, progress;
- `options`: option groups declared once (config settings from
  `rag_cli.config`), stacked on commands by `options(...)`;
- `build` (init, chunk, embed, index, build), `living` (update, watch,
  rollback, status), `query` (search, rerank), `ask`, `models`, `serve`: the
  commands, by concern; `evaluation`: the `rag eval` sub-app, one
  subcommand per experiment of `rag_cli.lab`;
- `render`, `render_query`, `render_models`: the printers;
- `docs`: docs/commands.md, generated from the commands.

Exit codes: 0 success, 1 the work failed, 2 bad usage or bad input.
Heavy imports happen inside the commands, so `rag --help` is instant.
"""

from rag_cli.cli.root import app, main
from rag_cli.cli import build, living, query, ask, evaluation, models, serve  # noqa: E402,F401  (register the commands)

# The names these helpers had when the CLI was one module (tests and scripts import them).
from rag_cli.cli.common import count as _count, emit_json as _emit_json  # noqa: E402,F401
from rag_cli.cli.render import embedded as _embedded, update_line as _update_line  # noqa: E402,F401
from rag_cli.cli.render_query import score_digits as _score_digits  # noqa: E402,F401

__all__ = ["app", "main"]
