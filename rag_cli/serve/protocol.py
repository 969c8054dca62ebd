"""Connection limits of the HTTP server, enforced under uvicorn (docs/serve.md#limits).

uvicorn (0.x) closes an idle keep-alive connection `timeout_keep_alive` s
after a response, but has no timeout for a request head: a connection that
sends nothing, or one header byte every few seconds, is held for ever, and
its `limit_concurrency` counts such connections, so a few hundred of them
made every request a 503. This module wraps uvicorn's HTTP protocol class
(httptools when installed, h11 otherwise) with:

- a request-head deadline: a connection must finish its request head
  (request line and headers) within `HEADER_TIMEOUT` s of opening, or of
  the end of its previous response; otherwise it is closed. The deadline is
  absolute (bytes trickling in do not extend it) and is disarmed once the
  head is parsed, so long answers and streams are never cut;
- a connection count shared with the app (`Limits`): above
  `max_connections` open connections only the open paths (/healthz) are
  served (others get 503 with Retry-After), so a probe still gets its
  answer; above `max_connections + HEALTH_SLOTS` a new connection is
  closed as soon as it is accepted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

#: Seconds a connection has to send a whole request head (request line and headers).
HEADER_TIMEOUT = 5.0

#: Seconds an idle keep-alive connection is kept after a response (uvicorn's `timeout_keep_alive`).
KEEP_ALIVE_TIMEOUT = 5

#: Connections above `max_connections` kept for the open paths (/healthz) before new ones are refused.
HEALTH_SLOTS = 16


@dataclass
class Limits:
    """The connection limits of one server and the connections open now (updated on the event loop)."""

    max_connections: int
    header_timeout: float = HEADER_TIMEOUT
    open: int = 0

    def busy(self) -> bool:
        """True when more than `max_connections` connections are open (only /healthz is served then)."""
        return self.open > self.max_connections

    def full(self) -> bool:
        """True when a new connection must be refused (`max_connections + HEALTH_SLOTS` are open)."""
        return self.open > self.max_connections + HEALTH_SLOTS


def protocol_class(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with the request-head deadline and connection count of `limits`
    (pass it as `uvicorn.Config(http=...)`)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class LimitedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _head_deadline: asyncio.TimerHandle | None = None
        _counted = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            limits.open += 1
            self._counted = True
            if limits.full():
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            if self._counted:
                limits.open -= 1
                self._counted = False
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._in_request():
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self._in_request():
                self._arm()  # the next request's head has the same deadline

        def _in_request(self) -> bool:
            """True from the parsed head of a request to the end of its response."""
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(limits.header_timeout, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if not self._in_request() and not self.transport.is_closing():
                self.transport.close()

    return LimitedHTTPProtocol
