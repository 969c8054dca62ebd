"""What the bi-encoder and the cross-encoder share: the onnxruntime session,
batching by a token budget, and feeding padded batches to the graph.

Batching: inputs are sorted by token length (longest first) and cut into
batches whose padded size, batch size x longest sequence, stays within
`batch_tokens`, so little compute goes to padding; results are put back in
input order.

Threads: on the CPU, `threads` batches run at once, each on one onnxruntime
thread (one session, shared weights; `InferenceSession.run` is thread-safe
and releases the GIL), rather than one batch at a time split over `threads`
intra-op threads: small per-batch GEMMs parallelise poorly, and padding,
pooling and the caller's work overlap the next batches (docs/performance.md "Embedding
speed" has the measurements).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

import numpy as np
import onnxruntime as ort

from rag_cli.errors import BadInput
from rag_cli.models.folder import ModelFolder
from rag_cli.models.tokens import TextTokenizer, Tokenized

#: Padded tokens per batch. Small batches keep each layer's activations in the
#: CPU caches (`bench/embed_speed.py` measures other budgets).
DEFAULT_BATCH_TOKENS = 1024
KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

Progress = Callable[[int, int], None]
"""progress(done, total): called after each batch; counts are inputs (texts or pairs)."""


#: `--provider` values and the onnxruntime execution providers they select.
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "coreml": "CoreMLExecutionProvider"}


def execution_providers(provider: str = "cpu", here: bool = True) -> list[str]:
    """The onnxruntime providers for a `--provider` value (config `model.provider`).

    Args:
        provider: `cpu` (default), `cuda` or `coreml`.
        here: check that this process's onnxruntime has the provider (False:
            the model runs elsewhere, on Ray's nodes, which check it there).

    Returns:
        Provider names for `InferenceSession`, best first; the CPU provider
        is always last, so operators another provider lacks still run.

    Raises:
        BadInput: an unknown value, or a provider this onnxruntime build does
            not have (the message lists the ones it has).
    """
    name = str(provider).lower()
    if name not in PROVIDERS:
        raise BadInput(f"--provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    available = ort.get_available_providers()
    if here and PROVIDERS[name] not in available:
        have = [k for k, v in PROVIDERS.items() if v in available]
        raise BadInput(
            f"--provider {provider!r}: this onnxruntime ({ort.__version__}) has no {PROVIDERS[name]}; "
            f"available here: {', '.join(have) or 'none'} (all providers: {', '.join(available)}). "
            "Install onnxruntime-gpu for cuda, or use --provider cpu"
        )
    return [PROVIDERS[name]] + ([PROVIDERS["cpu"]] if name != "cpu" else [])


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def default_parallel_batches() -> bool:
    """Whether several batches should run at once on the CPU, one intra-op
    thread each (True), or one batch at a time on all threads (False).

    One batch at a time where the CPU has AMX int8 tiles (``amx_int8``):
    onnxruntime's int8 GEMMs there gain more from a larger matrix per call
    than from running batches side by side; elsewhere (AVX2, AVX-512
    without AMX) batches side by side. Both measured in
    docs/performance.md (bench/embed_speed.py)."""
    return "amx_int8" not in cpu_flags()


def default_threads() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def create_session(
    onnx_path: str | os.PathLike,
    threads: int | None = None,
    providers: Sequence[str] | None = None,
) -> ort.InferenceSession:
    """An onnxruntime session with all graph optimisations on.

    Args:
        onnx_path: the ONNX file.
        threads: intra-op threads; default: the cores this process may use.
        providers: onnxruntime execution providers; default CPU only.

    Raises:
        BadInput: the file is not a loadable ONNX graph.
    """
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = int(threads) if threads else default_threads()
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4  # fatal only: errors come back as exceptions, with a message for users
    try:
        return ort.InferenceSession(
            str(onnx_path), sess_options=opts, providers=list(providers or ["CPUExecutionProvider"])
        )
    except Exception as e:  # onnxruntime raises its own non-exported exception types
        raise BadInput(
            f"{onnx_path}: onnxruntime cannot load it ({str(e).strip().splitlines()[0]}); "
            "it must be an ONNX export of the model, e.g. from `optimum-cli export onnx`"
        ) from None


def plan_batches(
    lengths: np.ndarray, batch_tokens: int = DEFAULT_BATCH_TOKENS, length_sorted: bool = True
) -> list[np.ndarray]:
    """Group input indices into batches by a token budget.

    Args:
        lengths: (n,) int, tokens per input.
        batch_tokens: most padded tokens (batch size x longest length) per
            batch; an input longer than this gets a batch of its own.
        length_sorted: sort by length, longest first (the default: little
            padding); False keeps the input order ("plain" batching, for
            benchmarks).

    Returns:
        Index arrays (int64), together covering 0..n-1 once each.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if length_sorted:
        order = np.argsort(-lengths, kind="stable")
    else:
        order = np.arange(len(lengths), dtype=np.int64)
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        if length_sorted:
            size = max(1, batch_tokens // max(int(lengths[order[start]]), 1))
        else:  # grow while the padded size of the batch fits
            size, longest = 1, max(int(lengths[order[start]]), 1)
            while start + size < n:
                longest_next = max(longest, int(lengths[order[start + size]]))
                if longest_next * (size + 1) > batch_tokens:
                    break
                longest, size = longest_next, size + 1
        batches.append(order[start : start + size])
        start += size
    return batches


class OnnxTextModel:
    """An ONNX transformer over token ids: session, tokenizer, batching.

    Subclasses (`BiEncoder`, `CrossEncoder`) say what to tokenize and how to
    reduce the graph's output per batch.

    Args:
        folder: the model folder.
        threads: CPU cores to use; default: the cores this process may use.
        providers: onnxruntime execution providers; default CPU only.
        parallel_batches: False runs one batch at a time on `threads`
            intra-op threads even on the CPU; None (default):
            `default_parallel_batches()`, which depends on the CPU.

    With CPU only, more than one thread and `parallel_batches`, `threads` batches run at once
    (at most one per usable core: each batch in flight holds its
    activations), one onnxruntime thread each (`workers`); otherwise one
    batch at a time on `threads` intra-op threads.

    The graph is loaded on first use (`session`), so a bad graph raises then.
    """

    def __init__(self, folder: ModelFolder, threads: int | None = None, providers: Sequence[str] | None = None,
                 parallel_batches: bool | None = None):
        self.folder = folder
        self.threads = int(threads) if threads else default_threads()
        self.providers = list(providers or ["CPUExecutionProvider"])
        if parallel_batches is None:
            parallel_batches = default_parallel_batches()
        self.parallel_batches = parallel_batches
        cpu_only = self.providers == ["CPUExecutionProvider"]
        #: batches in flight at once (each on one intra-op thread when > 1)
        self.workers = (min(self.threads, default_threads())
                        if parallel_batches and cpu_only and self.threads > 1 else 1)
        self.tokenizer = TextTokenizer(folder.tokenizer_path, folder.max_length)
        self._session: ort.InferenceSession | None = None
        self._session_lock = threading.Lock()
        self._input_dtypes: dict[str, type] = {}
        self.n_truncated = 0
        self.truncated = np.zeros(0, dtype=bool)

    @property
    def session(self) -> ort.InferenceSession:
        """The onnxruntime session of `folder.onnx_path`, created on first
        use (a `BiEncoder` with a query graph needs only one of its two
        graphs per command).

        Raises:
            BadInput: the file is not a loadable ONNX graph, or the graph
                needs an input this runtime cannot feed.
        """
        with self._session_lock:
            if self._session is None:
                session = create_session(self.folder.onnx_path, 1 if self.workers > 1 else self.threads,
                                         self.providers)
                dtypes = {}
                for inp in session.get_inputs():
                    if inp.name not in KNOWN_INPUTS:
                        raise BadInput(
                            f"{self.folder.onnx_path}: graph input {inp.name!r} is not one of "
                            f"{', '.join(KNOWN_INPUTS)}; export an encoder without past key values or position ids"
                        )
                    dtypes[inp.name] = np.int32 if inp.type == "tensor(int32)" else np.int64
                self._input_dtypes, self._session = dtypes, session
            return self._session

    def preload(self) -> None:
        """Start creating the session in a background thread (onnxruntime
        releases the GIL while it loads a graph), so that it overlaps with
        work on the calling thread such as loading the tokenizer or an index.
        The first use of `session` waits for it; an error is raised there,
        not in the thread."""
        def load() -> None:
            try:
                self.session  # noqa: B018
            except Exception:  # raised again, on the caller's thread, at first use
                pass

        if self._session is None:
            threading.Thread(target=load, name=f"load {self.folder.onnx_path.name}").start()

    @property
    def input_dtypes(self) -> dict[str, type]:
        """Graph input name -> numpy integer dtype it takes."""
        self.session  # noqa: B018  (loads the graph)
        return self._input_dtypes

    @property
    def outputs(self) -> dict[str, ort.NodeArg]:
        """Graph output name -> its onnxruntime NodeArg (name, type, shape)."""
        return {o.name: o for o in self.session.get_outputs()}

    def count_tokens(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """(n,) int64: tokens (special tokens included) per `prefix + text`, no truncation."""
        return self.tokenizer.count(texts, prefix)

    def pad(self, ids: Sequence[np.ndarray], type_ids: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Right-pad a batch to its longest sequence.

        Returns:
            `input_ids` (padded with the folder's pad_token_id),
            `attention_mask` (1 on tokens, 0 on padding), `token_type_ids`:
            each (b, s) int64.
        """
        b, s = len(ids), max(len(a) for a in ids)
        input_ids = np.full((b, s), self.folder.pad_token_id, dtype=np.int64)
        mask = np.zeros((b, s), dtype=np.int64)
        types = np.zeros((b, s), dtype=np.int64)
        for row, (a, t) in enumerate(zip(ids, type_ids)):
            input_ids[row, : len(a)] = a
            mask[row, : len(a)] = 1
            types[row, : len(t)] = t
        return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": types}

    def feed(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The padded arrays the graph declares as inputs, in its dtypes
        (an XLM-R graph has no `token_type_ids`)."""
        return {name: arrays[name].astype(dtype, copy=False) for name, dtype in self.input_dtypes.items()}

    def run_session(self, outputs: list[str], arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        """`session.run` on one padded batch (`pad`).

        Raises:
            BadInput: a Gather index is outside its table (`_out_of_table`).
        """
        try:
            return self.session.run(outputs, self.feed(arrays))
        except Exception as e:  # onnxruntime's own exception types
            explained = self._out_of_table(str(e), arrays["input_ids"])
            if explained is None:
                raise
            raise explained from None

    def _out_of_table(self, message: str, ids: np.ndarray) -> BadInput | None:
        """What onnxruntime's "indices element out of data bounds" means for
        this folder, given the batch's (b, s) input_ids: a token id past the
        embedding table (tokenizer.json of another model), a position past
        the position table (max_length larger than the graph takes), or,
        when the index could be either, both. None for any other error, or a
        small table (token types)."""
        found = re.search(r"out of data bounds, idx=(-?\d+) .*inclusive range \[-?\d+,\s*(\d+)\]", message)
        if not found:
            return None
        bad, rows = int(found.group(1)), int(found.group(2)) + 1
        length = ids.shape[1]
        in_ids = bool((ids == bad).any())
        # position ids run to about the sequence length (+2 in XLM-R); a position table has
        # about max_length rows, a token-type table 1 or 2
        position_like = rows >= 8 and rows < length + 2 and bad <= length + 2
        tokenizer = ("the tokenizer and the graph come from different models (use the tokenizer.json "
                     "exported with the model)")
        positions = (f"the graph takes fewer positions than max_length {self.folder.max_length} (set "
                     f"max_length to at most {rows - 2} in {self.folder.path / 'rag_model.json'})")
        where = f"{self.folder.onnx_path} with {self.folder.tokenizer_path}"
        if in_ids and not position_like:
            return BadInput(f"{where}: token id {bad} is outside the {rows}-row embedding table: {tokenizer}")
        if position_like and not in_ids:
            return BadInput(f"{where}: a {length}-token input needs position {bad}, outside a {rows}-row "
                            f"table: {positions}")
        if in_ids and position_like:
            return BadInput(f"{where}: index {bad} (a token id, or a position of this {length}-token "
                            f"input) is outside a {rows}-row table: either {tokenizer}, or {positions}")
        return None  # some other table: nothing to add to onnxruntime's message

    def iter_batched(
        self,
        tok: Tokenized,
        output: str,
        reduce: Callable[[np.ndarray, np.ndarray], np.ndarray],
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        length_sorted: bool = True,
        batches: Sequence[np.ndarray] | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Run the graph over token-budget batches (`plan_batches`), one at a time.

        Args:
            tok: the tokenized inputs (n of them).
            output: the graph output to fetch.
            reduce: (output batch as float32, attention mask (b, s) float32)
                -> (b, ...) float32 per-input results.
            batch_tokens: padded tokens per batch.
            length_sorted: False batches in input order (see `plan_batches`).
            batches: the batches to run, index arrays (int64) into `tok`,
                instead of planning them (a Ray actor runs the batches the
                driver planned: `rag_cli.models.ray_encoder`); then
                `batch_tokens` and `length_sorted` are not used.

        Yields:
            `(idx, results)`: idx (b,) int64 positions in `tok`, results
            (b, ...) float32, longest inputs first. The batches depend only on
            the inputs' lengths, so a suffix of the inputs (in plan order) is
            batched exactly as it was in the whole plan.
        """
        def run(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            arrays = self.pad([tok.ids[i] for i in idx], [tok.type_ids[i] for i in idx])
            (out,) = self.run_session([output], arrays)
            mask = arrays["attention_mask"].astype(np.float32)
            return idx, np.asarray(reduce(np.asarray(out, dtype=np.float32), mask), dtype=np.float32)

        plan = plan_batches(tok.lengths, batch_tokens, length_sorted) if batches is None else list(batches)
        if self.workers == 1 or len(plan) == 1:
            for idx in plan:
                yield run(idx)
            return
        # at most 2 x workers batches computed ahead of the caller: memory stays bounded
        with ThreadPoolExecutor(self.workers, thread_name_prefix="rag-onnx") as pool:
            pending: deque = deque()
            try:
                for idx in plan:
                    pending.append(pool.submit(run, idx))
                    if len(pending) >= 2 * self.workers:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:  # the caller stopped early or a batch failed: drop what has not started
                for f in pending:
                    f.cancel()

    def run_batched(
        self,
        tok: Tokenized,
        output: str,
        reduce: Callable[[np.ndarray, np.ndarray], np.ndarray],
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        progress: Progress | None = None,
    ) -> np.ndarray:
        """Run the graph over all inputs in token-budget batches (`iter_batched`).

        Args:
            tok: the tokenized inputs (n of them).
            output: the graph output to fetch.
            reduce: (output batch as float32, attention mask (b, s) float32)
                -> (b, ...) float32 per-input results.
            batch_tokens: padded tokens per batch.
            progress: called as progress(done, n) after each batch.

        Returns:
            (n, ...) float32 results in input order. Also sets
            `self.truncated` ((n,) bool) and `self.n_truncated`.
        """
        self.truncated = tok.truncated
        self.n_truncated = tok.n_truncated
        n = len(tok)
        result: np.ndarray | None = None
        done = 0
        for idx, part in self.iter_batched(tok, output, reduce, batch_tokens):
            if result is None:
                result = np.empty((n, *part.shape[1:]), dtype=np.float32)
            result[idx] = part
            done += len(idx)
            if progress is not None:
                progress(done, n)
        return result if result is not None else np.empty((0,), dtype=np.float32)
