"""The Model Context Protocol face of a `Service` (the `mcp` SDK's
`MCPServer`): what an assistant (Claude Desktop, Claude Code, an editor)
calls to use the index directly.

- tool `search(query, mode?, k?, filter?)`: the JSON of `rag search QUERY --json`;
- tool `ask(question, mode?, k?, filter?)`: the JSON of `rag ask QUESTION --json`
  (an answer with [n] citations and its sources, or a refusal with its reason);
- resource `rag://status`: the JSON of `rag status --json`.

Serving collections (`--collection`, a server file), the tools take a `collection` argument (an enum of
the names the caller's key may read) and each collection's status is `rag://c/NAME/status`; the key's
scope applies as over HTTP.

Bad input (an empty query, k over serve.max_k, a bad filter, an argument
the tool does not have) is a tool error carrying the library's message,
worded for the tool: it names the tool's argument (`argument mode 'bogus':
must be one of ...`), not the CLI's flag and config key. Served over stdio (`rag serve --mcp
stdio`) or streamable HTTP at /mcp of the HTTP server; the calls share the
server's threads, generation pinning and query log (`via` = "mcp").
"""

from __future__ import annotations

import contextvars
import inspect
import json
import re
from typing import Any

from mcp.server.mcpserver import Context  # noqa: F401 - the tools' `ctx` annotation, resolved by the SDK

from rag_cli.serve.requests import AskRequest, SearchRequest
from rag_cli.serve.service import error_message

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


#: The `Access` of the MCP request being answered, for a resource's function.
_ACCESS: contextvars.ContextVar = contextvars.ContextVar("rag_access", default=None)


def request_access(ctx):
    """The `Access` of the key that sent an MCP request (`ctx`: the SDK's request context): the HTTP
    request's, set by the Guard; every collection over stdio (the user who started the server)."""
    from rag_cli.serve.server_file import EVERYTHING

    request = getattr(ctx, "request", None) if ctx is not None else None
    if request is None:
        return EVERYTHING
    return request.scope.get("rag.access") or EVERYTHING


