"""`rag embed --ray`: embedding on a local two-node Ray cluster equals the
local path (rag_cli/models/ray_encoder.py), survives a worker node killed
mid-run, and a killed driver leaves the previous files intact and its
finished part cached.

The cluster (`ray.cluster_utils.Cluster`: a head and a worker node on
127.0.0.1, one CPU each, 300 MB object stores, no dashboard) is started once
for the module and always shut down. The corpus is a few hundred chunks of
real SciFact abstracts, embedded with the default model (int8 e5-small).
Without the ray extra these tests are skipped (under `CI`, they fail); they
are marked `slow`. The checks of `--ray` values, the actor sizing and a
missing extra need no cluster and run in `make test-fast`.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import require_module
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.project import Project
from rag_cli.store.embeddings import read_embeddings

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "sample_corpus" / "docs"

#: SciFact documents chunked (64-token chunks: about 14 per abstract, about 400 in all).
N_DOCS = 30
#: Of those, the documents of the earlier state whose embeddings.parquet a killed driver must leave intact.
N_EARLIER = 6
OBJECT_STORE = 300 * 1024 * 1024
MIN_COSINE = 0.9999


def rag_json(*args) -> dict:
    res = CliRunner().invoke(app, [str(a) for a in args] + ["--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def ray():
    """The ray module, its nodes kept on 127.0.0.1: Ray otherwise replaces a loopback address by the machine's
    own (`ray._private.services.get_node_ip_address`), which the nodes started here do not listen on."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read when ray is imported, and by the subprocesses
    try:
        yield require_module("ray", "ray[data] (the ray extra: pip install 'rag-cli[ray]')")
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def cluster(ray):
    """A head and a worker node on 127.0.0.1 (one CPU each); shut down at the end, whatever happens."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": OBJECT_STORE, "include_dashboard": False,
        "node_ip_address": "127.0.0.1"})
    try:
        c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, node_ip_address="127.0.0.1")
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture
def two_nodes(cluster):
    """The cluster with its worker node (added again after a test removed it)."""
    if not cluster.worker_nodes:
        cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
    return cluster


def _write_corpus(path: Path, docs: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, scifact_dir) -> list[dict]:
    docs = []
    with gzip.open(scifact_dir / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            docs.append(json.loads(line))
            if len(docs) == N_DOCS:
                break
    return docs


def _chunk(p: Path, docs: list[dict], model: Path) -> None:
    src = _write_corpus(p.parent / f"{p.name}-corpus.jsonl", docs)
    rag_json("chunk", src, "--format", "beir", "--size", 64, "--overlap", 0, "--model", model, "-p", p)


@pytest.fixture(scope="module")
def chunked(tmp_path_factory, corpus, default_model) -> Path:
    p = tmp_path_factory.mktemp("ray") / "chunked"
    _chunk(p, corpus, default_model)
    return p


@pytest.fixture(scope="module")
def local(tmp_path_factory, chunked):
    """The local path's embeddings of `chunked` (the reference)."""
    p = tmp_path_factory.mktemp("ray-local") / "proj"
    shutil.copytree(chunked, p)
    summary = rag_json("embed", "-p", p)
    return read_embeddings(p / "embeddings.parquet"), summary, p / "embeddings.parquet"


def _copy(chunked: Path, tmp_path: Path) -> Path:
    shutil.copytree(chunked, tmp_path / "proj")
    return tmp_path / "proj"


def assert_same(got, want) -> None:
    """Same rows in the same order, same fingerprint, cosine >= MIN_COSINE per row."""
    assert got.chunk_ids == want.chunk_ids
    assert got.text_sha256 == want.text_sha256
    assert (got.fingerprint, got.passage_fingerprint, got.dim) == (want.fingerprint, want.passage_fingerprint,
                                                                   want.dim)
    cos = np.sum(got.vectors * want.vectors, axis=1) / (
        np.linalg.norm(got.vectors, axis=1) * np.linalg.norm(want.vectors, axis=1))
    assert cos.min() >= MIN_COSINE, (cos.min(), got.chunk_ids[int(cos.argmin())])


