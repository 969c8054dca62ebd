"""A generator over any OpenAI-compatible server (llama.cpp's server,
llama-cpp-python's `python -m llama_cpp.server`, Ollama, vLLM, LM Studio, a
hosted API), through httpx.

* `api = "chat"`: POST {base_url}/chat/completions with system + user
  messages (`prompt.chat_messages`); `api = "completions"`: POST
  {base_url}/completions with a plain prompt and stop strings
  (`prompt.completion_prompt`, `prompt.STOP`), for base models.
* The key, if any, is read from the environment variable named by
  `api_key_env` and sent as `Authorization: Bearer`; it never appears in
  rag.toml or in messages. A variable named but not set is BadInput (exit 2).
* Each request waits at most `timeout` seconds. A connection failure, a
  timeout, HTTP 429 or a 5xx answer is retried up to `max_retries` times,
  waiting `backoff * 2**attempt` seconds before retry attempt+1 (exponential
  backoff); then, or at once for another HTTP error, WorkFailed (exit 1)
  names the URL and the last problem.
* Streaming (`generate(..., on_token=f)`): the request asks for
  `"stream": true` and the server's server-sent events (`data: {json}` lines,
  `data: [DONE]` at the end; chat: `choices[0].delta.content`, completions:
  `choices[0].text`) are passed to `f` as they arrive. The same timeout holds
  for each read; a retry is only possible before the first token: once text
  was passed on, a failure is WorkFailed at once. A server that ignores
  `stream` and answers with one JSON completion is accepted (one token).
"""

from __future__ import annotations

import json
import os
from typing import Callable

from rag_cli import http_json
from rag_cli.errors import BadInput, WorkFailed
from rag_cli.generate.base import Answer, Evidence, is_refusal
from rag_cli.generate.prompt import STOP, chat_messages, completion_prompt, fit_budget

APIS = ("chat", "completions")