def create_mcp(served):
    """An `MCPServer` with the tools and the resources of `served` (a `rag_cli.serve.collections.Served`).
    One project: tools `search` and `ask`, resource `rag://status`. Collections: the tools take a
    `collection` argument (an enum of the names the caller's key may read, in the schema it lists) and each
    collection's status is the resource `rag://c/NAME/status` (listed for the keys that may read it). A
    call with an argument the tool does not have is a tool error naming it and the tool's arguments."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
    from pydantic import ValidationError

    from rag_cli import __version__
    from rag_cli.errors import RagError

    accepted: dict[str, list[str]] = {}  # tool name -> its arguments
    multi = served.multi

    class StrictServer(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            unknown = sorted(set(arguments or {}) - set(accepted.get(name, arguments or {})))
            if unknown:
                raise ToolError(f"{', '.join(unknown)}: not an argument of the {name} tool; its arguments are "
                                f"{', '.join(accepted[name])}")
            return await super().call_tool(name, arguments, context)

        async def _handle_list_tools(self, ctx, params):
            result = await super()._handle_list_tools(ctx, params)
            if multi:
                names = served.names(request_access(ctx))
                for tool in result.tools:
                    prop = (tool.input_schema or {}).get("properties", {}).get("collection")
                    if prop is not None:
                        tool.input_schema = {**tool.input_schema, "properties": {
                            **tool.input_schema["properties"], "collection": {**prop, "enum": names}}}
            return result

        async def _handle_list_resources(self, ctx, params):
            result = await super()._handle_list_resources(ctx, params)
            if multi:
                names = set(served.names(request_access(ctx)))
                result.resources = [r for r in result.resources if _collection_of(str(r.uri)) in names]
            return result

        async def read_resource(self, uri, context=None):
            name = _collection_of(str(uri))
            access = request_access(context.request_context if context is not None else None)
            if multi and name is not None and not access.may_read(name):
                raise ResourceNotFoundError(f"Unknown resource: {uri}")
            token = _ACCESS.set(access)  # for the resource's function (static resources get no context)
            try:
                return await super().read_resource(uri, context)
            finally:
                _ACCESS.reset(token)

    server = StrictServer("rag-cli", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def strict_tool(description: str):
        def register(fn):
            accepted[fn.__name__] = [p for p in inspect.signature(fn).parameters if p != "ctx"]
            return server.tool(description=description)(fn)
        return register

    async def call(method_name, request_type, ctx, collection, **fields):
        arguments = list(fields) + (["collection"] if multi else [])
        try:
            access = request_access(ctx.request_context)
            service = served.get(collection, access) if multi else served.get(next(iter(served.services)), access)
            req = request_type(**{k: v for k, v in fields.items() if v is not None})
            method = getattr(service, method_name)
            scope = access.scope(service.name)
            if method_name == "ask":
                reply = await served.in_thread(method, req, "mcp", None, None, scope)
            else:
                reply = await served.in_thread(method, req, "mcp", scope)
            return reply.data
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ToolError(f"argument {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        except RagError as exc:
            raise ToolError(tool_wording(error_message(exc), arguments)) from None

    search_doc = ("Search the indexed documents: the best-matching chunks, best first (rank, chunk_id, doc_id, "
                  "score, text). mode: dense | sparse | hybrid (default: the project's); k: how many; filter: "
                  "expressions that must all match, e.g. [\"doc_id=guides/*\"].")
    ask_doc = ("Answer a question from the indexed documents only, citing them as [n] (sources: the cited "
               "chunks); refused: true, with a reason, when they do not hold the answer.")
    if not multi:
        @strict_tool(search_doc)
        async def search(query: str, ctx: Context, mode: str | None = None, k: int | None = None,
                         filter: list[str] | None = None) -> dict[str, Any]:
            return await call("search", SearchRequest, ctx, None, query=query, mode=mode, k=k, filter=filter)

        @strict_tool(ask_doc)
        async def ask(question: str, ctx: Context, mode: str | None = None, k: int | None = None,
                      filter: list[str] | None = None) -> dict[str, Any]:
            return await call("ask", AskRequest, ctx, None, question=question, mode=mode, k=k, filter=filter)

        @server.resource("rag://status", name="status", mime_type="application/json",
                         description="The project's documents, chunks, index generations and stale stages "
                                     "(rag status --json)")
        async def status() -> str:
            service = served.only()
            return json.dumps(await served.in_thread(service.status), ensure_ascii=False)
        return server

    @strict_tool(search_doc + " collection: which collection to search.")
    async def search(collection: str, query: str, ctx: Context, mode: str | None = None, k: int | None = None,
                     filter: list[str] | None = None) -> dict[str, Any]:
        return await call("search", SearchRequest, ctx, collection, query=query, mode=mode, k=k, filter=filter)

    @strict_tool(ask_doc + " collection: which collection to ask.")
    async def ask(collection: str, question: str, ctx: Context, mode: str | None = None, k: int | None = None,
                  filter: list[str] | None = None) -> dict[str, Any]:
        return await call("ask", AskRequest, ctx, collection, question=question, mode=mode, k=k, filter=filter)

    for tool in ("search", "ask"):  # the schema's enum: every name here, the caller's own in tools/list
        prop = server._tool_manager.get_tool(tool).parameters["properties"]["collection"]
        prop["enum"] = list(served.services)

    for name in served.services:
        def status_of(name=name):
            async def status() -> str:
                from rag_cli.serve.server_file import EVERYTHING

                access = _ACCESS.get() or EVERYTHING
                service = served.get(name, access)
                return json.dumps(await served.in_thread(service.status, access.scope(name)), ensure_ascii=False)
            return status

        server.resource(f"rag://c/{name}/status", name=f"{name}-status", mime_type="application/json",
                        description=f"Collection {name}: its documents, chunks, index generations and stale "
                                    "stages (rag status --json; counted in the key's scope)")(status_of())
    return server


def _collection_of(uri: str) -> str | None:
    """NAME of a `rag://c/NAME/status` URI, else None."""
    m = re.fullmatch(r"rag://c/([^/]+)/status", uri)
    return m.group(1) if m else None


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