@pytest.mark.slow
def test_ray_on_two_nodes_equals_the_local_path(two_nodes, chunked, local, tmp_path):
    want, local_summary, local_file = local
    p = _copy(chunked, tmp_path)
    summary = rag_json("embed", "--ray", two_nodes.address, "-p", p)
    assert summary["n_embedded"] == summary["n_chunks"] == local_summary["n_chunks"] > 200
    assert summary["ray"]["actors"] == 2 and summary["ray"]["threads"] == 1 and summary["ray"]["retries"] == 0
    assert summary["fingerprint"] == local_summary["fingerprint"]
    got = read_embeddings(p / "embeddings.parquet")
    assert_same(got, want)
    assert pq.read_schema(p / "embeddings.parquet").metadata == pq.read_schema(local_file).metadata
    # the same vector cache: a rerun embeds nothing, locally or on the cluster (which it does not even connect to)
    assert rag_json("embed", "-p", p)["n_embedded"] == 0
    again = rag_json("embed", "--ray", two_nodes.address, "-p", p)
    assert again["n_embedded"] == 0 and again["ray"]["address"] is None


@pytest.mark.slow
def test_a_worker_node_killed_mid_run_gives_the_same_result(ray, two_nodes, chunked, local, tmp_path):
    want = local[0]
    p = Project(_copy(chunked, tmp_path))
    started = threading.Event()
    result: dict = {}

    def run() -> None:
        try:
            result["summary"] = p.embed(ray=two_nodes.address,
                                        progress=lambda task, done, total: started.set()).to_dict()
        except BaseException as exc:  # noqa: BLE001 (the test thread reports it)
            result["error"] = exc
        finally:
            started.set()

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(300)
    assert "error" not in result and "summary" not in result, "the run ended before the worker was killed"
    (worker,) = two_nodes.worker_nodes
    two_nodes.remove_node(worker)  # its actor dies with a block in flight: Ray restarts it, retries the block
    t.join(300)
    assert not t.is_alive()
    assert "error" not in result, result.get("error")
    summary = result["summary"]
    assert summary["ray"]["nodes"] == 1  # the worker was gone before the run ended
    assert summary["n_embedded"] == summary["n_chunks"]
    assert_same(read_embeddings(p.embeddings_path), want)


@pytest.mark.slow
def test_a_killed_driver_leaves_the_previous_files_and_its_finished_part(two_nodes, corpus, default_model, tmp_path):
    p = tmp_path / "proj"
    _chunk(p, corpus[:N_EARLIER], default_model)
    rag_json("embed", "-p", p)  # the earlier state: its embeddings.parquet must survive the kill
    before = (p / "embeddings.parquet").read_bytes()
    _chunk(p, corpus, default_model)
    # the reference: the local path from the same state, uninterrupted (the earlier chunks' vectors come from the
    # cache: with the int8 model a vector depends slightly on the other texts of its batch, cosine >= 0.99)
    shutil.copytree(p, tmp_path / "reference")
    rag_json("embed", "-p", tmp_path / "reference")
    want = read_embeddings(tmp_path / "reference" / "embeddings.parquet")
    cache = next((p / "cache" / "vectors").iterdir())
    parts_before = set(cache.glob("part-*.parquet"))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rag_cli", "embed", "--ray", two_nodes.address, "-p", str(p),
                             "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not set(cache.glob("part-*.parquet")) - parts_before:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (p / "embeddings.parquet").read_bytes() == before
    new_parts = set(cache.glob("part-*.parquet")) - parts_before
    finished = sum(pq.read_metadata(f).num_rows for f in new_parts)
    assert finished > 0

    summary = rag_json("embed", "--ray", two_nodes.address, "-p", p)
    assert summary["n_embedded"] < summary["n_chunks"]
    assert summary["n_chunks"] - summary["n_embedded"] >= finished  # the finished part was reused
    assert_same(read_embeddings(p / "embeddings.parquet"), want)


