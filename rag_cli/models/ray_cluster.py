"""Connecting to a Ray cluster for `--ray [ADDRESS]`, and sizing the
embedding actors on it (`rag_cli.models.ray_encoder` runs them).

A light module: the CLI checks `--ray` values with it, and Ray itself is
imported only by `import_ray`, when `--ray` is used (a missing extra exits 2
naming `pip install 'rag-cli[ray]'`).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from rag_cli.errors import BadInput, WorkFailed

#: `--ray` given without an address: start a local Ray instance (and stop it afterwards).
LOCAL = "local"
LOOPBACK = "127.0.0.1"  # the address a local Ray instance (`ray_cluster(LOCAL)`) binds
RAY_MISSING = "--ray needs the ray extra: pip install 'rag-cli[ray]'"
#: What `--ray ADDRESS` takes besides `local`: `auto` (the cluster this
#: machine belongs to, as `ray start` left it), `ray://HOST:PORT` (Ray Client)
#: or `HOST:PORT` (the head node's GCS address).
ADDRESS = re.compile(r"auto|(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}")


def is_address(value: str) -> bool:
    """Whether `value` is a `--ray` address (`local`, `auto`, `ray://HOST:PORT`, `HOST:PORT`), not a path or a flag."""
    return value == LOCAL or ADDRESS.fullmatch(value) is not None


def import_ray():
    """The `ray` module with Ray Data, or BadInput (exit 2) naming the extra."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise BadInput(f"{RAY_MISSING} ({exc})") from None
    return ray


