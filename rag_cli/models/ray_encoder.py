"""The bi-encoder on a Ray cluster: `rag embed --ray [ADDRESS]` (the `ray` extra).

`RayEncoder` is a `BiEncoder` whose `iter_encode_groups` (what `rag embed`
calls with the texts to embed: cache misses only, one window of
chunks.parquet at a time) runs on Ray Data instead of this process:

1. The driver (this process) plans the batches exactly as the local path
   does (`plan_batches` over each window's token lengths: length-sorted,
   cut by the token budget) and puts them into Ray's object store as Arrow
   blocks of `CALL_BATCHES_PER_THREAD` x threads planned batches (one row
   per planned batch: `keys`, the texts' sha256, and `texts`), so a batch is
   never split or merged and its vectors are those of the local path (the
   int8 graph's activation scales are per batch).
2. `map_batches` runs `_EmbedActor`, an actor class, one call per block:
   each actor loads the model once (one onnxruntime session, `threads`
   batches at once) and returns (key, vector) rows. Actors are sized from
   the cluster's CPUs (`actor_plan`), or one per GPU with `--provider cuda`.
3. The driver iterates the results in order (`iter_batches`, order
   preserved) and yields them batch by batch as the local path does;
   `rag embed` caches them as they come, so a killed driver keeps every
   finished batch and the next run embeds only the rest; the results are
   written by the same code as the local path's (`rag_cli.stages.embed`):
   same embeddings.parquet, vector cache and fingerprint.
4. A node that dies mid-run: Ray Data restarts its actors and retries their
   blocks; when Ray reports the actors dead instead, the job is planned
   again on the nodes left from the first batch not yet yielded (`RETRIES`).

The model reaches the workers through the object store: the graph (and its
external-data files) and tokenizer.json are put once, and each actor writes
them to a folder of its node's temporary directory named by the passage
fingerprint (`$TMPDIR/rag-cli-ray/<fingerprint>/`, reused by later runs);
the actor checks that the folder's fingerprint is the driver's. So a remote
cluster needs nothing of the project or the model on its nodes, only Python
with rag-cli and the `ray` extra (docs/scale-out.md).

Connecting to the cluster and sizing the actors: `rag_cli.models.ray_cluster`.
Nothing here imports Ray at module level.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.models.encoder import BiEncoder
from rag_cli.models.folder import ModelFolder, graph_files
from rag_cli.models.onnx_runtime import DEFAULT_BATCH_TOKENS, plan_batches
from rag_cli.models.ray_cluster import ActorPlan, cluster_plan

#: Planned batches an actor gets per call, per thread of the actor.
CALL_BATCHES_PER_THREAD = 2
#: How many times a job that lost actors (a dead node) is planned again on the nodes left.
RETRIES = 3


@dataclass(frozen=True)
class ShippedModel:
    """A model folder sent through Ray's object store: `folder` (as the
    driver loaded it: its settings), `files` (an ObjectRef of {file name:
    bytes}: the graph, its external-data files and tokenizer.json) and
    `fingerprint` (the passage fingerprint the copy must have)."""

    folder: ModelFolder
    files: Any
    fingerprint: str


def ship_model(ray, folder: ModelFolder) -> ShippedModel:
    """Put the files a passage vector depends on into the object store (once per run)."""
    files = {p.name: p.read_bytes() for p in graph_files(folder.onnx_path)}
    files["tokenizer.json"] = folder.tokenizer_path.read_bytes()
    return ShippedModel(replace(folder, query_onnx_path=None), ray.put(files), folder.passage_fingerprint)


def unpack_model(ray, shipped: ShippedModel, root: Path | None = None) -> ModelFolder:
    """The shipped model as a folder on this node: `root/<fingerprint>/`
    (`root`: `$TMPDIR/rag-cli-ray`), written once (into a temporary folder,
    then renamed) and reused.

    Raises:
        WorkFailed: the copy's fingerprint is not the driver's.
    """
    root = Path(root or Path(tempfile.gettempdir()) / "rag-cli-ray")
    target = root / shipped.fingerprint
    if not (target / "tokenizer.json").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
        for name, data in ray.get(shipped.files).items():
            (tmp / name).write_bytes(data)
        try:
            os.replace(tmp, target)
        except OSError:  # another actor of this node was first: use its copy
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    folder = replace(shipped.folder, path=target, onnx_path=target / shipped.folder.onnx_path.name,
                     tokenizer_path=target / "tokenizer.json", query_onnx_path=None)
    if folder.passage_fingerprint != shipped.fingerprint:
        raise WorkFailed(f"the model copied to {target} has fingerprint {folder.passage_fingerprint[:12]}, not the "
                         f"driver's {shipped.fingerprint[:12]}; delete {target} on that node and run again")
    return folder


class _EmbedActor:
    """A Ray Data actor: loads the shipped model once (`threads` batches at
    once), then embeds blocks of planned batches (rows `keys`, `texts`: lists
    of strings; `prefix` put before each text) into rows `key` (string),
    `vector` (fixed_size_list<float32>[d]), each batch run as planned."""

    def __init__(self, shipped: ShippedModel, threads: int, providers: list[str], prefix: str):
        import ray

        check_node_providers(providers)
        self.encoder = BiEncoder(unpack_model(ray, shipped), threads=threads, providers=providers)
        self.prefix = prefix
        self.encoder.session  # noqa: B018  (load the graph now, not in the first call)

    def __call__(self, block):
        import pyarrow as pa

        from rag_cli.store.embeddings import vector_array

        keys, texts, batches = [], [], []
        for batch_keys, batch_texts in zip(block.column("keys").to_pylist(), block.column("texts").to_pylist()):
            batches.append(np.arange(len(texts), len(texts) + len(batch_texts), dtype=np.int64))
            keys += batch_keys
            texts += batch_texts
        out_keys: list[str] = []
        out_vectors: list[np.ndarray] = []
        for idx, vectors in self.encoder.iter_encode(texts, self.prefix, batches=batches):
            out_keys += [keys[i] for i in idx]
            out_vectors.append(vectors)
        matrix = np.concatenate(out_vectors) if out_vectors else np.zeros((0, self.encoder.dim), np.float32)
        return pa.Table.from_arrays([pa.array(out_keys, pa.string()), vector_array(matrix)], names=["key", "vector"])


#: How the message of an actor that cannot run the model on its node starts (the driver exits 2 with it).
NODE_CANNOT = "--ray: node "


def check_node_providers(providers: Sequence[str]) -> None:
    """In an actor: BadInput unless this node's onnxruntime has the first of
    `providers` (what `--provider` asked for: `rag_cli.models.onnx_runtime.PROVIDERS`),
    naming the node and what to do (`NODE_CANNOT` starts the message)."""
    import onnxruntime as ort

    from rag_cli.models.onnx_runtime import PROVIDERS

    wanted = providers[0] if providers else PROVIDERS["cpu"]
    if wanted in ort.get_available_providers():
        return
    import ray

    flag = next((k for k, v in PROVIDERS.items() if v == wanted), wanted)
    raise BadInput(f"{NODE_CANNOT}{ray.util.get_node_ip_address()}: its onnxruntime ({ort.__version__}) has no "
                   f"{wanted} for --provider {flag}; install onnxruntime-gpu on the cluster's GPU nodes "
                   "(in place of onnxruntime), or use --provider cpu")


def _node_message(exc: BaseException) -> str | None:
    """The message of `check_node_providers` when `exc` (a Ray error, or one it
    was raised from or wraps, as text: Ray passes an actor's error on as
    its traceback) carries one."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for line in str(exc).splitlines():
            at = line.find(NODE_CANNOT)
            if at >= 0 and " has no " in line:
                return line[at:].strip()
        exc = exc.__cause__ or exc.__context__
    return None