@pytest.mark.parametrize("argv, want", [
    (["embed", "--ray"], ("local", [])),
    (["embed", "--ray", "--json"], ("local", [])),
    (["embed", "--ray", "auto"], ("auto", [])),
    (["update", "--ray", "ray://head:10001"], ("ray://head:10001", [])),
    (["build", "--ray", "docs/"], ("local", ["docs/"])),
    (["build", "--ray", "10.0.0.5:6379", "docs/"], ("10.0.0.5:6379", ["docs/"])),
    (["build", "docs/"], (None, ["docs/"])),
])
def test_ray_takes_an_optional_address(argv, want, monkeypatch, tmp_path):
    got = {}

    def fake(self, *args, ray=None, **kwargs):
        got["call"] = (ray, [str(a) for a in (args[0] if args else [])])
        raise SystemExit(0)

    for method in ("embed", "build", "update"):
        monkeypatch.setattr(Project, method, fake)
    res = CliRunner().invoke(app, argv + ["-p", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert got["call"] == want


def test_bad_addresses_and_a_missing_extra_exit_2(make_sample_project, tmp_path, monkeypatch):
    p = make_sample_project(tmp_path / "p").root
    before = (p / "embeddings.parquet").read_bytes()
    res = CliRunner().invoke(app, ["embed", "--ray", "not-an-address", "-p", str(p)])
    assert res.exit_code == 2 and "--ray 'not-an-address'" in res.output and "HOST:PORT" in res.output
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    for argv in (["embed", "--ray"], ["build", "--ray", str(SAMPLE_DOCS)], ["update", "--ray", "auto"]):
        res = CliRunner().invoke(app, argv + ["-p", str(p)])
        assert res.exit_code == 2 and "pip install 'rag-cli[ray]'" in res.output, (argv, res.output)
    assert (p / "embeddings.parquet").read_bytes() == before


def test_actors_are_sized_from_the_nodes():
    from rag_cli.errors import BadInput
    from rag_cli.models.ray_cluster import ActorPlan, actor_plan

    assert actor_plan([1, 1]) == ActorPlan(2, 1, 1, 0)  # the test cluster: one single-thread actor per node
    assert actor_plan([8, 4]) == ActorPlan(3, 4, 4, 0)  # threads from the smallest node: 2 + 1 actors
    assert actor_plan([8, 4], threads=8) == ActorPlan(1, 8, 8, 0)
    assert actor_plan([16, 16], gpus=2, on_gpu=True) == ActorPlan(2, 1, 1, 1)  # one actor per GPU
    with pytest.raises(BadInput, match="--threads 32"):
        actor_plan([8, 4], threads=32)
    with pytest.raises(BadInput, match="no GPU"):
        actor_plan([8], on_gpu=True)


class FakeRay:
    """Just enough of the `ray` module for `RayEncoder`'s planning and resuming: objects are kept as they are,
    two alive nodes of one CPU each."""

    def put(self, obj):
        return obj

    def get(self, ref):
        return ref

    def nodes(self):
        return [{"Alive": True, "Resources": {"CPU": 1}}] * 2


def test_lost_actors_resume_from_the_first_batch_not_yet_yielded(tiny_bi_encoder, monkeypatch):
    """A job that loses its actors (Ray reports them dead) is sent again from the first batch not yet yielded:
    the batches and vectors are those of the local path, each once. The actors' work is done here, by
    `_EmbedActor.__call__` on the same model."""
    from rag_cli.models.encoder import BiEncoder
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.ray_encoder import LostActors, RayEncoder, _EmbedActor
    from rag_cli.store.embeddings import to_matrix

    folder = ModelFolder.load(tiny_bi_encoder)
    texts = [f"passage {i} " + "word " * (i % 23) for i in range(300)]
    lengths = np.minimum(BiEncoder(folder).count_tokens(texts, "p: "), folder.max_length)
    groups = [([f"k{i}" for i in range(0, 200)], texts[:200], lengths[:200]),
              ([f"k{i}" for i in range(200, 300)], texts[200:], lengths[200:])]
    local = list(BiEncoder(folder, threads=1).iter_encode_groups(groups, "p: ", batch_tokens=256))
    assert len(local) > 10

    actor = _EmbedActor.__new__(_EmbedActor)
    actor.encoder = BiEncoder(folder, threads=1)
    sent: list[int] = []

    def run(self, refs, prefix, on_gpu):
        sent.append(sum(ref.num_rows for ref in refs))  # planned batches sent in this attempt
        for n, ref in enumerate(refs):
            if len(sent) < 3 and n == 2:  # the first two attempts lose their actors after two blocks
                raise LostActors("ActorDiedError: the node died")
            out = actor(ref)
            yield out.column("key").to_pylist(), to_matrix(out.column("vector"), actor.encoder.dim)

    monkeypatch.setattr(RayEncoder, "_run", run)
    enc = RayEncoder(folder, FakeRay, threads=1)
    actor.prefix = "p: "
    got = list(enc.iter_encode_groups(groups, "p: ", batch_tokens=256))
    assert enc.retries == 2 and sent[0] > sent[1] > sent[2] > 0
    assert [k for k, _ in got] == [k for k, _ in local]  # the same batches, in the same order, each once
    for (_, a), (_, b) in zip(got, local):
        np.testing.assert_array_equal(a, b)


def test_lost_actors_are_told_from_failing_code():
    from rag_cli.models.ray_encoder import _lost_actors

    class ActorDiedError(Exception):
        pass

    class RayTaskError(Exception):
        pass

    wrapped = RayTaskError("task failed")
    wrapped.__cause__ = ActorDiedError("the actor's node died")
    assert _lost_actors(wrapped) and _lost_actors(ActorDiedError())
    assert not _lost_actors(RayTaskError("ValueError: a bug in the model code"))


def _free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago: nothing listens on it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_head_node_fails_at_once_not_after_minutes_of_retries():
    """`--ray HOST:PORT` or `ray://HOST:PORT` with nothing listening there is exit 1 (WorkFailed) from a 5 s TCP
    probe: `ray.init` itself retried such an address for 30 to 40 s (a fresh-user review)."""
    import socket

    from rag_cli.errors import WorkFailed
    from rag_cli.models.ray_cluster import reachable

    port = _free_port()
    for address, what in ((f"127.0.0.1:{port}", "no Ray head node"), (f"ray://127.0.0.1:{port}",
                                                                      "no Ray Client server")):
        t0 = time.perf_counter()
        with pytest.raises(WorkFailed, match=f"--ray {address}: {what} answers there"):
            reachable(address)
        assert time.perf_counter() - t0 < 10
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        reachable(f"127.0.0.1:{listening.getsockname()[1]}")  # something answers: left to Ray
        reachable(f"ray://127.0.0.1:{listening.getsockname()[1]}")
    for other in ("local", "auto"):
        reachable(other)  # Ray's own checks


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_closed_port_exits_1_fast_with_one_line(ray, tiny_chunked, scheme):
    """The whole command, as a user runs it: exit 1 within seconds, one line on stderr (rag-cli's, naming the
    address), none of Ray's, nothing on stdout."""
    address = f"{scheme}127.0.0.1:{_free_port()}"
    t0 = time.perf_counter()
    proc = _rag_process("embed", "--ray", address, "-p", str(tiny_chunked))
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert time.perf_counter() - t0 < 20  # Python and the imports, then a refused connection
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"error: --ray {address}: "), err
    assert not (tiny_chunked / "embeddings.parquet").exists()


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "ray://head:0", "[::1]:70000"])
def test_a_port_out_of_range_is_bad_input(make_sample_project, tmp_path, address):
    p = make_sample_project(tmp_path / "p").root
    res = CliRunner().invoke(app, ["embed", "--ray", address, "-p", str(p)])
    assert res.exit_code == 2, res.output
    assert f"--ray {address!r}: port" in res.output and "out of range (1-65535)" in res.output
    assert "HOST:PORT" in res.output

