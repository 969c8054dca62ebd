"""`WarmEngines`: the `Engines` of a long-lived server, with hot reload.

One searcher (both indexes and the bi-encoder: every mode, search and
ask) is served at a time. A request takes it once, at its start
(`pinned()`), and every library call of that request gets that same object
(`searcher()` returns the pinned one), so a request runs entirely on one
generation even when another becomes current half-way through it.

A daemon thread looks at index/CURRENT every `poll` seconds (through
`Engines.searcher`, which keeps the loaded generation while it stays
current). When a new generation is current it is loaded beside the served
one, then swapped in with one assignment: requests that started before
finish on the old one, requests that start after get the new one, none
waits for the load and none fails. The old searcher is freed when its last
request ends. A generation that cannot be loaded (damaged, removed) is
not swapped in: the served one stays, and `reload_error` says why.

Models are loaded once: the bi-encoder is kept across generations while
[model] stays the same, and the cross-encoder of `ask` (model.reranker) is
kept too, instead of being loaded per call. The bi-encoder runs each call on
one onnxruntime thread (model.threads is for one process doing one thing at
a time): the parallelism is across requests.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, replace
from typing import Iterator

from rag_cli.engines import Engines
from rag_cli.errors import WorkFailed

#: The parts every served searcher loads: any mode, and ask (which scores evidence with both).
ALL_PARTS = ("dense", "sparse")

#: Seconds between tries, at most, while the current generation cannot be loaded (doubling from the poll).
MAX_RETRY_DELAY = 30.0


class WarmEngines(Engines):
    """`Engines` that serve one pinned searcher per request and reload new
    generations in the background (see the module docstring).
    `WarmEngines(folder, poll=0.5)`; `load()` loads the first searcher
    (raises BadInput when there is no usable index), `start()` the reload thread."""

    def __init__(self, folder, poll: float = 0.5, query_graph: str = "query", shared: "SharedModels | None" = None):
        super().__init__(folder)
        self.shared = shared if shared is not None else SharedModels()  # bi-encoders, shared by fingerprint
        self.poll = poll
        self.query_graph = query_graph  # serve.query_graph: "passage" runs the queries on the passages' graph
        self.served = None  # the searcher new requests get
        self.reload_error: str | None = None
        self.n_reloads = 0
        self.loaded_at: float | None = None
        self.load_seconds: float | None = None  # how long the served generation took to load
        self._local = threading.local()
        self._load_lock = threading.Lock()
        self._models: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_reload = None  # callable(old generation name, new one), e.g. to log the switch

    # -- models kept across generations -----------------------------------------
    def embedder(self, config):
        """The bi-encoder, loaded once per [model] config, running each call on
        one onnxruntime thread: requests run in parallel threads, and a
        session's own thread pool would spin on the cores they share (a
        SciFact query took 33 ms of CPU on 2 intra-op threads, 15.6 ms on one).
        With `query_graph` "passage" the queries run on the graph the chunks
        were embedded with, not the model's query graph (serve.query_graph)."""
        key = ("embedder", repr(asdict(config.model)))
        if key not in self._models:
            one = replace(config, model=replace(config.model, threads=1))
            self._models[key] = self.shared.embedder(super().embedder(one), config.model.provider, self.query_graph)
        return self._models[key]

    # -- the scope of a key ---------------------------------------------------------------
    @contextlib.contextmanager
    def scoped(self, scope: tuple[str, ...] = ()) -> Iterator[None]:
        """Apply `scope` (filter expressions, AND; () = none) to every search of this thread's request until
        the block ends: `search_setup` ANDs it with the request's own filter (`scoped_mask`)."""
        outer = getattr(self._local, "scope", ())
        self._local.scope = tuple(scope)
        try:
            yield
        finally:
            self._local.scope = outer

    def search_setup(self, options=None, filter=None, *, for_ask: bool = False):
        """As `Engines.search_setup`, with the scope of this thread's request (`scoped`) ANDed into the mask
        that every retriever (BM25, dense, Milvus) applies before ranking."""
        scope = getattr(self._local, "scope", ())
        if not scope:
            return super().search_setup(options, filter, for_ask=for_ask)
        config, s, _ = super().search_setup(options, None, for_ask=for_ask)
        return config, s, scoped_mask(s, scope, filter)

    def query_graph_used(self) -> str | None:
        """Which graph encodes the served searcher's queries: "query" (the model's query graph) or
        "passage" (the chunks' graph: `query_graph` "passage", or a model without a query graph, whatever
        serve.query_graph says); None before a searcher is loaded."""
        enc = self.served.embedder if self.served is not None else None
        if enc is None:
            return None
        return "passage" if enc.query_encoder is enc else "query"

    def ask_reranker(self):
        config = self.folder.config
        if not config.model.reranker:
            return None
        key = ("reranker", config.model.reranker, config.model.threads, config.model.provider)
        if key not in self._models:
            ce = self.cross_encoder(config)
            self._models[key] = lambda question, texts: ce.score_pairs([(question, t) for t in texts])
        return self._models[key]

    def ask_setup(self, options=None, llm=None, search=None, filter=None):
        """As `Engines.ask_setup`, but a `llama-cpp` generator (a GGUF loaded
        in this process, not safe to call from two threads at once) is loaded
        once per [generator] config and called by one request at a time."""
        config = self.folder.with_options("ask", options)
        if config.ask.generator != "llama-cpp":
            return super().ask_setup(options, llm, search, filter)
        from rag_cli.generate.factory import load_generator

        config, _ = config.with_options("generator", llm)
        sconfig, s, mask = self.search_setup(search, filter, for_ask=True)
        key = ("llama-cpp", repr(asdict(config.generator)), config.model.threads)
        with self._load_lock:
            if key not in self._models:
                self._models[key] = OneAtATime(load_generator(config.ask, s.embedder, s.sparse, config.generator,
                                                              threads=config.model.threads))
        return config.ask, sconfig.search, s, mask, self._models[key]

    # -- the served searcher ---------------------------------------------------------
    def load(self):
        """Look at CURRENT and load the current generation unless it is the
        served one; swap it in. Returns the served searcher. Raises BadInput
        (no index, a damaged generation, a model mismatch)."""
        with self._load_lock:
            old, t0 = self.served, time.perf_counter()
            new = super().searcher(self.folder.config, with_embedder=True, parts=ALL_PARTS)
            if new is not old:
                self.served, self.loaded_at = new, time.time()
                self.load_seconds = time.perf_counter() - t0
                if old is not None:
                    self.n_reloads += 1
                    if self.on_reload is not None:
                        self.on_reload(old.index_dir.name, new.index_dir.name)
            self.reload_error = None
            return new

    def searcher(self, config, *, with_embedder: bool, parts: tuple[str, ...] = ALL_PARTS):
        """The searcher pinned by this thread's request, else the served one
        (loaded on first use). `config`, `with_embedder` and `parts` are
        ignored: the served searcher has both indexes and the bi-encoder."""
        pinned = getattr(self._local, "searcher", None)
        if pinned is not None:
            return pinned
        return self.served if self.served is not None else self.load()

    @contextlib.contextmanager
    def pinned(self) -> Iterator[object]:
        """Pin the served searcher for this thread's request: every
        `searcher()` call until the block ends returns it. Yields it."""
        s = self.served if self.served is not None else self.load()
        outer = getattr(self._local, "searcher", None)
        self._local.searcher = s
        try:
            yield s
        finally:
            self._local.searcher = outer

    # -- the reload thread -----------------------------------------------------------
    def start(self) -> "WarmEngines":
        """Start the daemon thread that reloads new generations every `poll` seconds; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rag-reload", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        delay = self.poll
        while not self._stop.wait(delay):
            try:
                self.load()
                delay = self.poll
            except Exception as exc:  # noqa: BLE001 - keep serving the loaded generation
                message = f"{type(exc).__name__}: {exc}" if not hasattr(exc, "exit_code") else str(exc)
                self.reload_error = f"the served generation stays; a new one could not be loaded: {message}"
                delay = min(delay * 2, MAX_RETRY_DELAY)  # a damaged generation is not hashed twice a second


class SharedModels:
    """The bi-encoders of one server, shared by the collections whose [model] gives the same model
    (fingerprint), execution provider and query graph: one loaded copy, however many collections use it."""

    def __init__(self):
        self._by_fingerprint: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_fingerprint)

    def embedder(self, enc, provider: str, query_graph: str):
        """The shared bi-encoder with `enc`'s fingerprint (`enc` itself when it is the first, made ready for
        serving: the query graph chosen by `query_graph`, the full tokenizer loaded)."""
        folder = getattr(enc, "folder", None)
        key = (getattr(folder, "fingerprint", None) or id(enc), provider, query_graph)
        with self._lock:
            if key not in self._by_fingerprint:
                enc.use_query_graph = query_graph == "query"
                enc.query_encoder.tokenizer.load_full()  # hours of queries: the full tokenizer
                self._by_fingerprint[key] = enc
            return self._by_fingerprint[key]


class ScopeError(WorkFailed):
    """A key's scope that cannot be applied to a collection's index (a field it names is gone): the request
    is refused (HTTP 500) and the message names neither the scope nor the index's fields."""


