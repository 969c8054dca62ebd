"""The Model Context Protocol face of a `Service` (the `mcp` SDK's
`MCPServer`): what an assistant (Claude Desktop, Claude Code, an editor)
calls to use the index directly.

- tool `search(query, mode?, k?, filter?)`: the JSON of `rag search QUERY --json`;
- tool `ask(question, mode?, k?, filter?)`: the JSON of `rag ask QUESTION --json`
  (an answer with [n] citations and its sources, or a refusal with its reason);
- resource `rag://status`: the JSON of `rag status --json`.

Bad input (an empty query, k over serve.max_k, a bad filter, an argument
the tool does not have) is a tool error carrying the library's message,
worded for the tool: it names the tool's argument (`argument mode 'bogus':
must be one of ...`), not the CLI's flag and config key. Served over stdio (`rag serve --mcp
stdio`) or streamable HTTP at /mcp of the HTTP server; the calls share the
server's threads, generation pinning and query log (`via` = "mcp").
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

from rag_cli.serve.requests import AskRequest, SearchRequest
from rag_cli.serve.service import Service, error_message

INSTRUCTIONS = ("Search and question the documents indexed by rag-cli. `search` returns the best-matching chunks "
                "(text, doc_id, score); `ask` answers from those documents only, citing them as [n], and refuses "
                "(refused: true) when they do not hold the answer. Filters match document fields, e.g. "
                "[\"path=*.md\", \"date>=2025-01-01\"].")


def tool_wording(message: str, arguments) -> str:
    """A library message worded for a tool: `--mode` becomes `argument mode` where `mode` is one of the tool's
    `arguments`, and the `(config search.mode)` asides are left out (an assistant has no rag.toml to edit)."""
    def argument(m: re.Match) -> str:
        name = m.group(1).replace("-", "_")
        return f"argument {name}" if name in arguments else m.group(0)

    message = re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)", argument, message)
    return re.sub(r" \(config [\w.]+\)", "", message)


def create_mcp(service: Service):
    """An `MCPServer` with the tools and the resource of `service`. A call with an argument the tool does not
    have is a tool error naming it and the tool's arguments."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    from rag_cli import __version__
    from rag_cli.errors import RagError

    accepted: dict[str, list[str]] = {}  # tool name -> its arguments

    class StrictServer(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            unknown = sorted(set(arguments or {}) - set(accepted.get(name, arguments or {})))
            if unknown:
                raise ToolError(f"{', '.join(unknown)}: not an argument of the {name} tool; its arguments are "
                                f"{', '.join(accepted[name])}")
            return await super().call_tool(name, arguments, context)

    server = StrictServer("rag-cli", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def strict_tool(description: str):
        def register(fn):
            accepted[fn.__name__] = list(inspect.signature(fn).parameters)
            return server.tool(description=description)(fn)
        return register

    async def call(method, request_type, **fields):
        arguments = list(fields)
        try:
            req = request_type(**{k: v for k, v in fields.items() if v is not None})
            return (await service.in_thread(method, req, "mcp")).data
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ToolError(f"argument {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        except RagError as exc:
            raise ToolError(tool_wording(error_message(exc), arguments)) from None

    @strict_tool("Search the indexed documents: the best-matching chunks, best first (rank, chunk_id, doc_id, "
                 "score, text). mode: dense | sparse | hybrid (default: the project's); k: how many; filter: "
                 "expressions that must all match, e.g. [\"doc_id=guides/*\"].")
    async def search(query: str, mode: str | None = None, k: int | None = None,
                     filter: list[str] | None = None) -> dict[str, Any]:
        return await call(service.search, SearchRequest, query=query, mode=mode, k=k, filter=filter)

    @strict_tool("Answer a question from the indexed documents only, citing them as [n] (sources: the cited "
                 "chunks); refused: true, with a reason, when they do not hold the answer.")
    async def ask(question: str, mode: str | None = None, k: int | None = None,
                  filter: list[str] | None = None) -> dict[str, Any]:
        return await call(service.ask, AskRequest, question=question, mode=mode, k=k, filter=filter)

    @server.resource("rag://status", name="status", mime_type="application/json",
                     description="The project's documents, chunks, index generations and stale stages "
                                 "(rag status --json)")
    async def status() -> str:
        return json.dumps(await service.in_thread(service.status), ensure_ascii=False)

    return server


def http_routes(server, host: str, max_body: int) -> list:
    """The Starlette routes of `server`'s streamable HTTP transport (at /mcp),
    to add to the HTTP app (whose lifespan runs `server.session_manager.run()`).
    `host` is the address the HTTP server binds: on loopback the SDK's DNS
    rebinding protection stays on (Host and Origin must be loopback); on
    another address the server's API key guards /mcp instead."""
    from mcp.server.transport_security import TransportSecuritySettings

    from rag_cli.serve.access import is_loopback

    loopback = is_loopback(host)
    security = None if loopback else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(streamable_http_path="/mcp", max_request_body_size=max_body,
                                     transport_security=security, host="127.0.0.1" if loopback else host)
    return list(app.routes)


def run_stdio(server) -> None:
    """Serve MCP over stdin/stdout until the client closes stdin."""
    import anyio

    anyio.run(server.run_stdio_async)