def _rag_process(*args: str) -> subprocess.Popen:
    """`python -m rag_cli ARGS` in a subprocess (this checkout first on the path), stdout and stderr piped."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("RAG_DEBUG", None)
    return subprocess.Popen([sys.executable, "-m", "rag_cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigterm_during_a_ray_run_exits_130_with_the_previous_files_intact(ray, chunked, tmp_path):
    """SIGTERM (a cron timeout, `kill`) while a local Ray instance started by the command embeds: exit 130 and
    "interrupted; the previous files are intact", as without --ray; not Ray's own handler (exit 15 and a C++
    stack dump), and Ray shut down (a fresh-user review)."""
    p = _copy(chunked, tmp_path)
    before = {f.name: f.read_bytes() for f in p.iterdir() if f.is_file()}
    proc = _rag_process("embed", "--ray", "-p", str(p))
    try:
        deadline = time.monotonic() + 300
        while not any((p / "cache").rglob("part-*.parquet")):  # the run has started: its first part is cached
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err == "interrupted; the previous files are intact\n" and out == ""  # no Ray line on either stream
    assert {f.name: f.read_bytes() for f in p.iterdir() if f.is_file()} == before  # no embeddings.parquet


@pytest.fixture
def tiny_chunked(tiny_bi_encoder, tmp_path) -> Path:
    """sample_corpus/docs chunked for the tiny bi-encoder, not embedded yet."""
    p = Project.create(tmp_path / "tiny", model={"embedder": str(tiny_bi_encoder)})
    p.chunk([SAMPLE_DOCS])
    return p.root


@pytest.mark.slow
def test_a_ray_run_prints_only_rag_cli_output(ray, tiny_chunked):
    """`rag embed --ray --json` with a local Ray instance: stdout is the JSON summary alone, and stderr is empty
    (Ray's token-authentication warning, its C++ log lines and the driver's error listener, which prints to
    stdout, are kept off; RAG_DEBUG=1 shows them)."""
    proc = _rag_process("embed", "--ray", "--json", "-p", str(tiny_chunked))
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert err == ""
    summary = json.loads(out)
    assert summary["n_embedded"] == summary["n_chunks"] > 0 and summary["ray"]["actors"] >= 1


@pytest.mark.slow
def test_build_with_ray_says_where_it_embedded_as_embed_does(two_nodes, tiny_bi_encoder, tmp_path):
    """`rag build --ray` names the Ray cluster in its summary line and in --json (`embed.ray`), as `rag embed
    --ray` and `rag update --ray` do (a fresh-user review found it missing)."""
    p = tmp_path / "p"
    argv = ["build", str(SAMPLE_DOCS), "--ray", two_nodes.address, "--model", str(tiny_bi_encoder), "-p", str(p)]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert f" embedded on Ray at {two_nodes.address} (2 actors x 1 thread), " in res.output, res.output
    shutil.rmtree(p)
    out = rag_json(*argv)
    assert out["embed"]["n_embedded"] > 0 and out["embed"]["ray"]["address"] and out["embed"]["ray"]["actors"] >= 1


@pytest.mark.slow
def test_provider_cuda_is_checked_on_the_nodes_not_on_the_driver(ray, cluster, tiny_chunked):
    """`--ray --provider cuda`: the driver's onnxruntime (CPU-only here) is not asked; the cluster is. No GPU
    in the cluster: exit 2 saying so. A node that declares a GPU (Ray's GPU resource) but whose onnxruntime
    lacks CUDAExecutionProvider: exit 2 naming that node and onnxruntime-gpu, from the actor's own check;
    nothing written either way."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: the nodes' check would pass")
    argv = ["embed", "--ray", cluster.address, "--provider", "cuda", "-p", str(tiny_chunked)]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert "the Ray cluster has no GPU" in res.output and "this onnxruntime" not in res.output
    gpu_node = cluster.add_node(num_cpus=1, num_gpus=1, object_store_memory=OBJECT_STORE,
                                node_ip_address="127.0.0.1")
    try:
        cluster.wait_for_nodes()
        t0 = time.perf_counter()
        res = CliRunner().invoke(app, argv)
        assert time.perf_counter() - t0 < 120
    finally:
        cluster.remove_node(gpu_node)
    assert res.exit_code == 2, res.output
    assert "--ray: node 127.0.0.1: its onnxruntime" in res.output, res.output
    assert "has no CUDAExecutionProvider for --provider cuda" in res.output and "onnxruntime-gpu" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert not (tiny_chunked / "embeddings.parquet").exists()
    assert "cuda" not in (tiny_chunked / "rag.toml").read_text()


def test_a_local_ray_instance_listens_on_loopback_only(ray):
    """`--ray` without an address starts its local instance on 127.0.0.1: every node's address (raylet, object
    store) is the loopback one, never the machine's own."""
    from rag_cli.models.ray_cluster import ray_cluster

    if ray.is_initialized():
        ray.shutdown()
    with ray_cluster() as r:
        nodes = r.nodes()
        assert nodes and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
        assert r.get_runtime_context().gcs_address.startswith("127.0.0.1:")


def test_a_local_ray_instance_is_asked_for_the_loopback_address(ray, monkeypatch):
    """On a machine with a routable address Ray would bind that (`get_node_ip_address`): the local instance is
    started with the node address 127.0.0.1 whatever the machine's addresses are."""
    from rag_cli.errors import WorkFailed
    from rag_cli.models.ray_cluster import ray_cluster

    asked = {}

    def init(**kwargs):
        asked.update(kwargs)
        raise RuntimeError("recorded")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.raises(WorkFailed, match="recorded"):
        with ray_cluster():
            pass
    assert asked["address"] == "local" and asked["_node_ip_address"] == "127.0.0.1"
