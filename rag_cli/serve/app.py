"""The HTTP front end: a FastAPI app over a `Served` (one project, or collections).

    POST /search    SearchRequest  -> `rag search QUERY --json`'s JSON
    POST /ask       AskRequest     -> `rag ask QUESTION --json`'s JSON, or with
                                      "stream": true server-sent events:
                                      `text` {"text": piece}..., then `answer` (the
                                      same JSON) or `error` {"error", "status"}
    GET  /status                   -> `rag status --json`'s JSON
    GET  /healthz                  -> the server's state (generation served, reloads, ...)
    POST /feedback  FeedbackRequest (with serve.log)
    GET  /openapi.json, /docs      the OpenAPI description
    /mcp                           MCP, streamable HTTP (`rag_cli.serve.mcp_tools`)
    GET  /collections              -> the collections the key may read
    POST /c/NAME/search, /c/NAME/ask, /c/NAME/feedback; GET /c/NAME/status: the same, for collection NAME
                                      (/search ... are served when one collection is)

Responses of /search and /ask carry `X-Rag-Generation` (the index
generation that answered) and `X-Rag-Answer-Id` (for /feedback). Errors
are JSON {"error": message} (and "field" when one field is at fault): 400
bad input (a field of the wrong type or unknown, an empty query, a bad
mode or filter, k over serve.max_k), 401 a missing or wrong API key, 404 a
collection that does not exist or that the key may not read (the same answer,
so its name is not revealed), 413 a body over serve.max_body, 415 a body not
sent as `application/json`, 500 a failure that is not the client's, 503 a
collection whose index cannot be loaded (the others are served).

Work runs in threads (`anyio.to_thread`, at most serve.max_concurrent at
once), never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag_cli.errors import RagError
from rag_cli.serve.requests import AskRequest, FeedbackRequest, SearchRequest
from rag_cli.serve.service import TooLarge, error_message, http_status

#: Paths open without the API key (a load balancer's probe).
OPEN_PATHS = ("/healthz",)

#: Paths whose POST body must be sent as JSON. Requiring `Content-Type: application/json` also keeps a web
#: page from posting to the server through a visitor's browser: that content type needs a CORS preflight,
#: which this server never grants.
JSON_PATHS = ("/search", "/ask", "/feedback")


def _error(status: int, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message, **({"field": field} if field else {})}, status_code=status,
                        headers=headers)


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """(message, field) of pydantic's first complaint about a request body, naming the field."""
    first = exc.errors()[0]
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    field = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON ({first.get('ctx', {}).get('error', first.get('msg'))})", None
    if first.get("type") == "extra_forbidden":
        return f"{field}: unknown field", field
    if field is None:
        return f"the body must be a JSON object ({first.get('msg')})", None
    return f"{field}: {first.get('msg')}", field


