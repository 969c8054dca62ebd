"""`serve(project, ...)`: check the [serve] settings, load the project,
then serve it over HTTP (uvicorn) or MCP on stdio until SIGTERM or Ctrl-C
(exit 0 after a graceful shutdown: requests in flight finish, the logs
are written)."""

from __future__ import annotations

import contextlib
import signal
import socket
from typing import Callable, Iterator

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.serve.access import api_key

MCP_TRANSPORTS = ("http", "stdio", "none")


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGINT do nothing of their own while the server runs
    (uvicorn catches them to shut down gracefully, then raises them again,
    which must not turn a clean stop into an error); restored after."""
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _listen(host: str, port: int) -> socket.socket:
    """A bound, listening socket. Raises WorkFailed naming the address when it is taken or not ours."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that say they are
    # TCP; with it on, a response written in two parts waited for the client's delayed ACK, 40 ms per request
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by the accepted sockets
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise WorkFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(project, *, mcp: str = "http", say: Callable[[str], None] | None = None, **options) -> None:
    """Serve `project` (a `Project`) until SIGTERM or Ctrl-C.

    `options`: [serve] keys (host, port, api_key_env, log, max_k, max_body,
    max_concurrent, query_graph, reload_poll; None = rag.toml's); `mcp`: "http" (MCP at
    /mcp of the HTTP server), "stdio" (MCP on stdin/stdout, no HTTP), or
    "none"; `say(message)` gets the notes (the address, reloads).

    Raises BadInput (exit 2) for a bad option, a host other than loopback
    without an API key, or no usable index; WorkFailed when the address
    cannot be bound. A missing FastAPI, uvicorn or mcp is BadInput naming
    the `serve` extra.
    """
    if mcp not in MCP_TRANSPORTS:
        raise BadInput(f"--mcp {mcp!r}: use one of {', '.join(MCP_TRANSPORTS)}")
    config = project.folder.with_options("serve", options).serve
    key = api_key(config) if mcp != "stdio" else None
    _require_extra(mcp)
    project.folder.require_exists()
    say = say or (lambda message: None)

    from rag_cli.serve.service import Service

    service = Service(project, config, say).open()
    try:
        if mcp == "stdio":
            from rag_cli.serve.mcp_tools import create_mcp, run_stdio

            say(f"serving {project.root} over MCP on stdio (index {service.generation})")
            with contextlib.suppress(KeyboardInterrupt):
                run_stdio(create_mcp(service))
            return
        _serve_http(service, config, key, mcp, say)
    finally:
        service.close()


def _serve_http(service, config, key: str | None, mcp: str, say) -> None:
    import uvicorn

    from rag_cli.serve.app import create_app

    mcp_server = None
    if mcp == "http":
        from rag_cli.serve.mcp_tools import create_mcp

        mcp_server = create_mcp(service)
    from rag_cli.serve.protocol import KEEP_ALIVE_TIMEOUT, Limits, protocol_class

    limits = Limits(max_connections=config.max_concurrent * 16 + 64)
    app = create_app(service, api_key=key, mcp_server=mcp_server, host=config.host, limits=limits)
    sock = _listen(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    say(f"serving {service.p.root} on http://{shown}:{port} (index {service.generation}"
        f"{'; MCP at /mcp' if mcp_server is not None else ''}{'; API key required' if key else ''}"
        f"{'; logging to logs/' if config.log else ''})")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=30, http=protocol_class(limits),
                                           timeout_keep_alive=KEEP_ALIVE_TIMEOUT))
    with _stopped_by_signals():
        server.run(sockets=[sock])
    say("stopped")


def _require_extra(mcp: str) -> None:
    """ImportError naming the `serve` extra unless its packages are installed."""
    needed = ["fastapi", "uvicorn"] if mcp != "stdio" else []
    needed += ["mcp"] if mcp != "none" else []
    missing = []
    for name in needed:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise BadInput(f"`rag serve` needs {', '.join(missing)}: pip install 'rag-cli[serve]'")
