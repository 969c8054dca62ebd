"""Requests to an HTTP server the user configured, with a timeout and bounded retries (httpx).

A connection failure, a timeout, HTTP 429 or a 5xx answer is retried up to
`max_retries` times, waiting `backoff * 2**i` seconds before retry i+1
(exponential backoff); then WorkFailed (exit 1) names the URL and the last
problem. Another HTTP error status, or an answer that is not JSON, is
WorkFailed at once. `with_retries` is the loop (the generator's streaming
requests use it too); `post_json` is one JSON POST through it.
"""

from __future__ import annotations

import time
from typing import Any, Callable


class Retry(Exception):
    """A failed attempt worth retrying (HTTP 429 or 5xx); the message says what happened."""


def problem(exc, timeout: float, hint: str = "") -> str:
    """What went wrong with a request, in words, from an httpx error; `hint` names the timeout setting."""
    import httpx

    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc}); is the server running?"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout:g} s" + (f" ({hint})" if hint else "")
    return f"{type(exc).__name__}: {exc}"


def check_status(url: str, status: int, text: str, what: str = "server") -> None:
    """Nothing for HTTP 200; `Retry` for 429 and 5xx; WorkFailed (the request was refused) for another status."""
    from rag_cli.errors import WorkFailed

    if status == 200:
        return
    said = f"HTTP {status}: {text[:300]}"
    if status != 429 and status < 500:
        raise WorkFailed(f"the {what} at {url} refused the request: {said}")
    raise Retry(said)


def with_retries(url: str, attempt: Callable[[Any], Any], *, timeout: float, max_retries: int, backoff: float = 0.5,
                 what: str = "server", timeout_hint: str = ""):
    """`attempt(client)` (an httpx.Client with `timeout` seconds) up to 1 + max_retries times, waiting
    `backoff * 2**i` s before retry i+1, while it raises an httpx error or `Retry`; its result.

    Raises:
        WorkFailed: every attempt failed (naming `what`, `url` and the last problem), or what
            `attempt` raised itself.
    """
    import httpx

    from rag_cli.errors import WorkFailed

    said = ""
    with httpx.Client(timeout=timeout) as client:
        for i in range(max_retries + 1):
            if i:
                time.sleep(backoff * 2 ** (i - 1))
            try:
                return attempt(client)
            except httpx.HTTPError as exc:
                said = problem(exc, timeout, timeout_hint)
            except Retry as exc:
                said = str(exc)
    tries = max_retries + 1
    raise WorkFailed(f"the {what} at {url} failed {tries} time{'s' if tries > 1 else ''}: {said}")


def post_json(url: str, body: dict, *, timeout: float, max_retries: int, backoff: float = 0.5,
              what: str = "server", headers: dict | None = None, timeout_hint: str = ""):
    """The JSON answer of POST `body` to `url` (see the module doc); `what` names the server in errors.

    Raises:
        WorkFailed: every attempt failed, the server refused the request
            (4xx other than 429), or the answer is not JSON.
    """
    from rag_cli.errors import WorkFailed

    def attempt(client):
        r = client.post(url, json=body, headers=headers or {})
        check_status(url, r.status_code, r.text, what)
        try:
            return r.json()
        except ValueError:
            raise WorkFailed(f"{url}: the answer is not JSON: {r.text[:200]!r}") from None

    return with_retries(url, attempt, timeout=timeout, max_retries=max_retries, backoff=backoff, what=what,
                        timeout_hint=timeout_hint)
