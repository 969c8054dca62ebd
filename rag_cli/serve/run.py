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


def serve(project=None, *, collections=(), server_file=None, keys=None, check: bool = False, mcp: str = "http",
          say: Callable[[str], None] | None = None, **options) -> list[str] | None:
    """Serve `project` (a `Project`), or collections, until SIGTERM or Ctrl-C.

    `collections`: `--collection NAME=DIR` values; `server_file`: a serve.toml (`rag_cli.serve.server_file`:
    the collections, [server] settings, optionally the keys); either, not both (without them `project` is
    served alone, as before). `keys`: a key file (keys.toml; scoped keys, reloaded on SIGHUP or when it
    changes). `check`: validate the collections and the keys, serve nothing, and return the notes.
    `options`: [serve] keys (host, port, api_key_env, log, max_k, max_body, max_concurrent, query_graph,
    reload_poll; None = the server file's, else rag.toml's); `mcp`: "http" (MCP at /mcp of the HTTP server),
    "stdio" (MCP on stdin/stdout, no HTTP), or "none"; `say(message)` gets the notes (the address, reloads).

    Raises BadInput (exit 2) for a bad option, server file or key file (naming the line), a host other than
    loopback without a key, or (one project) no usable index; WorkFailed when the address cannot be bound.
    A missing FastAPI, uvicorn or mcp is BadInput naming the `serve` extra. A collection whose index cannot
    be loaded is served as unavailable (503), the others as usual.
    """
    from rag_cli.project import Project
    from rag_cli.serve.access import KeyRing
    from rag_cli.serve.server_file import (CollectionSpec, check_collections, collection_options, read_key_file,
                                           read_server_file)

    if mcp not in MCP_TRANSPORTS:
        raise BadInput(f"--mcp {mcp!r}: use one of {', '.join(MCP_TRANSPORTS)}")
    if collections and server_file is not None:
        raise BadInput("give the collections either with --collection or in --server-file, not both")
    given = {k: v for k, v in options.items() if v is not None}
    fixed_keys = None
    multi = bool(collections) or server_file is not None
    if server_file is not None:
        sf = read_server_file(server_file)
        specs, given = sf.collections, {**sf.server, **given}
        fixed_keys = sf.keys
        if keys is not None and (sf.keys_path is not None or sf.keys is not None):
            raise BadInput(f"--keys {keys}: the server file {server_file} gives the keys already")
        keys = keys if keys is not None else sf.keys_path
    elif collections:
        specs = collection_options(collections)
    else:
        specs = [CollectionSpec(project.root.name or "project", project.root)]
    say = say or (lambda message: None)
    if check:
        keyset = read_key_file(keys) if keys is not None else fixed_keys
        return check_collections(specs, keyset)
    first = Project.open(specs[0].folder) if multi else project
    config = first.folder.with_options("serve", given).serve
    ring = None
    if keys is not None or fixed_keys is not None:
        names = [s.name for s in specs]
        ring = KeyRing(keys, fixed_keys, served=names, say=say)
        if fixed_keys is not None:
            for key in fixed_keys.keys:
                unknown = [c for c in (key.access.collections or {}) if c not in names]
                if unknown:
                    raise BadInput(f"{key.where}: key {key.name!r} names the collection {unknown[0]!r}, which is "
                                   f"not served (served: {', '.join(names)})")
    key = api_key(config) if mcp != "stdio" and (ring is None or config.api_key_env) else None
    if ring is not None:
        ring.api_key = key
    _require_extra(mcp)
    if not multi:
        project.folder.require_exists()

    from rag_cli.serve.collections import Served
    from rag_cli.serve.service import Service
    from rag_cli.serve.warm import SharedModels

    shared = SharedModels()
    services: dict = {}
    try:
        for spec in specs:
            p = Project.open(spec.folder) if multi else project
            cconfig = p.folder.with_options("serve", {**given, **spec.options}).serve if multi else config
            services[spec.name] = Service(p, cconfig, say, shared=shared, name=spec.name if multi else None)
            services[spec.name].open(tolerate=multi)
        served = Served(services, config, multi=multi, shared=shared, keyring=ring)
        if mcp == "stdio":
            from rag_cli.serve.mcp_tools import create_mcp, run_stdio

            what = _what(served)
            say(f"serving {what.replace(' (index', ' over MCP on stdio (index', 1)}" if not multi else
                f"serving {what} over MCP on stdio")
            with contextlib.suppress(KeyboardInterrupt):
                run_stdio(create_mcp(served))
            return None
        _serve_http(served, config, key, ring, mcp, say)
    finally:
        for service in services.values():
            service.close()
    return None


def _what(served) -> str:
    if not served.multi:
        service = served.only()
        return f"{service.p.root} (index {service.generation})"
    return "collections " + ", ".join(f"{n} ({s.generation or 'unavailable'})" for n, s in served.services.items())


@contextlib.contextmanager
def _key_reloads(ring, poll: float) -> Iterator[None]:
    """While the block runs: SIGHUP reloads the key file of `ring`, and a thread reloads it when it changes
    (every `poll` s). Nothing without a key file."""
    import threading

    if ring is None or ring.path is None:
        yield
        return
    stop = threading.Event()

    def watch():
        while not stop.wait(poll):
            ring.poll()

    thread = threading.Thread(target=watch, name="rag-keys", daemon=True)
    previous = signal.signal(signal.SIGHUP, lambda *_: ring.reload()) if hasattr(signal, "SIGHUP") else None
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        if previous is not None:
            signal.signal(signal.SIGHUP, previous)


def _serve_http(served, config, key: str | None, ring, mcp: str, say) -> None:
    import uvicorn

    from rag_cli.serve.app import create_app, single_key

    mcp_server = None
    if mcp == "http":
        from rag_cli.serve.mcp_tools import create_mcp

        mcp_server = create_mcp(served)
    from rag_cli.serve.protocol import KEEP_ALIVE_TIMEOUT, Limits, protocol_class

    limits = Limits(max_connections=config.max_concurrent * 16 + 64)
    auth = ring.authenticate if ring is not None else single_key(key)
    app = create_app(served, auth=auth, mcp_server=mcp_server, host=config.host, limits=limits)
    sock = _listen(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    needs = "; API key required" if key and ring is None else \
        f"; {len(ring.keys) + (key is not None)} keys" if ring is not None else ""
    logs = "; logging to logs/" if any(s.config.log for s in served.services.values()) else ""
    notes = f"{'; MCP at /mcp' if mcp_server is not None else ''}{needs}{logs}"
    if served.multi:
        names = ", ".join(f"{n} ({s.generation or 'unavailable'})" for n, s in served.services.items())
        say(f"serving collections {names} on http://{shown}:{port} ({notes.lstrip('; ') or 'no MCP'})")
    else:
        service = served.only()
        say(f"serving {service.p.root} on http://{shown}:{port} (index {service.generation}{notes})")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=30, http=protocol_class(limits),
                                           timeout_keep_alive=KEEP_ALIVE_TIMEOUT))
    with _stopped_by_signals(), _key_reloads(ring, min(config.reload_poll, 1.0)):
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