def check_address(address: str) -> str:
    """`address` as `ray.init` takes it: "" or `local` -> `local`; `auto`,
    `ray://HOST:PORT` or `HOST:PORT` as given.

    Raises:
        BadInput: anything else (naming --ray and what it takes).
    """
    address = (address or LOCAL).strip()
    forms = ("give no address (a local Ray instance), auto (the cluster of this machine), ray://HOST:PORT "
             "(Ray Client) or HOST:PORT (the head node's address)")
    if not is_address(address):
        raise BadInput(f"--ray {address!r}: {forms}")
    port = host_port(address)
    if port is not None and not 1 <= port[1] <= 65535:
        raise BadInput(f"--ray {address!r}: port {port[1]} is out of range (1-65535); {forms}")
    return address


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a `ray://HOST:PORT` or `HOST:PORT` address (an IPv6
    host without its brackets); None for `local` and `auto`."""
    if address in (LOCAL, "auto"):
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return host.strip("[]"), int(port)


#: Seconds `reachable` waits for a head node (or a Ray Client server) to accept a connection.
CONNECT_TIMEOUT = 5.0


def reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """For a `HOST:PORT` address (the head node's GCS) or `ray://HOST:PORT`
    (its Ray Client server): WorkFailed unless a TCP connection to it opens
    within `timeout` seconds. `ray.init` itself retries an unreachable GCS
    for half a minute or more, printing a log line per try, and Ray Client
    for about 40 s. `local` and `auto` are left to Ray."""
    import socket

    where = host_port(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except OSError as exc:
        if address.startswith("ray://"):
            what, hint = "no Ray Client server", " (its Ray Client server listens on port 10001)"
        else:
            what, hint = "no Ray head node", ""
        raise WorkFailed(f"--ray {address}: {what} answers there within {timeout:g}s ({exc}); start a head node "
                         f"with `ray start --head`{hint} or give its address") from None


@contextlib.contextmanager
def ray_cluster(address: str = LOCAL) -> Iterator[Any]:
    """Connect to the Ray cluster at `address` (`check_address`), or start a
    new local instance for `local` (all cores, bound to 127.0.0.1
    (`LOOPBACK`); never a cluster that
    `RAY_ADDRESS` or an earlier `ray start` names), for the time of the
    block, and shut it down (or disconnect) after; yields the `ray` module. A
    Ray already initialised in this process (a caller's `ray.init`) is used
    as it is and left running. Ray's own output (progress bars, log lines,
    the cluster's error messages) is kept off stdout and stderr (`_quiet`,
    `_driver_output_off`; RAG_DEBUG=1 leaves it), and SIGTERM keeps this
    process's handler (`_own_sigterm`).

    Raises:
        BadInput: a bad address, or the ray extra is missing.
        WorkFailed: no cluster answers at `address` (`reachable`), or Ray fails to start or connect.
        KeyboardInterrupt: Ctrl-C or SIGTERM while Ray starts (what it started is shut down).
    """
    address = check_address(address)
    ray = import_ray()
    if not ray.is_initialized():
        reachable(address)
    if ray.is_initialized():
        yield ray
        return
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    with _own_sigterm(), _quiet(ray) as opts:
        try:
            if address == LOCAL:
                # a local instance listens on loopback only: nothing off this machine reaches its GCS or raylet
                ray.init(address="local", include_dashboard=False, _node_ip_address=LOOPBACK, **opts)
            else:
                ray.init(address=address, **opts)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
            with contextlib.suppress(Exception):
                ray.shutdown()
            where = "start a local Ray instance" if address == LOCAL else f"connect to the Ray cluster at {address}"
            raise WorkFailed(f"--ray {address}: cannot {where} ({str(exc).strip().splitlines()[0]})") from None
        except BaseException:  # Ctrl-C, or SIGTERM by Ray's handler (SystemExit 15): what Ray started goes
            with contextlib.suppress(Exception):
                ray.shutdown()
            raise
    with _driver_output_off(ray):
        try:
            yield ray
        finally:
            ray.shutdown()


def _debug() -> bool:
    """RAG_DEBUG=1: Ray's own log lines are printed as Ray prints them."""
    import os

    return bool(os.environ.get("RAG_DEBUG"))


@contextlib.contextmanager
def _quiet(ray) -> Iterator[dict[str, Any]]:
    """For the time of `ray.init` (unless RAG_DEBUG): Ray's Python loggers at
    CRITICAL (its token-authentication and client warnings, Ray Data's errors,
    which reach rag-cli as exceptions), the C++ log level of
    this process's core worker and of the processes Ray starts at `fatal`
    (`RAY_BACKEND_LOG_LEVEL`, read when each starts: no `core_worker.cc` or
    `gcs_client.cc` lines), Python warnings ignored, and workers' output not
    sent to this process (`log_to_driver=False`). The one line Ray's C++ logging
    prints whatever its level (`logging.cc: Set ray log level from environment
    variable ...`) is dropped: what reaches file descriptor 2 during the block
    is held in a temporary file and written out after it without the lines of
    Ray's C++ log format (`_RAY_LOG_LINE`). Yields the `ray.init` keyword
    arguments; Ray Data's loggers are set to the same level after."""
    import logging
    import os
    import warnings

    debug = _debug()
    level = logging.WARNING if debug else logging.CRITICAL
    logging.getLogger("ray").setLevel(level)
    opts = {"log_to_driver": False, "logging_level": level, "configure_logging": True}
    saved = os.environ.get("RAY_BACKEND_LOG_LEVEL")
    if not debug and saved is None:
        os.environ["RAY_BACKEND_LOG_LEVEL"] = "fatal"
    try:
        with warnings.catch_warnings(), (contextlib.nullcontext() if debug else _fd2_without_ray_lines()):
            if not debug:
                warnings.simplefilter("ignore")
            yield opts
    finally:
        if saved is None:
            os.environ.pop("RAY_BACKEND_LOG_LEVEL", None)
        logging.getLogger("ray.data").setLevel(level)  # Ray Data sets its own level at init
        logging.getLogger("ray.data._internal.progress").setLevel(max(level, logging.ERROR))  # "progress bars off"


#: A line of Ray's C++ logging: `[2026-01-02 10:11:12,345 I 123 456] file.cc:78: message`.
_RAY_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\] ")