class OpenAIGenerator:
    """Answer through an OpenAI-compatible HTTP server.

    Args:
        base_url: the API root, e.g. http://127.0.0.1:8080/v1.
        model: the model name sent (omitted when empty; single-model servers ignore it).
        api: "chat" or "completions".
        api_key_env: name of the environment variable holding the key ("" = no key);
            BadInput if it is named but not set (or empty).
        timeout: seconds per request; max_retries: retries after the first attempt.
        temperature, max_tokens: sampling settings sent with each request.
        context_tokens: token budget of the sources in the prompt (`prompt.fit_budget`).
        backoff: seconds before the first retry (doubled for each next one).
        template: a `prompt.PromptTemplate` replacing the built-in prompt (ask.prompt), or None.
    """

    name = "openai"

    def __init__(self, base_url: str, model: str = "", *, api: str = "chat", api_key_env: str = "",
                 timeout: float = 60.0, max_retries: int = 2, temperature: float = 0.0, max_tokens: int = 256,
                 context_tokens: int = 2048, backoff: float = 0.5, template=None):
        if api_key_env and not os.environ.get(api_key_env):
            raise BadInput(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set or "
                           f"empty (config generator.api_key_env); export it with the key, or give "
                           f"--api-key-env '' for a server without a key")
        self.base_url = base_url.rstrip("/")
        self.model, self.api, self.api_key_env = model, api, api_key_env
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.temperature, self.max_tokens, self.context_tokens = temperature, max_tokens, context_tokens
        self.server_model: str | None = None  # the "model" the server reported in its first answer
        self.template = template  # a `prompt.PromptTemplate` (ask.prompt), or None: the built-in prompt

    def _note_model(self, data) -> None:
        """Remember the model id of the server's first answer that reports one (for reports)."""
        if self.server_model is None and isinstance(data, dict) and isinstance(data.get("model"), str) \
                and data["model"]:
            self.server_model = data["model"]

    def request(self, question: str, evidence: list[Evidence]) -> tuple[str, dict]:
        """The endpoint path and JSON body for `question` over `evidence` (already fitted)."""
        body: dict = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.model:
            body["model"] = self.model
        if self.api == "chat":
            return "/chat/completions", {**body, "messages": chat_messages(question, evidence, self.template)}
        return "/completions", {**body, "prompt": completion_prompt(question, evidence, self.template), "stop": STOP}

    streams = True  # generate() can pass the answer on as it is written (on_token)

    def generate(self, question: str, evidence: list[Evidence],
                 on_token: Callable[[str], None] | None = None) -> Answer:
        """Answer from `evidence`; with `on_token`, stream and pass each piece of text to it."""
        kept, n_cut = fit_budget(evidence, self.context_tokens)
        path, body = self.request(question, kept)
        if on_token is None:
            text = self._text(self.post(path, body), path)
        else:
            text = self.post_stream(path, body, on_token).strip()
        return Answer(text=text, citations=[], refused=not text or is_refusal(text), generator=self.name,
                      n_evidence_cut=n_cut)

    def complete(self, prompt: str, max_tokens: int, *, temperature: float | None = None,
                 seed: int | None = None, stop: list[str] | None = None) -> str:
        """The server's reply to a bare `prompt` (a user message for chat, the
        prompt for completions), stripped; sampled at `temperature` (None: the
        generator's), with `seed` sent when given (OpenAI and llama.cpp's server
        honour it) and, for completions, `stop` (default: a blank line pair).
        Raises WorkFailed as `post`."""
        body: dict = {"temperature": self.temperature if temperature is None else temperature,
                      "max_tokens": max_tokens}
        if seed is not None:
            body["seed"] = seed
        if self.model:
            body["model"] = self.model
        if self.api == "chat":
            path, body = "/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]}
        else:
            path, body = "/completions", {**body, "prompt": prompt, "stop": stop or ["\n\n\n"]}
        return self._text(self.post(path, body), path)

    def _text(self, data: dict, path: str) -> str:
        try:
            choice = data["choices"][0]
            return ((choice["message"]["content"] if self.api == "chat" else choice["text"]) or "").strip()
        except (KeyError, IndexError, TypeError) as exc:
            raise WorkFailed(f"{self.base_url}{path}: the answer is not an OpenAI {self.api} completion "
                             f"(no choices[0].{'message.content' if self.api == 'chat' else 'text'})") from exc

    def _problem(self, exc) -> str:
        """What went wrong with a request, in words, from an httpx error."""
        return http_json.problem(exc, self.timeout, "generator.timeout, --timeout")

    def _headers(self) -> dict:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _with_retries(self, url: str, attempt):
        """`attempt(client)` with bounded retries (`http_json.with_retries`); WorkFailed naming `url`."""
        return http_json.with_retries(url, attempt, timeout=self.timeout, max_retries=self.max_retries,
                                      backoff=self.backoff, what="generator server",
                                      timeout_hint="generator.timeout, --timeout")

    @staticmethod
    def _check_status(url: str, status: int, text: str) -> None:
        """Nothing for HTTP 200; `http_json.Retry` for 429 and 5xx; WorkFailed for another status."""
        http_json.check_status(url, status, text, "generator server")

    def post(self, path: str, body: dict) -> dict:
        """POST `body` to base_url + `path` with timeouts and bounded retries; the JSON answer.
        Raises WorkFailed naming the URL when every attempt failed."""
        url = self.base_url + path

        def attempt(client):
            r = client.post(url, json=body, headers=self._headers())
            self._check_status(url, r.status_code, r.text)
            try:
                data = r.json()
            except ValueError:
                raise WorkFailed(f"{url}: the answer is not JSON: {r.text[:200]!r}") from None
            self._note_model(data)
            return data

        return self._with_retries(url, attempt)

    def post_stream(self, path: str, body: dict, on_token: Callable[[str], None]) -> str:
        """POST `body` with `"stream": true` and pass each piece of the answer
        to `on_token` as it arrives; the whole answer text. Retries as `post`,
        but only before the first piece; raises WorkFailed naming the URL."""
        import httpx

        url = self.base_url + path
        key = "content" if self.api == "chat" else "text"

        def attempt(client):
            pieces: list[str] = []
            with client.stream("POST", url, json={**body, "stream": True}, headers=self._headers()) as r:
                if r.status_code != 200:
                    self._check_status(url, r.status_code, r.read().decode(errors="replace"))
                if not r.headers.get("content-type", "").startswith("text/event-stream"):
                    try:  # the server did not stream: one JSON completion
                        data = json.loads(r.read())
                        self._note_model(data)
                        text = self._text(data, path)
                    except ValueError:
                        raise WorkFailed(f"{url}: the answer is neither server-sent events nor JSON") from None
                    on_token(text)
                    return text
                try:
                    for line in r.iter_lines():
                        piece = self._event(line, key, url)
                        if piece:
                            pieces.append(piece)
                            on_token(piece)
                except httpx.HTTPError as exc:
                    if pieces:  # text was passed on: a retry would repeat it
                        raise WorkFailed(f"the generator server at {url} stopped after {sum(map(len, pieces))} "
                                         f"characters of its answer: {self._problem(exc)}") from exc
                    raise
            return "".join(pieces)

        return self._with_retries(url, attempt)

    def _event(self, line: str, key: str, url: str) -> str:
        """The text of one server-sent event line ("" for others and `[DONE]`)."""
        if not line.startswith("data:"):
            return ""
        data = line[5:].strip()
        if not data or data == "[DONE]":
            return ""
        try:
            event = json.loads(data)
            self._note_model(event)
            choice = event["choices"][0]
            return (choice["delta"].get("content") if key == "content" else choice["text"]) or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise WorkFailed(f"{url}: a streamed event is not an OpenAI {self.api} chunk: {data[:200]!r}") from exc