class RayEncoder(BiEncoder):
    """A `BiEncoder` whose `iter_encode_groups` runs on a Ray cluster;
    everything else (`dim`, the query graph check, re-embedding damaged
    cache parts) runs here, as the local encoder does.

    Args:
        folder, threads: as for `BiEncoder`; `threads` is per actor
            (0 or None: by the cluster's nodes, `actor_plan`).
        providers: the actors' onnxruntime providers (`execution_providers`
            of `--provider`), checked on their nodes (`check_node_providers`);
            this process's own session (the output size, the query graph
            check, damaged cache parts) runs on the CPU.
        connect: () -> the `ray` module, initialised (`ray_cluster`); called
            once, when there are texts to embed.
    """

    def __init__(self, folder: ModelFolder, connect: Callable[[], Any], threads: int | None = None,
                 providers: Sequence[str] | None = None):
        super().__init__(folder, threads, ["CPUExecutionProvider"])
        #: what the actors run the model on
        self.actor_providers = list(providers or ["CPUExecutionProvider"])
        self._connect = connect
        self._ray = None
        self.actor_threads = int(threads or 0)
        #: the actors of the last job sent (None before)
        self.plan: ActorPlan | None = None
        #: how many times a job that lost actors was planned again
        self.retries = 0

    @property
    def ray(self):
        """The `ray` module, connected to the cluster (on first use)."""
        if self._ray is None:
            self._ray = self._connect()
        return self._ray

    def report(self) -> dict:
        """What ran where, for the summary of `rag embed --ray`: `address`
        (the cluster's GCS address; None when Ray was not needed: every text
        was cached), `nodes` (alive now), `actors` and `threads` (per actor)
        of the last job sent, `retries` (jobs planned again after lost actors)."""
        plan = self.plan
        out = {"address": None, "nodes": 0, "actors": plan.actors if plan else 0,
               "threads": plan.threads if plan else 0, "retries": self.retries}
        if self._ray is not None:
            out["address"] = self._ray.get_runtime_context().gcs_address
            out["nodes"] = sum(1 for n in self._ray.nodes() if n.get("Alive"))
        return out

    def iter_encode_groups(
        self,
        groups: Iterable[tuple[Sequence[str], Sequence[str]]],
        prefix: str = "",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> Iterator[tuple[list[str], np.ndarray]]:
        """As `BiEncoder.iter_encode_groups`, on the cluster: the same
        batches, yielded in the same order, each (keys, vectors (b, d)
        float32) as the local path yields it.

        When actors are lost (a node died, an actor process was killed), the
        job is planned again on the nodes left (`cluster_plan`) and sent
        again from the first batch not yet yielded, up to `RETRIES` times.

        Raises:
            BadInput: see `actor_plan`.
            WorkFailed: the Ray job failed (naming Ray's error), or lost
                actors more than `RETRIES` times.
        """
        groups = iter(groups)
        first = next(groups, None)
        if first is None:  # nothing to embed: Ray is not started
            return
        on_gpu = any(p != "CPUExecutionProvider" for p in self.actor_providers)
        call = CALL_BATCHES_PER_THREAD * cluster_plan(self.ray, self.actor_threads, on_gpu).threads
        blocks: list[tuple[Any, list[int]]] = []  # (ref of a block, the sizes of its planned batches)
        for keys, texts, lengths in itertools.chain([first], groups):
            blocks += self._put_blocks(keys, texts, lengths, batch_tokens, call)
        b = j = 0  # the next batch to yield: batch j of block b
        for attempt in range(RETRIES + 1):
            try:
                for keys, vectors in self._run(*self._from(blocks, b, j), prefix, on_gpu):
                    off = 0
                    while off < len(keys):
                        n = blocks[b][1][j]
                        yield keys[off : off + n], vectors[off : off + n]
                        off += n
                        j += 1
                        if j == len(blocks[b][1]):
                            b, j = b + 1, 0
                return
            except LostActors as exc:
                if attempt == RETRIES:
                    raise WorkFailed(f"--ray: the Ray cluster lost the embedding actors {RETRIES + 1} times "
                                     f"(last: {exc}); the vectors embedded so far are cached, run again") from None
                self.retries += 1

    def _put_blocks(self, keys: Sequence[str], texts: Sequence[str], lengths: np.ndarray, batch_tokens: int,
                    call: int) -> list[tuple[Any, list[int]]]:
        """Plan one window's batches as the local path does (`plan_batches`
        over the texts' token `lengths`, which `rag embed` counted already:
        the driver tokenizes nothing again) and put them into the object
        store, `call` planned batches per block (a row per planned batch:
        `keys`, `texts`): one block is one actor call, so the blocks spread
        over the actors. Returns (ObjectRef, the sizes of its batches) per
        block, in plan order."""
        import pyarrow as pa

        plan = plan_batches(np.asarray(lengths), batch_tokens)
        out = []
        for start in range(0, len(plan), call):
            part = plan[start : start + call]
            table = pa.Table.from_arrays(
                [pa.array([[keys[i] for i in idx] for idx in part], pa.list_(pa.string())),
                 pa.array([[texts[i] for i in idx] for idx in part], pa.list_(pa.string()))], names=["keys", "texts"])
            out.append((self.ray.put(table), [len(idx) for idx in part]))
        return out

    def _from(self, blocks: list[tuple[Any, list[int]]], b: int, j: int) -> tuple[list[Any]]:
        """The blocks from batch j of block b on (block b cut to start there)."""
        refs = [ref for ref, _ in blocks[b:]]
        if j and refs:
            refs[0] = self.ray.put(self.ray.get(refs[0]).slice(j))
        return (refs,)

    def _run(self, refs: list[Any], prefix: str, on_gpu: bool) -> Iterator[tuple[list[str], np.ndarray]]:
        """Embed the blocks `refs` (`prefix` before each text) on the cluster
        as it is now, one actor call per block: yields (keys, vectors) per
        block, in order.

        Raises:
            LostActors: an actor or node died.
            WorkFailed: any other failure of the job.
        """
        if not refs:
            return
        from rag_cli.store.embeddings import to_matrix

        ray = self.ray
        plan = cluster_plan(ray, self.actor_threads, on_gpu)
        self.plan = plan = replace(plan, actors=min(plan.actors, len(refs)))  # no idle actors
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        resources = {"num_cpus": plan.num_cpus, **({"num_gpus": plan.num_gpus} if plan.num_gpus else {})}
        # a call per block; Ray Data wants a batch size with GPUs: a block's rows (a row is a planned batch, run
        # whole whatever the call, so the vectors are the same)
        batch_size = CALL_BATCHES_PER_THREAD * plan.threads if plan.num_gpus else None
        ds = ray.data.from_arrow_refs(refs).map_batches(
            _EmbedActor, batch_format="pyarrow", batch_size=batch_size,
            fn_constructor_kwargs={"shipped": ship_model(ray, self.folder), "threads": plan.threads,
                                   "providers": self.actor_providers, "prefix": prefix},
            compute=ray.data.ActorPoolStrategy(size=plan.actors), **resources)
        dim = self.dim
        try:
            for block in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                if block.num_rows:
                    yield block.column("key").to_pylist(), to_matrix(block.column("vector"), dim)
        except (KeyboardInterrupt, GeneratorExit):
            raise
        except Exception as exc:  # Ray wraps the actors' errors in its own types
            node = _node_message(exc)
            if node:  # the nodes cannot run --provider: the local path's "this onnxruntime has no ..." (exit 2)
                raise BadInput(node) from None
            if isinstance(exc, (BadInput, WorkFailed)):
                raise
            message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            if _lost_actors(exc):
                raise LostActors(message) from exc
            raise WorkFailed(f"--ray: the embedding job failed on the Ray cluster: {message}") from exc


class LostActors(Exception):
    """The Ray job lost an actor or a node (`RayEncoder` plans it again on the nodes left)."""


def _lost_actors(exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from or wraps) says that
    an actor, a worker process or a node died, rather than that the code
    failed."""
    lost = ("ActorDiedError", "RayActorError", "ActorUnavailableError", "NodeDiedError", "WorkerCrashedError",
            "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError")
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(name in {c.__name__ for c in type(exc).__mro__} for name in lost):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
