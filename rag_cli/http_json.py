"""POST JSON to an HTTP server the user configured, with a timeout and bounded retries (httpx).

A connection failure, a timeout, HTTP 429 or a 5xx answer is retried up to
`max_retries` times, waiting `backoff * 2**i` seconds before retry i+1
(exponential backoff); then WorkFailed (exit 1) names the URL and the last
problem. Another HTTP error status, or an answer that is not JSON, is
WorkFailed at once.
"""

from __future__ import annotations

import time


def post_json(url: str, body: dict, *, timeout: float, max_retries: int, backoff: float = 0.5,
              what: str = "server", headers: dict | None = None):
    """The JSON answer of POST `body` to `url` (see the module doc); `what` names the server in errors.

    Raises:
        WorkFailed: every attempt failed, the server refused the request
            (4xx other than 429), or the answer is not JSON.
    """
    import httpx

    from rag_cli.errors import WorkFailed

    problem = ""
    with httpx.Client(timeout=timeout) as client:
        for i in range(max_retries + 1):
            if i:
                time.sleep(backoff * 2 ** (i - 1))
            try:
                r = client.post(url, json=body, headers=headers or {})
            except httpx.ConnectError as exc:
                problem = f"cannot connect ({exc}); is the server running?"
                continue
            except httpx.TimeoutException:
                problem = f"no answer within {timeout:g} s"
                continue
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code == 429 or r.status_code >= 500:
                problem = f"HTTP {r.status_code}: {r.text[:300]}"
                continue
            if r.status_code != 200:
                raise WorkFailed(f"the {what} at {url} refused the request: HTTP {r.status_code}: {r.text[:300]}")
            try:
                return r.json()
            except ValueError:
                raise WorkFailed(f"{url}: the answer is not JSON: {r.text[:200]!r}") from None
    tries = max_retries + 1
    raise WorkFailed(f"the {what} at {url} failed {tries} time{'s' if tries > 1 else ''}: {problem}")