class Guard:
    """ASGI middleware: the key (`Authorization: Bearer KEY` or `X-API-Key: KEY`) on every path but
    OPEN_PATHS when `auth` is set (`auth(key bytes or None)` -> the key's `Access`, or None: 401; without
    `auth` every request reads everything), put in the scope as "rag.access" (None on an open path without
    a good key); the connection limit (`limits`, a `rag_cli.serve.protocol.Limits` or None: above its
    `max_connections` only OPEN_PATHS are served, others get 503), and the body size limit (Content-Length
    checked first, then the bytes as they arrive)."""

    def __init__(self, app, auth=None, max_body: int = 65536, limits=None):
        self.app, self.max_body, self.limits, self.auth = app, max_body, limits, auth

    async def __call__(self, scope, receive, send):
        from rag_cli.serve.server_file import EVERYTHING

        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.limits is not None and self.limits.busy() and scope.get("path") not in OPEN_PATHS:
            return await _error(503, f"the server has more than {self.limits.max_connections} connections open "
                                     "(its limit); try again", headers={"Retry-After": "1"})(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        path = scope.get("path", "")
        access = EVERYTHING if self.auth is None else self.auth(self._given(headers))
        if access is None and path not in OPEN_PATHS:
            response = _error(401, "missing or wrong API key: send `Authorization: Bearer KEY` or `X-API-Key: KEY`",
                              headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        scope["rag.access"] = access
        if scope.get("method") == "POST" and (path in JSON_PATHS or (
                path.startswith("/c/") and path.rsplit("/", 1)[-1] in ("search", "ask", "feedback"))):
            kind = headers.get("content-type", b"").split(b";")[0].strip().lower()
            if kind != b"application/json":
                return await _error(415, "send the body as JSON, with the header Content-Type: application/json")(
                    scope, receive, send)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return await _error(413, self._too_large())(scope, receive, send)
        seen, over = 0, False

        async def counted():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    over = True
                    raise TooLarge(self._too_large())
            return message

        async def unless_over(message):
            if not over:  # what the app answers to a body it could not read is replaced by the 413
                await send(message)

        with contextlib.suppress(TooLarge):
            await self.app(scope, counted, unless_over)
        if over:
            await _error(413, self._too_large())(scope, receive, send)

    def _too_large(self) -> str:
        return f"the request body is over {self.max_body} bytes (the server's serve.max_body)"

    @staticmethod
    def _given(headers: dict) -> bytes | None:
        given = headers.get("x-api-key")
        auth = headers.get("authorization", b"")
        if given is None and auth[:7].lower() == b"bearer ":
            given = auth[7:]
        return given.strip() if given is not None else None


def single_key(api_key: str | None):
    """The `auth` of a server with one key (--api-key-env): every collection for it, None for another;
    None (no `auth`) when there is no key. Compared in constant time."""
    if api_key is None:
        return None
    from rag_cli.serve.server_file import EVERYTHING

    want = api_key.encode()
    return lambda given: EVERYTHING if given is not None and hmac.compare_digest(given, want) else None


def create_app(served, *, auth=None, mcp_server=None, host: str = "127.0.0.1", limits=None) -> FastAPI:
    """The ASGI app serving `served` (a `rag_cli.serve.collections.Served`); `auth` the Guard's (None: no
    key required; `single_key`, or a `KeyRing`'s `authenticate`), `mcp_server` (an `mcp` MCPServer served at
    /mcp, or None), `host` the address it will be bound to (the MCP transport's Host checks), `limits` the
    server's connection count (`rag_cli.serve.protocol.Limits`; None: no limit).

    Routes: /collections and /c/NAME/{search,ask,status,feedback} always; the single-project routes
    (/search, /ask, /status, /feedback) when one collection is served."""
    from rag_cli import __version__

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with contextlib.AsyncExitStack() as stack:
            if mcp_server is not None:
                await stack.enter_async_context(mcp_server.session_manager.run())
            yield

    app = FastAPI(title="rag-cli", version=__version__, lifespan=lifespan,
                  description="Search and ask rag-cli projects (docs/serve.md). JSON in and out, as the CLI's "
                              "--json; MCP at /mcp.")

    in_thread = served.in_thread

    def reply_response(reply) -> JSONResponse:
        return JSONResponse(reply.data, headers={"X-Rag-Generation": reply.generation,
                                                 "X-Rag-Answer-Id": reply.answer_id})

    def access_of(request: Request):
        return request.scope.get("rag.access")

    def collection(request: Request, name: str | None):
        """(service, scope) of collection `name` (None: the only one) for the request's key; NotFound (404)."""
        access = access_of(request)
        service = served.get(name if name is not None else next(iter(served.services)), access)
        return service, access.scope(service.name)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):
        return _error(400, *validation_message(exc))

    @app.exception_handler(RagError)
    async def _rag_error(request, exc):
        return _error(http_status(exc), error_message(exc), getattr(exc, "field", None))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc):
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _failed(request, exc):
        return _error(500, error_message(exc))

    async def do_search(request, name, req: SearchRequest):
        service, scope = collection(request, name)
        return reply_response(await in_thread(service.search, req, "http", scope))

    async def do_ask(request, name, req: AskRequest):
        service, scope = collection(request, name)
        if not req.stream:
            return reply_response(await in_thread(service.ask, req, "http", None, None, scope))
        return await _ask_stream(service, scope, req)

    async def _ask_stream(service, scope, req: AskRequest):
        """The answer as server-sent events. The response starts at the first
        piece of text (so a bad question is still a plain 400)."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        meta: dict = {}

        def on_text(piece: str) -> None:
            loop.call_soon_threadsafe(events.put_nowait, ("text", {"text": piece}))

        async def work():
            try:
                reply = await in_thread(service.ask, req, "http", on_text, meta, scope)
                events.put_nowait(("answer", reply.data))
            except Exception as exc:  # noqa: BLE001 - becomes an error event or response
                events.put_nowait(("error", exc))
            events.put_nowait(None)

        task = asyncio.ensure_future(work())
        first = await events.get()
        if first is not None and first[0] == "error":
            await task
            raise first[1]

        async def body():
            item = first
            while item is not None:
                kind, data = item
                if kind == "error":
                    data = {"error": error_message(data), "status": http_status(data)}
                yield f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
                item = await events.get()

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"X-Rag-Generation": meta.get("generation", ""),
                                          "X-Rag-Answer-Id": meta.get("answer_id", ""), "Cache-Control": "no-cache"})

    async def do_status(request, name):
        service, scope = collection(request, name)
        return JSONResponse(await in_thread(service.status, scope))

    async def do_feedback(request, name, req: FeedbackRequest):
        service, scope = collection(request, name)
        return JSONResponse(await in_thread(service.feedback, req, scope))

    if served.only() is not None:
        @app.post("/search", summary="Search one query (the JSON of `rag search QUERY --json`)")
        async def search(req: SearchRequest, request: Request):
            return await do_search(request, None, req)

        @app.post("/ask", summary="Answer one question (the JSON of `rag ask QUESTION --json`, or SSE with stream)")
        async def ask(req: AskRequest, request: Request):
            return await do_ask(request, None, req)

        @app.get("/status", summary="The project's status (the JSON of `rag status --json`)")
        async def status(request: Request):
            return await do_status(request, None)

        @app.post("/feedback", summary="A thumbs up or down on an answer (needs serve.log)")
        async def feedback(req: FeedbackRequest, request: Request):
            return await do_feedback(request, None, req)

    @app.get("/collections", summary="The collections this key may read: name, available, generation, scoped")
    async def collections(request: Request):
        return JSONResponse(served.listing(access_of(request)))

    @app.post("/c/{name}/search", summary="Search one query in collection NAME")
    async def c_search(name: str, req: SearchRequest, request: Request):
        return await do_search(request, name, req)

    @app.post("/c/{name}/ask", summary="Answer one question from collection NAME")
    async def c_ask(name: str, req: AskRequest, request: Request):
        return await do_ask(request, name, req)

    @app.get("/c/{name}/status", summary="The status of collection NAME (counted in the key's scope)")
    async def c_status(name: str, request: Request):
        return await do_status(request, name)

    @app.post("/c/{name}/feedback", summary="A thumbs up or down on an answer of collection NAME")
    async def c_feedback(name: str, req: FeedbackRequest, request: Request):
        return await do_feedback(request, name, req)

    @app.get("/healthz", summary="The server's state: the generation served, reloads, uptime")
    async def healthz(request: Request):
        return JSONResponse(served.health(access_of(request)))

    if mcp_server is not None:
        from rag_cli.serve.mcp_tools import http_routes

        app.router.routes.extend(http_routes(mcp_server, host, served.config.max_body))
    app.add_middleware(Guard, auth=auth, max_body=served.config.max_body, limits=limits)
    return app
