"""`Service`: what the HTTP and the MCP front ends call. It owns the warm
project (`WarmEngines`: one loaded generation, swapped on reload), checks
the server's limits, runs each request on one pinned generation, and
records it in the query log. It knows nothing of HTTP: errors are the
library's (`BadInput`, `WorkFailed`) or `TooLarge`, and `http_status`
maps them to a status code.

Every method runs synchronously in the caller's thread (the front ends call
it from a thread pool): onnxruntime, hnswlib and numpy release the GIL, so
the threads of one process share one loaded index and one copy of the
models.
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rag_cli.errors import BadInput, RagError, WorkFailed
from rag_cli.json_shapes import ask_json, json_safe, search_json
from rag_cli.serve.requests import AskRequest, FeedbackRequest, SearchRequest
from rag_cli.serve.warm import WarmEngines

#: Hybrid candidates per retriever a request may ask for (the cost of a search grows with it).
MAX_CANDIDATES = 1000

#: What a warm-up search asks before the first request (the CJK part loads jieba's dictionary).
WARM_UP = "warm up 预热"


class FieldError(BadInput):
    """A request value outside the server's limits; `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class TooLarge(BadInput):
    """A request body over serve.max_body bytes (HTTP 413)."""


class NotFound(BadInput):
    """No collection of that name that the request's key may read (HTTP 404: the same for a collection that
    does not exist and for one the key may not see, so its name is not revealed)."""


class Unavailable(WorkFailed):
    """A collection whose index cannot be loaded (damaged, missing) while the others are served (HTTP 503)."""


def http_status(exc: BaseException) -> int:
    """The HTTP status of an error: 413 too large, 404 no such collection, 400 bad input, 503 a collection
    that cannot be loaded, 500 anything else (the work failed: a generator server down, a broken model)."""
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, BadInput):
        return 400
    if isinstance(exc, Unavailable):
        return 503
    return 500


def error_message(exc: BaseException) -> str:
    """The message a client gets: the library's for its errors, else the exception's type and text."""
    return str(exc) if isinstance(exc, RagError) else f"{type(exc).__name__}: {exc}"


@dataclass
class Reply:
    """A search's or an answer's JSON (`data`, as the CLI's `--json`), the
    index generation that produced it, and the id feedback refers to."""

    data: dict
    generation: str
    answer_id: str


