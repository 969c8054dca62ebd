"""The bi-encoder on a Ray cluster: `rag embed --ray [ADDRESS]` (the `ray` extra).

`RayEncoder` is a `BiEncoder` whose `iter_encode_groups` (what `rag embed`
calls with the texts to embed: cache misses only, one window of
chunks.parquet at a time) runs on Ray Data instead of this process:

1. The driver (this process) plans the batches exactly as the local path
   does (`plan_batches` over each window's token lengths: length-sorted,
   cut by the token budget) and puts each window into Ray's object store as
   one Arrow block: one row per planned batch (`keys`: the texts' sha256,
   `texts`), so a batch is never split or merged and its vectors are those
   of the local path (the int8 graph's activation scales are per batch).
2. `map_batches` runs `_EmbedActor`, an actor class: each actor loads the
   model once (one onnxruntime session, `threads` batches at once) and
   returns (key, vector) rows. Actors are sized from the cluster's CPUs
   (`actor_plan`), or one per GPU with `--provider cuda`.
3. The driver iterates the results in order (`iter_batches`, order
   preserved) and `rag embed` caches them as they come, so a killed driver
   keeps every finished block and the next run embeds only the rest; the
   results are written by the same code as the local path's
   (`rag_cli.stages.embed`): same embeddings.parquet, vector cache and
   fingerprint.

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

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.models.encoder import BiEncoder
from rag_cli.models.folder import ModelFolder, graph_files
from rag_cli.models.onnx_runtime import DEFAULT_BATCH_TOKENS, plan_batches
from rag_cli.models.ray_cluster import ActorPlan, cluster_plan

#: Planned batches an actor gets per call, per thread of the actor.
CALL_BATCHES_PER_THREAD = 2


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
    """A Ray Data actor: loads the shipped model once, then embeds blocks of
    planned batches (rows `keys`, `texts`: lists of strings) into rows `key`
    (string), `vector` (fixed_size_list<float32>[d])."""

    def __init__(self, shipped: ShippedModel, threads: int, providers: list[str]):
        import ray

        self.encoder = BiEncoder(unpack_model(ray, shipped), threads=threads, providers=providers)
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
        for idx, vectors in self.encoder.iter_encode(texts, self.encoder.folder.passage_prefix, batches=batches):
            out_keys += [keys[i] for i in idx]
            out_vectors.append(vectors)
        matrix = np.concatenate(out_vectors) if out_vectors else np.zeros((0, self.encoder.dim), np.float32)
        return pa.Table.from_arrays([pa.array(out_keys, pa.string()), vector_array(matrix)], names=["key", "vector"])


class RayEncoder(BiEncoder):
    """A `BiEncoder` whose `iter_encode_groups` runs on the Ray cluster that
    `ray` (the module, connected: `ray_cluster`) is connected to; everything
    else (tokenizing, `dim`, the query graph check, re-embedding damaged
    cache parts) runs here, as the local encoder does.

    Args:
        folder, threads, providers: as for `BiEncoder`; `threads` is per actor
            (0 or None: by the cluster's nodes, `actor_plan`).
        ray: the `ray` module, initialised.
    """

    def __init__(self, folder: ModelFolder, ray, threads: int | None = None, providers: Sequence[str] | None = None):
        super().__init__(folder, threads, providers)
        self.ray = ray
        self.actor_threads = int(threads or 0)
        #: the plan of the last `iter_encode_groups` (None before)
        self.plan: ActorPlan | None = None

    def iter_encode_groups(
        self,
        groups: Iterable[tuple[Sequence[str], Sequence[str]]],
        prefix: str = "",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> Iterator[tuple[list[str], np.ndarray]]:
        """As `BiEncoder.iter_encode_groups`, on the cluster: the same batches,
        each group (window) one block; results come back in order, one
        actor call (`CALL_BATCHES_PER_THREAD` x threads planned batches) at a
        time: yields (keys, vectors (b, d) float32).

        Raises:
            BadInput: see `actor_plan`.
            WorkFailed: the Ray job failed (naming Ray's error).
        """
        import pyarrow as pa

        from rag_cli.store.embeddings import to_matrix

        ray = self.ray
        refs = []
        for keys, texts in groups:
            tok = self.tokenizer.tokenize(texts, prefix)
            plan = plan_batches(tok.lengths, batch_tokens)
            rows_keys = [[keys[i] for i in idx] for idx in plan]
            rows_texts = [[texts[i] for i in idx] for idx in plan]
            refs.append(ray.put(pa.Table.from_arrays(
                [pa.array(rows_keys, pa.list_(pa.string())), pa.array(rows_texts, pa.list_(pa.string()))],
                names=["keys", "texts"])))
        if not refs:
            return
        on_gpu = any(p != "CPUExecutionProvider" for p in self.providers)
        self.plan = plan = cluster_plan(ray, self.actor_threads, on_gpu)
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        resources = {"num_cpus": plan.num_cpus, **({"num_gpus": plan.num_gpus} if plan.num_gpus else {})}
        ds = ray.data.from_arrow_refs(refs).map_batches(
            _EmbedActor, batch_format="pyarrow", batch_size=CALL_BATCHES_PER_THREAD * plan.threads,
            fn_constructor_kwargs={"shipped": ship_model(ray, self.folder), "threads": plan.threads,
                                   "providers": list(self.providers)},
            concurrency=plan.actors, **resources)
        dim = self.dim
        try:
            for block in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                if block.num_rows:
                    yield block.column("key").to_pylist(), to_matrix(block.column("vector"), dim)
        except (BadInput, WorkFailed, KeyboardInterrupt, GeneratorExit):
            raise
        except Exception as exc:  # Ray wraps the actors' errors in its own types
            raise WorkFailed(f"--ray: the embedding job failed on the Ray cluster: "
                             f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                             ) from exc
