r"""`rag serve`: the project over HTTP (JSON, server-sent events) and MCP,
warm, with hot reload of new index generations (docs/serve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli.common import given, note
from rag_cli.cli.options import PROJECT, Settings, options, output
from rag_cli.cli.root import app

#: The [serve] settings: host, port, API key, log, limits.
SERVE = Settings("serve")

McpOpt = Annotated[str, typer.Option(
    "--mcp", help="MCP transport: http (streamable HTTP at /mcp of the server) | stdio (MCP on stdin/stdout, "
                  "no HTTP: for an assistant that starts the server itself) | none")]


CollectionOpt = Annotated[Optional[list[str]], typer.Option(
    "--collection", help="Serve this project folder as collection NAME (NAME=DIR; repeat for more; docs/serve.md)")]
ServerFileOpt = Annotated[Optional[Path], typer.Option(
    "--server-file", help="A serve.toml: the collections, \\[server] settings, optionally \\[keys] (docs/serve.md)")]
KeysOpt = Annotated[Optional[Path], typer.Option(
    "--keys", help="A key file (keys.toml): each key's collections and filters; reloaded on SIGHUP or change")]
CheckOpt = Annotated[bool, typer.Option(
    "--check", help="Check the server file, the collections and the key file, then exit (0, or 2 naming the line)")]


@app.command()
@options(SERVE, PROJECT, output(quiet="No notes on stderr (the address, reloads).", json=False))
def serve(mcp: McpOpt = "http", collection: CollectionOpt = None, server_file: ServerFileOpt = None,
          keys: KeysOpt = None, check: CheckOpt = False, *, opts, project, quiet):
    r"""Serve search and ask over HTTP and MCP from one warm process; reload new index generations; log queries.

    Loads the project once (models, index) and answers `POST /search`,
    `POST /ask` (server-sent events with `"stream": true`), `GET /status`,
    `GET /healthz` and `POST /feedback` (with `--log`), with the same JSON as
    `rag search --json` and `rag ask --json`; the OpenAPI description is at
    `/openapi.json` (pages at `/docs`), MCP (tools `search` and `ask`, the
    resource `rag://status`) at `/mcp`, or on stdin/stdout with `--mcp stdio`.
    Requests run in threads of this one process, sharing one loaded index.
    When `rag update`, `rag watch` or `rag index` makes a new generation
    current, it is loaded beside the served one and swapped in between
    requests; each request runs on one generation (`X-Rag-Generation`).
    Binds 127.0.0.1; another `--host` needs `--api-key-env NAME` (the key is
    then required on loopback too). SIGTERM or Ctrl-C stops it gracefully
    (exit 0). Exit 2 before binding for a bad setting or no index; exit 1 when
    the port is taken. With `--collection NAME=DIR` (repeated) or `--server-file`
    serve.toml it serves several projects (`/collections`, `/c/NAME/search`, ...),
    and `--keys` keys.toml gives each key its collections and fixed filters;
    `--check` checks them and exits. Details: docs/serve.md.
    """
    from rag_cli.project import Project
    from rag_cli.serve import serve as run_server

    notes = run_server(Project.open(project), collections=collection or (), server_file=server_file, keys=keys,
                       check=check, mcp=mcp.lower(), say=None if quiet else note, **given(opts))
    if check:
        for line in notes or []:
            typer.echo(line)
        typer.echo("ok")
