"""`Served`: the collections of one `rag serve` (each a `Service`: its own project, generation, hot
reload and query log), the bi-encoders they share (`SharedModels`: one loaded copy per fingerprint) and
the keys (`KeyRing`). The front ends ask it for a collection by name with the request's `Access`
(`get`): a collection the key may not read is `NotFound`, as one that does not exist, so its name is
never revealed; `names(access)` lists only what the key may read.

A collection whose index cannot be loaded at start (damaged, missing) is kept, answers 503 (`Unavailable`)
and is retried by its reload thread, while the others serve.
"""

from __future__ import annotations

import functools
import time

from rag_cli.serve.server_file import EVERYTHING, Access
from rag_cli.serve.service import NotFound, Service, without_paths


class Served:
    """`Served(services, config, multi=..., shared=..., keyring=None)`: `services` {name: Service} in the
    order given; `config` the server-wide [serve] config (host, max_body, max_concurrent); `multi`: served
    as collections (`--collection`, a server file), else as one project (the routes without /c/NAME; the
    MCP tools without a `collection` argument)."""

    def __init__(self, services: dict, config, *, multi: bool, shared=None, keyring=None):
        self.services, self.config, self.multi = dict(services), config, multi
        self.shared, self.keyring = shared, keyring
        self.started = time.time()
        self._limiter = None

    def only(self) -> Service | None:
        """The collection when exactly one is served (its routes are also the single-project ones)."""
        return next(iter(self.services.values())) if len(self.services) == 1 else None

    def names(self, access: Access = EVERYTHING) -> list[str]:
        """The names of the collections `access` may read, in the order served."""
        return [n for n in self.services if access.may_read(n)]

    def get(self, name: str, access: Access = EVERYTHING) -> Service:
        """The collection `name`. NotFound (404) when there is none or `access` may not read it; the
        message lists only the collections `access` may read."""
        if name in self.services and access.may_read(name):
            return self.services[name]
        shown = ", ".join(self.names(access)) or "none"
        raise NotFound(f"no collection {name!r}; the collections this key may read: {shown}")

    def listing(self, access: Access = EVERYTHING) -> dict:
        """GET /collections: {"collections": [{"name", "available", "generation", "scoped"}]} of what
        `access` may read."""
        return {"collections": [{"name": n, "available": self.services[n].available,
                                 "generation": self.services[n].generation, "scoped": bool(access.scope(n))}
                                for n in self.names(access)]}

    async def in_thread(self, fn, *args, **kwargs):
        """`fn(*args, **kwargs)` in a worker thread, at most serve.max_concurrent at once, all collections
        together (the front ends' way to call)."""
        import anyio

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.config.max_concurrent)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._limiter)

    def health(self, access: Access | None) -> dict:
        """GET /healthz. One project: its `Service.health()` (with "keys" when there is a key file). As
        collections: {"ok", "uptime_s", "collections": {name: health}, "embedders", "keys"}, the collections
        being those `access` may read; without a key (`access` None) where keys are required, only the counts
        (no name is shown). `ok`: every collection shown is available. The key file's error is shown to a key
        that reads every collection, and to everyone where no key is required."""
        keys = None
        if self.keyring is not None and (self.keyring.path is not None or len(self.keyring.keys)):
            full = access is not None and access.collections is None
            error = self.keyring.error
            keys = {"keys": len(self.keyring.keys), "reloads": self.keyring.n_reloads,
                    "error": (without_paths(error, "/") if full else "the key file could not be reloaded; "
                              "the keys loaded before stay (see the server's stderr)") if error else None}
        if not self.multi:
            out = self.only().health()
            return {**out, "keys": keys} if keys is not None else out
        shown = self.names(access) if access is not None else []
        states = {n: {**self.services[n].health(), "available": self.services[n].available} for n in shown}
        out = {"ok": all(self.services[n].available for n in (shown or self.services)),
               "uptime_s": round(time.time() - self.started, 1)}
        if access is None:
            out["collections"] = {"served": len(self.services),
                                  "unavailable": sum(not s.available for s in self.services.values())}
        else:
            out["collections"] = states
            out["embedders"] = len(self.shared) if self.shared is not None else None
        if keys is not None:
            out["keys"] = keys
        return out

    def close(self) -> None:
        for service in self.services.values():
            service.close()
