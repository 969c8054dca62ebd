"""A small OpenAI-compatible embeddings server for tests: 127.0.0.1, a free port, a thread.

`POST /embeddings {"model", "input"}` answers `data[i].embedding`: a
deterministic unit vector of `dim` numbers per text (from its sha256), and
`model` = `model_id` (None: the name sent). What it does wrong on purpose:
`statuses` HTTP statuses to answer first, one per request (e.g. [503, 429]);
`fail_after` = n: after n good answers every request gets `fail_status`
(a server gone bad mid-run); `mode` "notjson" | "nan" | "short" (one vector
fewer than asked) | "ragged"; `delay` seconds before each answer. `requests`
records (path, JSON body, Authorization header) of every request.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dim)
    return (v / np.linalg.norm(v)).tolist()


class FakeEmbeddings:
    def __init__(self, dim: int = 8):
        self.dim = dim
        self.model_id: str | None = "fake-embed-1"
        self.statuses: list[int] = []
        self.fail_after: int | None = None
        self.fail_status = 503
        self.mode = "ok"
        self.delay = 0.0
        self.n_ok = 0
        self.requests: list[tuple[str, dict, str | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append((self.path, body, self.headers.get("Authorization")))
                if fake.delay:
                    time.sleep(fake.delay)
                status = fake.statuses.pop(0) if fake.statuses else 200
                if status == 200 and fake.fail_after is not None and fake.n_ok >= fake.fail_after:
                    status = fake.fail_status
                if status != 200:
                    return self._send(status, json.dumps({"error": {"message": "fake failure"}}).encode())
                if fake.mode == "notjson":
                    return self._send(200, b"<html>proxy error</html>", "text/html")
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = [fake_vector(body.get("model", "") + "\0" + t, fake.dim) for t in inputs]
                if fake.mode == "nan":
                    vectors[0][0] = float("nan")
                elif fake.mode == "short":
                    vectors = vectors[:-1]
                elif fake.mode == "ragged" and len(vectors) > 1:
                    vectors[1] = vectors[1][:-1]
                fake.n_ok += 1
                answer = {"object": "list", "model": fake.model_id or body.get("model"),
                          "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]}
                self._send(200, json.dumps(answer).encode())  # json writes NaN as NaN, as Python servers do

            def _send(self, status: int, payload: bytes, ctype: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeEmbeddings":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop answering (later requests: connection refused)."""
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