class Service:
    """The served project (one collection). `Service(project, config, say=None, shared=None, name=None)`:
    `config` is the [serve] config (`ServeConfig`); `say(message)` gets the server's notes (a reload, a log
    that cannot be written); `shared` the server's `SharedModels` (bi-encoders shared by fingerprint across
    collections); `name` the collection's name. `open()` loads the index (BadInput when there is none;
    with `tolerate`, the error is kept in `open_error` and the collection answers 503 until a reload loads
    it) and starts the reload thread and the logs; `close()` stops them, writing what the logs hold.

    Every request method takes `scope`: the fixed filter of the request's key for this collection
    (expressions, AND; () = none), applied inside the search (`WarmEngines.scoped`)."""

    def __init__(self, project, config, say: Callable[[str], None] | None = None, shared=None,
                 name: str | None = None):
        self.p = project
        self.config = config
        self.name = name or project.root.name
        self.say = say or (lambda message: None)
        self.engines = WarmEngines(project.folder, poll=config.reload_poll, query_graph=config.query_graph,
                                   shared=shared)
        project.engines = self.engines  # every library call of this project now takes the pinned searcher
        self.open_error: str | None = None
        prefix = f"{name}: " if name else ""
        self.engines.on_reload = lambda old, new: self.say(f"{prefix}serving {new} (was {old})")
        self.queries = self.feedbacks = None
        self.started = time.time()
        self._counter = itertools.count(1)
        self._limiter = None
        self.n_requests = 0

    # -- life --------------------------------------------------------------------------
    def open(self, tolerate: bool = False) -> "Service":
        from rag_cli.store.query_log import LogWriter

        try:
            with self.engines.pinned():
                self.p.search(WARM_UP, mode="hybrid", k=1)  # the first request finds every model and table loaded
        except Exception as exc:  # noqa: BLE001 - with tolerate: kept, told, answered as 503
            if not tolerate:
                raise
            self.engines.served = None
            self.open_error = error_message(exc)
            self.say(f"{self.name}: cannot be served until its index loads: {self.open_error}")
        self.engines.start()
        if self.config.log:
            self.queries = LogWriter(self.p.root, "queries", on_error=self.say).start()
            self.feedbacks = LogWriter(self.p.root, "feedback", flush_rows=1, on_error=self.say).start()
        return self

    def close(self) -> None:
        self.engines.stop()
        for writer in (self.queries, self.feedbacks):
            if writer is not None:
                writer.close()  # a failure is told through its on_error

    async def in_thread(self, fn, *args):
        """`fn(*args)` in a worker thread, at most serve.max_concurrent at once (the front ends' way to call)."""
        import functools

        import anyio

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.config.max_concurrent)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._limiter)

    @property
    def generation(self) -> str | None:
        """The generation new requests get (`gen-000007`); None while none could be loaded."""
        served = self.engines.served
        return served.index_dir.name if served is not None else None

    @property
    def available(self) -> bool:
        """False for a collection whose index could not be loaded at `open(tolerate=True)` and has not been
        loaded since (a Service not opened loads on its first request, as before)."""
        return self.engines.served is not None or self.open_error is None

    def require_available(self) -> None:
        """Unavailable (503) while no generation is loaded; the reason leaves the folders out."""
        if not self.available:
            reason = without_paths(self.engines.reload_error or self.open_error, self.p.root)
            raise Unavailable(f"the collection {self.name!r} cannot be served now (its index cannot be loaded; "
                              f"the server retries): {reason}")

    # -- requests ------------------------------------------------------------------------
    def _limits(self, options: dict) -> None:
        k, cand = options.get("k"), options.get("candidates")
        if k is not None and k > self.config.max_k:
            raise FieldError("k", f"k {k}: at most {self.config.max_k} per request (the server's serve.max_k)")
        if cand is not None and cand > MAX_CANDIDATES:
            raise FieldError("candidates", f"candidates {cand}: at most {MAX_CANDIDATES} per request")

    def search(self, req: SearchRequest, via: str = "http", scope: tuple[str, ...] = ()) -> Reply:
        """One search on the pinned generation: `rag search QUERY --json`'s JSON."""
        return self._run("search", via, req.query, req.filter, req.options(),
                         lambda options: self.p.search(req.query, filter=req.filter, **options), scope=scope)

    def ask(self, req: AskRequest, via: str = "http", on_text: Callable[[str], None] | None = None,
            meta: dict | None = None, scope: tuple[str, ...] = ()) -> Reply:
        """One answer on the pinned generation: `rag ask QUESTION --json`'s JSON;
        `on_text` gets the answer's pieces as they are written (`Project.ask`);
        `meta` (a dict) gets "generation" and "answer_id" before the work starts."""
        return self._run("ask", via, req.question, req.filter, req.options(),
                         lambda options: self.p.ask(req.question, filter=req.filter, on_text=on_text, **options),
                         meta, scope)

    def _run(self, endpoint: str, via: str, query: str, filter_, options: dict, call,
             meta: dict | None = None, scope: tuple[str, ...] = ()) -> Reply:
        self.require_available()
        t0, arrived = time.perf_counter(), time.time()
        answer_id = uuid.uuid4().hex
        self.n_requests = next(self._counter)
        with self.engines.pinned() as s, self.engines.scoped(scope):
            if meta is not None:
                meta.update(generation=s.index_dir.name, answer_id=answer_id)
            res = exc = None
            try:
                self._limits(options)
                res = call(options)
                data = search_json(query, res) if endpoint == "search" else ask_json(res)
                return Reply(json_safe(data), s.index_dir.name, answer_id)
            except BaseException as e:
                exc = e
                raise
            finally:
                if self.queries is not None:
                    self.queries.append(self._row(endpoint, via, query, filter_, options, s, res, exc, arrived,
                                                  answer_id, (time.perf_counter() - t0) * 1000.0))

    def _row(self, endpoint, via, query, filter_, options, s, res, exc, arrived, answer_id, ms) -> dict:
        from datetime import datetime, timezone

        row: dict[str, Any] = {"time": datetime.fromtimestamp(arrived, timezone.utc), "answer_id": answer_id,
                               "endpoint": endpoint, "via": via, "query": query,
                               "mode": options.get("mode"), "k": options.get("k"),
                               "filter": [filter_] if isinstance(filter_, str) else filter_,
                               "generation": s.index_dir.name, "latency_ms": ms,
                               "status": 200 if exc is None else http_status(exc),
                               "error": None if exc is None else error_message(exc)}
        if res is None:
            return row
        config = self.p.config
        if endpoint == "search":
            cosines = [h.cosine for h in res.hits if h.cosine is not None]
            row.update(mode=res.mode, k=row["k"] or config.search.k, hit_ids=[h.chunk_id for h in res.hits],
                       best_cosine=max(cosines) if cosines else None)
        else:
            row.update(mode=row["mode"] or config.search.mode, k=row["k"] or config.ask.k,
                       hit_ids=[e.chunk_id for e in res.evidence],
                       best_cosine=res.best_score if res.evidence else None, refused=res.refused,
                       reason=res.reason)
        return row

    def feedback(self, req: FeedbackRequest, scope: tuple[str, ...] = ()) -> dict:
        """Record a thumbs up or down. Raises BadInput when the server does not log (serve.log off)."""
        from rag_cli.store.query_log import now

        if self.feedbacks is None:
            raise BadInput("this server keeps no log, so feedback is not recorded: start it with `rag serve --log` "
                           "(config serve.log)")
        self.feedbacks.append({"time": now(), "answer_id": req.answer_id, "rating": req.rating,
                               "comment": req.comment})
        return {"recorded": True, "answer_id": req.answer_id, "rating": req.rating}

    def status(self, scope: tuple[str, ...] = ()) -> dict:
        """`rag status --json` of the project; with a `scope`, only what the scope lets through:
        {"collection", "generation", "documents", "chunks", "scoped": true} counted in the scope."""
        self.require_available()
        if not scope:
            return json_safe(self.p.status().to_dict())
        from rag_cli.serve.warm import scoped_mask

        with self.engines.pinned() as s:
            mask = scoped_mask(s, tuple(scope))
            docs = {d for d, keep in zip(s._doc_ids.tolist(), mask.tolist()) if keep}
            return {"collection": self.name, "generation": s.index_dir.name, "documents": len(docs),
                    "chunks": int(mask.sum()), "scoped": True}

    def health(self) -> dict:
        """The server's own state: the generation served, reloads, the last reload error, the seconds the
        served generation took to load (beside the one served before it), uptime, requests, and the graph that
        encodes queries (`WarmEngines.query_graph_used`), and the log's dropped rows and last error.
        /healthz needs no API key, so no path is shown (`without_paths`)."""
        e = self.engines
        writers = [w for w in (self.queries, self.feedbacks) if w is not None]
        log_error = next((w.error for w in writers if w.error), None)
        return {"ok": self.available, "generation": self.generation, "reloads": e.n_reloads,
                "reload_error": without_paths(e.reload_error or (self.open_error if not self.available else None),
                                              self.p.root),
                "load_s": round(e.load_seconds, 2) if e.load_seconds is not None else None,
                "uptime_s": round(time.time() - self.started, 1), "requests": self.n_requests,
                "log": self.queries is not None, "log_dropped": sum(w.n_dropped for w in writers),
                "log_error": without_paths(log_error, self.p.root), "query_graph": e.query_graph_used()}


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/>])(?:[A-Za-z]:)?[/\\](?:[^\s'\"/\\]+[/\\])+")


def without_paths(message: str | None, root) -> str | None:
    """`message` with the project folder's path written `<project>` and the folders of any other absolute path
    left out (`/home/u/models/m.onnx` -> `.../m.onnx`): what a client without the API key may see."""
    if message is None:
        return None
    for spelling in {str(root), str(Path(root).resolve())}:
        message = message.replace(spelling, "<project>")
    return _ABSOLUTE_PATH.sub(".../", message)