def scoped_mask(s, scope: tuple[str, ...], filter=None):
    """(n,) bool over `s`'s chunks: those in `scope` (expressions, AND) and matching the request's `filter`.
    The scope's mask is kept on the searcher (one per scope). A request's filter that is refused (a bad
    expression, an unknown field) is refused with the message computed over the documents in the scope, so
    the fields it lists are theirs only."""
    import numpy as np
    import pyarrow as pa

    from rag_cli.errors import BadInput
    from rag_cli.index.filters import chunk_mask

    kept = s.__dict__.setdefault("_scope_masks", {})
    if scope not in kept:
        try:
            kept[scope] = chunk_mask(list(scope), s.chunks, s.docs)
        except BadInput:
            raise ScopeError("this key's scope cannot be applied to the collection's index (a field it names is "
                             "not there); the server's key file must be fixed") from None
    mask = kept[scope]
    if filter is None or filter == [] or filter == ():
        return mask
    try:
        own = chunk_mask(filter, s.chunks, s.docs)
    except BadInput:
        docs = s.docs  # the message again, over the documents in the scope only (the fields it lists)
        if docs is not None:
            in_scope = set(np.asarray(s._doc_ids.tolist(), dtype=object)[mask].tolist())
            docs = docs.filter(pa.array([d in in_scope for d in docs.column("doc_id").to_pylist()], type=pa.bool_()))
        chunk_mask(filter, s.chunks, docs)
        raise
    return mask if own is None else mask & own


class OneAtATime:
    """A generator whose methods are called by one thread at a time (a lock
    around each call); its other attributes are read through."""

    def __init__(self, inner):
        self._inner, self._lock = inner, threading.Lock()

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def locked(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)
        return locked
