"""Reaching Milvus: URIs, one client per URI, and what each way of not reaching it says.

The `milvus` backend (`rag_cli.index.milvus`, `rag_cli.index.milvus_publish`) asks this module for a
client and for a collection ready to search; everything about *where* Milvus is lives here:

- URIs: `http://` / `https://` (also `tcp://` and `unix:`, the other schemes pymilvus connects with)
  name a server or cluster, used unchanged (a token, if any, from $MILVUS_TOKEN); a path ending in .db
  is a local folder run by Milvus Lite in this process (`resolve_uri`: relative to the project folder).
  Any other `scheme://` (grpc://, ftp://, ...) is BadInput naming --uri and the accepted forms, before
  anything is created (it is neither: pymilvus refuses it, and as a path it would make a folder `ftp:`).
- A server that does not answer within `CONNECT_TIMEOUT` seconds is WorkFailed (exit 1: a service that
  is down is a failure of the work, not bad input), naming the URI and what to check. Only the
  connection is bounded: once connected, a request to a server that then goes away is retried by
  pymilvus (its `retry_on_rpc_failure`) before it fails.
- A Milvus Lite file that another process holds (Milvus Lite serves one process: an advisory `flock`
  on the folder's LOCK file) is WorkFailed (exit 1: a busy resource) naming the file and the process
  that holds it (`lite_holders`: from /proc/locks where the system has it), for every command.
- A Milvus Lite file that does not exist is BadInput (exit 2) for a read (`client(create=False)`:
  search, serve, the alias switch of a rollback): the generation names a file that was deleted or
  moved, as a missing file of a generation folder is bad input; the message says to run `rag index`.
  A read never creates the file (Milvus Lite would create an empty one); only a publish does.
- pymilvus logs a failure at ERROR level (and Milvus Lite logs a busy file with a traceback) before
  raising it; rag-cli's own message, which carries the exception's text, is the one printed: their
  loggers are quieted when pymilvus is first imported (`quiet_logs`; not with RAG_DEBUG set).
- pymilvus is imported only here, and only when the backend is used; a missing package is BadInput
  (exit 2) naming `pip install 'rag-cli[milvus]'`.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import re
import threading
from pathlib import Path

from rag_cli.errors import BadInput, WorkFailed

#: What a missing pymilvus (or milvus-lite for a file URI) says (exit 2).
MILVUS_MISSING = ("index.backend 'milvus' needs the milvus extra: pip install 'rag-cli[milvus]' (pymilvus, and "
                  "milvus-lite for a local file --uri); or choose --backend hnswlib, faiss or exact")
#: Seconds to wait for a Milvus server to answer before the command fails (pymilvus's own default is 10).
CONNECT_TIMEOUT = 5.0
#: The collection properties that name a published collection's owner: the resolved project folder that
#: published it, and the generation's random token (rag_dense.json `token`).
OWNER, TOKEN = "rag_cli.owner", "rag_cli.token"
#: The loggers quieted by `quiet_logs` (pymilvus configures the first two with handlers of their own).
QUIET_LOGGERS = ("pymilvus", "pymilvus.milvus_client", "milvus_lite")
#: What to do about a Lite file another process holds.
_BUSY_FIX = ("Milvus Lite serves one process at a time: stop that process (a `rag serve` of this project holds "
             "the file while it runs), or serve the project from a Milvus server (--uri http://host:19530)")
#: The server URIs pymilvus connects to (its `ConnectionManager`: http, https, tcp in any case; `unix:` as is).
_SERVER = re.compile(r"^((?i:https?|tcp)://|unix:)")
#: Any other scheme: neither a server pymilvus reaches nor a local path.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: The accepted forms of --uri, as messages give them.
URI_FORMS = ("a local path ending in .db (Milvus Lite), or a Milvus server as http://host:19530 or https://host "
             "(also tcp://host:19530 or unix:/path/to/socket)")


# --------------------------------------------------------------------------- names
def is_server(uri: str) -> bool:
    """Whether `uri` names a Milvus server (http://, https://, tcp://, unix:), not a Lite file."""
    return bool(_SERVER.match(uri))


def resolve_uri(uri: str, root: Path) -> str:
    """`index.uri` made concrete: a server URI unchanged; "" -> `root`/milvus.db; a relative file path
    relative to `root` (the project folder), made absolute. Raises BadInput for another `scheme://`
    (`URI_FORMS`) and for a file path that does not end in .db (the name Milvus Lite takes)."""
    if is_server(uri):
        return uri
    if _SCHEME.match(uri):
        raise BadInput(f"--uri {uri}: the scheme {uri.split('://')[0]}:// is not one Milvus is reached with; give "
                       f"{URI_FORMS}")
    path = Path(uri or "milvus.db").expanduser()
    if path.suffix != ".db":
        raise BadInput(f"--uri {uri}: a Milvus Lite file must end in .db (like {path.with_suffix('.db')}); "
                       "a server is http://host:19530")
    return str((path if path.is_absolute() else Path(root) / path).absolute())


def given_uri(uri: str) -> str:
    """`index.uri` as rag_dense.json records it: a server URI unchanged, "" -> `milvus.db`, a file path
    as given (a relative one stays relative: `resolve_uri` makes it absolute against the project folder
    where it is used, so a moved or copied project opens its own file). BadInput as `resolve_uri`."""
    if is_server(uri):
        return uri
    resolve_uri(uri, Path("."))  # the .db check
    return str(Path(uri or "milvus.db").expanduser())


def default_alias(root: Path) -> str:
    """`rag_` + the first 12 hex digits of the sha256 of the project folder's absolute path: an alias that
    two projects on one Milvus do not share."""
    return "rag_" + hashlib.sha256(str(Path(root).absolute()).encode()).hexdigest()[:12]


def collection_of(alias: str, generation: str) -> str:
    """The collection of generation `generation` (`gen-000007`): `ALIAS_gen_000007`."""
    return f"{alias}_{generation.replace('-', '_')}"


# --------------------------------------------------------------------------- pymilvus
def import_pymilvus(missing: str = MILVUS_MISSING):
    """The pymilvus module (its logging quieted: `quiet_logs`), or BadInput (exit 2) with `missing`."""
    try:
        import pymilvus
    except ImportError as exc:
        raise BadInput(f"{missing} ({exc})") from None
    quiet_logs()
    return pymilvus


def quiet_logs() -> None:
    """Silence the loggers of pymilvus and Milvus Lite (`QUIET_LOGGERS`): every failure they log is also
    raised, and rag-cli's message (which names the URI and carries the exception's text) is the one
    printed. Left as they are when $RAG_DEBUG is set."""
    if os.environ.get("RAG_DEBUG"):
        return
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


# --------------------------------------------------------------------------- Milvus Lite files
def lite_holders(folder: Path) -> list[int] | None:
    """The ids of the other processes holding the Milvus Lite lock of `folder` (its LOCK file), read from
    /proc/locks without taking the lock; [] when none does; None when this system cannot tell (no
    /proc/locks)."""
    try:
        st = os.stat(Path(folder) / "LOCK")
    except OSError:
        return []  # no LOCK file: never opened, so nobody holds it
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    out = []
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 9791 fe:00:2146324 0 EOF" (major:minor in hex)
        fields = line.split()
        if "->" in fields or len(fields) < 6:  # a process waiting for a lock, not holding one
            continue
        try:
            major, minor, ino = fields[5].split(":")
            pid, where = int(fields[4]), (int(major, 16), int(minor, 16), int(ino))
        except ValueError:
            continue
        if where == want and pid != os.getpid() and pid not in out:
            out.append(pid)
    return out


def lite_busy(folder: Path) -> bool:
    """Whether another process holds the Milvus Lite lock of `folder` (an immediate try of its `flock`,
    released at once; False where flock does not exist)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(Path(folder) / "LOCK", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def describe_process(pid: int) -> str:
    """`pid 123 (python -m rag_cli serve -p ...)`: the process's command line where /proc has it."""
    try:
        cmd = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        cmd = ""
    if len(cmd) > 200:
        cmd = cmd[:197] + "..."
    return f"pid {pid} ({cmd})" if cmd else f"pid {pid}"


def busy(uri: str, pids: list[int] | None) -> WorkFailed:
    """WorkFailed (exit 1) for the Lite file `uri` held by the processes `pids` (unknown when empty or None)."""
    who = ", ".join(describe_process(p) for p in pids) if pids else "another process"
    return WorkFailed(f"the Milvus Lite file {uri} is in use by {who}; {_BUSY_FIX}. Nothing was changed")


def missing_lite_file(uri: str) -> BadInput:
    """BadInput (exit 2) for a read of the Lite file `uri` that does not exist."""
    return BadInput(f"the Milvus Lite file {uri} does not exist (deleted or moved?): the index's collections "
                    "were in it; run `rag index` to publish the current chunks and embeddings to it again (or "
                    "put the file back). Nothing was created")


def failed(what: str, uri: str, exc: Exception) -> WorkFailed:
    """WorkFailed (exit 1) for the step `what` of a request to Milvus at `uri` that raised `exc`."""
    return WorkFailed(f"Milvus at {uri}: {what} failed ({type(exc).__name__}: {exc})")


def _check_lite(uri: str, create: bool) -> None:
    """Before a Lite file `uri` is opened: BadInput when it is missing (unless `create`: then its folder is
    made) or is not a folder; WorkFailed when another process holds it (`lite_holders`)."""
    path = Path(uri)
    if not path.exists():
        if not create:
            raise missing_lite_file(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    if not path.is_dir():
        raise BadInput(f"{uri} is a file, but Milvus Lite 3 keeps its data in a folder of that name; move the "
                       "file away and run `rag index`, or give another --uri")
    if pids := lite_holders(path):
        raise busy(uri, pids)


# --------------------------------------------------------------------------- clients
_clients: dict[str, object] = {}
_loaded: set[tuple[str, str]] = set()
_lock = threading.Lock()


def client(uri: str, *, create: bool = False):
    """The `pymilvus.MilvusClient` of `uri`, one per URI per process (a Milvus Lite file is opened once: it
    serves one process), closed at exit (`close_clients`). A Lite file is created only with `create`
    (a publish); a read of one that does not exist is BadInput and creates nothing.

    Raises BadInput when pymilvus (or milvus-lite for a file) is missing, or the Lite file is missing or
    not a folder; WorkFailed when a server does not answer within CONNECT_TIMEOUT seconds, or another
    process holds the Lite file, naming the URI and what to check."""
    with _lock:
        if uri in _clients:
            return _clients[uri]
        pymilvus = import_pymilvus()
        server = is_server(uri)
        if not server:
            try:
                import milvus_lite  # noqa: F401
            except ImportError as exc:
                raise BadInput(f"--uri {uri} is a local file, which needs Milvus Lite: {MILVUS_MISSING} "
                               f"({exc}); or give a server URI like http://127.0.0.1:19530") from None
            _check_lite(uri, create)
        # Milvus Lite's in-process gRPC server answers pymilvus's 10 s keep-alive pings with GOAWAY
        # ("too_many_pings", logged to stderr): on a loopback channel they serve nothing, so they are off
        extra = {"timeout": CONNECT_TIMEOUT} if server else {
            "grpc_options": {"grpc.keepalive_time_ms": 3_600_000, "grpc.keepalive_permit_without_calls": 0}}
        try:
            c = pymilvus.MilvusClient(uri=uri, token=os.environ.get("MILVUS_TOKEN", ""), **extra)
        except Exception as exc:  # noqa: BLE001 - pymilvus raises its own MilvusException, or OSError
            raise _not_connected(uri, exc) from exc
        _clients[uri] = c
        return c


def _not_connected(uri: str, exc: Exception) -> WorkFailed:
    """What a failed connection to `uri` says (exit 1)."""
    why = f"{type(exc).__name__}: {exc}"
    if is_server(uri):
        return WorkFailed(f"cannot reach the Milvus server at {uri} (index.uri, --uri) within {CONNECT_TIMEOUT:g} s "
                          f"({why}); check that Milvus is running and listening there (host, port, http:// or "
                          "https://), that this machine can reach it, and $MILVUS_TOKEN if it needs a token")
    if lite_busy(Path(uri)):  # taken by another process since `_check_lite` looked
        return busy(uri, lite_holders(Path(uri)))
    return WorkFailed(f"cannot open the Milvus Lite file {uri} ({why}); check that it is a folder Milvus Lite 3 "
                      "wrote and that this user can write to it")


def close_clients() -> None:
    """Close every Milvus client of this process and stop the Milvus Lite servers it started (which
    releases each .db file's lock, so another process can open it)."""
    with _lock:
        for uri, c in _clients.items():
            try:
                c.close()
                if not is_server(uri):
                    from milvus_lite.server_manager import server_manager_instance

                    server_manager_instance.release_server(uri)
            except Exception:  # noqa: BLE001 - closing at exit: nothing left to tell
                pass
        _clients.clear()
        _loaded.clear()


def forget(uri: str, collection: str) -> None:
    """`collection` of `uri` is no longer loaded (dropped, or about to be replaced)."""
    _loaded.discard((uri, collection))


def mark_loaded(uri: str, collection: str) -> None:
    """`collection` of `uri` was loaded by this process (a publish loads what it built)."""
    _loaded.add((uri, collection))


def properties(c, name: str) -> dict:
    """The properties of the collection `name` ({} when it has none)."""
    return dict(c.describe_collection(name).get("properties") or {})


def loaded(uri: str, collection: str, token: str | None = None):
    """The client of `uri` with `collection` loaded (`load_collection` once per process: a collection of
    a Milvus Lite file opened anew, or released on a server, cannot be searched before). With `token`
    (the generation's rag_dense.json `token`), the collection must carry it (`TOKEN`): else it was
    replaced by another project's publish and BadInput says to run `rag index` (no foreign rows are
    ever returned as this generation's).

    Raises what `client` raises (a read: a missing Lite file is BadInput); BadInput when the collection
    does not exist (dropped, or the Lite file replaced); WorkFailed when Milvus fails to answer."""
    c = client(uri)
    if (uri, collection) in _loaded:
        return c
    try:
        exists = c.has_collection(collection)
        props = properties(c, collection) if exists else {}
    except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
        raise failed(f"reading the collection {collection}", uri, exc) from exc
    if not exists:
        raise BadInput(f"Milvus at {uri} has no collection {collection} (dropped, or the Milvus Lite file was "
                       "replaced); run `rag index` to publish the current chunks and embeddings again")
    if token and props.get(TOKEN) != token:
        owner = props.get(OWNER) or "unknown"
        raise BadInput(f"the collection {collection} at {uri} is not this generation's: it was replaced by "
                       f"another project (published by {owner}); run `rag index` to publish this project "
                       "again (with its own --collection if the other project keeps this one)")
    try:
        c.load_collection(collection)
    except Exception as exc:  # noqa: BLE001 - pymilvus's MilvusException and gRPC errors
        raise WorkFailed(f"Milvus at {uri} cannot load the collection {collection} ({type(exc).__name__}: "
                         f"{exc}); publish the generation again with `rag index`") from exc
    _loaded.add((uri, collection))
    return c


atexit.register(close_clients)