@contextlib.contextmanager
def _fd2_without_ray_lines() -> Iterator[None]:
    """File descriptor 2 (stderr, Python's and C++'s) goes to a temporary
    file for the time of the block; then it is restored and what the file
    got is written to it without Ray's C++ log lines (`_RAY_LOG_LINE`)."""
    import os
    import sys
    import tempfile

    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        kept = b"".join(line for line in held.read().splitlines(keepends=True) if not _RAY_LOG_LINE.match(line))
        held.close()
        if kept:
            os.write(2, kept)


@contextlib.contextmanager
def _driver_output_off(ray) -> Iterator[None]:
    """While connected (unless RAG_DEBUG): Ray's error listener prints the
    cluster's error messages (`(raylet) Task ... failed`, in colour) to this
    process's stdout even with `log_to_driver=False`; stdout is rag-cli's
    (`--json`). `ray._private.worker._worker_logs_enabled` is the switch Ray's
    own debugger (`ray.util.rpdb`) turns them off with; restored after."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if _debug() or not hasattr(worker, "_worker_logs_enabled"):
        yield
        return
    worker._worker_logs_enabled = False
    try:
        yield
    finally:
        worker._worker_logs_enabled = True


@contextlib.contextmanager
def _own_sigterm() -> Iterator[None]:
    """Keep this process's SIGTERM handler (the CLI's: unwind like Ctrl-C,
    exit 130 with the previous files intact) across `ray.init`, which
    replaces it twice: by a Python handler that exits 15 (set while it
    starts: turned into KeyboardInterrupt here), and by the C++ core
    worker's failure-signal handler, which prints a stack dump and ends the
    process. The handler found before the block is installed again after
    it (from the main thread only, where Python allows it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as exc:
        if exc.code == signal.SIGTERM and previous not in (None, signal.SIG_DFL, signal.SIG_IGN):
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@dataclass(frozen=True)
class ActorPlan:
    """How many embedding actors run, and what each holds: `threads`
    (onnxruntime batches at once), `num_cpus` and `num_gpus` (the Ray
    resources it asks for)."""

    actors: int
    threads: int
    num_cpus: float
    num_gpus: float


def actor_plan(node_cpus: Sequence[float], threads: int = 0, gpus: float = 0, on_gpu: bool = False) -> ActorPlan:
    """Size the actors from the cluster: on the CPU, `threads` per actor (0:
    the CPUs of the smallest node) and as many actors as fit on each node;
    `on_gpu`, one actor per GPU (one CPU each).

    Args:
        node_cpus: the CPUs of each alive node (Ray's `CPU` resource).
        threads: config model.threads (`--threads`): batches at once per actor; 0 = by the nodes.
        gpus: the cluster's GPUs (Ray's `GPU` resource).
        on_gpu: the model runs on a GPU provider (`--provider cuda`).

    Raises:
        BadInput: no node has `threads` CPUs, or `on_gpu` and the cluster has no GPU.
    """
    cpus = [int(c) for c in node_cpus if c >= 1]
    if on_gpu:
        if gpus < 1:
            raise BadInput("--provider cuda with --ray: the Ray cluster has no GPU (Ray's GPU resource is 0); "
                           "use --provider cpu")
        return ActorPlan(int(gpus), 1, 1, 1)
    if not cpus:
        raise BadInput("--ray: the Ray cluster has no node with a CPU to run the model on")
    per = int(threads) if threads else min(cpus)
    actors = sum(c // per for c in cpus)
    if actors == 0:
        raise BadInput(f"--threads {threads} with --ray: no node of the Ray cluster has {threads} CPUs (the largest "
                       f"has {max(cpus)}); use --threads {max(cpus)} or less, or 0 (by the nodes)")
    return ActorPlan(actors, per, per, 0)


def cluster_plan(ray, threads: int = 0, on_gpu: bool = False) -> ActorPlan:
    """`actor_plan` for the cluster `ray` is connected to (its alive nodes)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
    return actor_plan([n.get("Resources", {}).get("CPU", 0) for n in nodes], threads, gpus, on_gpu)
