"""A small OpenAI-compatible server for tests: 127.0.0.1, a free port, a thread.

`FakeOpenAI.reply` is the answer text it returns (chat or completions);
`replies` texts to return first, one per request, before `reply`;
`status` an HTTP status to return instead (e.g. 500); `delay` seconds to
wait before answering (to provoke a client timeout). `requests` records
(path, JSON body) of every request.

A request with `"stream": true` is answered with server-sent events: the
text in `chunks` (default: pieces of 3 characters), one `data:` event each
(chat: `choices[0].delta.content`, completions: `choices[0].text`), then
`data: [DONE]`; with `stall_after` = n it goes silent for `stall` seconds
after n events (a server that hangs mid-answer, for a client read timeout).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self):
        self.reply = "ok [1]"
        self.model = "fake-model"  # the model id reported when a request names none (as single-model servers do)
        self.replies: list[str] = []
        self.status = 200
        self.delay = 0.0
        self.chunks: list[str] | None = None
        self.stall_after: int | None = None
        self.stall = 2.0
        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append((self.path, body))
                if fake.delay:
                    time.sleep(fake.delay)
                if fake.status != 200:
                    payload = json.dumps({"error": {"message": "fake failure"}}).encode()
                    self.send_response(fake.status)
                elif body.get("stream"):
                    text = fake.replies.pop(0) if fake.replies else fake.reply
                    self._stream(fake.chunks or [text[i:i + 3] for i in range(0, len(text), 3)],
                                 body.get("model") or fake.model)
                    return
                else:
                    text = fake.replies.pop(0) if fake.replies else fake.reply
                    if self.path.endswith("/chat/completions"):
                        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}
                    else:
                        choice = {"index": 0, "text": text, "finish_reason": "stop"}
                    payload = json.dumps({"id": "x", "object": "chat.completion", "model": body.get("model") or fake.model,
                                          "choices": [choice]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

            def _stream(self, pieces, model):
                chat = self.path.endswith("/chat/completions")
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for i, piece in enumerate(pieces):
                        if i == fake.stall_after:
                            time.sleep(fake.stall)
                        choice = ({"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece})
                        self.wfile.write(b"data: " + json.dumps({"model": model, "choices": [choice]}).encode() + b"\n\n")
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
