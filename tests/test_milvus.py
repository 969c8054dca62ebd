"""The milvus backend (`rag_cli.index.milvus`) against Milvus Lite, on real data.

A SciFact subset (the e2e one of tests/test_cli_e2e.py: every relevant
document of the first 25 test queries plus distractors, ~120 abstracts, one
chunk each at --size 500) is built once with the local default backend
(hnswlib); copies of the project are indexed with `exact` (the ground truth)
and with `milvus` on a Milvus Lite file in the test's temporary folder. The
Lite server is always closed (`rag_cli.index.milvus.close_clients`) when the
module's tests end. Proved here:

- sparse: the top 10 of every query equal local BM25 (equal scores may come in
  either order);
- dense: recall@10 against local exact search >= 0.99;
- hybrid: nDCG@10 within 0.005 of the local backend's;
- `--filter` gives the local filtered results;
- a new generation is a new collection and the alias moves to it atomically;
  `rag rollback` moves it back; pruned generations' collections are dropped;
- every refusal changes nothing: the alias moves before CURRENT (an alias
  named like a collection is exit 2 before anything is published), and a
  rollback is checked (a busy Lite file, a collection gone) before CURRENT moves;
- `rag update` with a changed, a removed and an added document.

The unit tests at the top need neither Milvus nor the default model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from conftest import require_module

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # relative: Milvus sums float32 BM25 weights in its own order


# --------------------------------------------------------------------------- without Milvus
def test_sparse_vectors_reproduce_bm25s_scores():
    """A chunk's sparse vector (its column of bm25s's score matrix) dotted with the query's term counts
    is bm25s's score, repeated query terms included, for every chunk."""
    from rag_cli.index.milvus import MilvusSparse
    from rag_cli.index.milvus_publish import sparse_rows
    from rag_cli.index.sparse import SparseIndex

    texts = ["apple banana apple", "banana cherry", "cherry cherry durian apple", "elderberry", "苹果和香蕉",
             "the quick brown fox jumps over apples"]
    idx = SparseIndex.build(texts)
    weights = sparse_rows(idx.retriever)
    assert weights.shape[0] == len(texts)
    wrapper = MilvusSparse(idx, {"uri": "unused", "alias": "a"}, "a_gen_000001")
    for query in ("apple apple cherry", "banana", "香蕉 苹果", "fox apples apple", "unknownword"):
        vec = wrapper.query_vector(query)
        q = np.zeros(weights.shape[1], dtype=np.float64)
        for tid, count in vec.items():
            q[tid] = count
        np.testing.assert_allclose(weights @ q, idx.scores(query), rtol=1e-6, atol=1e-7)
    assert wrapper.query_vector("apple apple cherry")[idx.retriever.vocab_dict["appl"]] == 2.0
    assert wrapper.idf(["appl"]) == idx.idf(["appl"])  # the rest is the local index's


def test_row_filter_allows_exactly_the_masked_rows():
    """The expression (Milvus's syntax here is also Python's) is true for exactly the rows of the mask:
    runs as ranges, the rest as a list, the excluded rows negated when that is shorter."""
    from rag_cli.index.milvus import row_filter

    assert row_filter(None) == "" and row_filter(np.ones(5, bool)) == ""
    assert row_filter(np.zeros(5, bool)) is None
    assert row_filter(np.array([1, 0, 0, 1, 0], bool)) == "row in [0,3]"
    assert row_filter(np.array([0, 1, 1, 1, 1, 0, 0, 0, 0], bool)) == "(row >= 1 and row < 5)"
    assert row_filter(np.array([1] * 20 + [0] + [1] * 20, bool)) == "not (row in [20])"
    rng = np.random.default_rng(0)
    for density in (0.05, 0.5, 0.95):
        mask = rng.random(300) < density
        mask[100:160] = density > 0.5  # a document's worth of consecutive rows
        expr = row_filter(mask)
        assert [bool(eval(expr, {}, {"row": r})) for r in range(300)] == mask.tolist()  # noqa: S307


def test_rows_from_a_replaced_collection_are_badinput_not_indexerror(monkeypatch):
    """A collection without an owner token (published before tokens) that another project replaced
    returns rows past the generation's chunks: BadInput, never an IndexError or foreign rows."""
    import rag_cli.index.milvus as mv
    from rag_cli.errors import BadInput
    from rag_cli.index.sparse import SparseIndex

    class Fake:
        def search(self, *a, **kw):
            return [[{"id": 7, "distance": 1.0}, {"id": 0, "distance": 0.5}]]

    monkeypatch.setattr(mv, "loaded", lambda *a: Fake())
    sparse = mv.MilvusSparse(SparseIndex.build(["apple banana", "cherry"]), {"uri": "u", "alias": "a"}, "a_gen_000001")
    with pytest.raises(BadInput, match="replaced by another project.*rag index"):
        sparse.search("apple", 5)
    dense = mv.MilvusIndex(np.eye(2, dtype=np.float32), {"n": 2, "dim": 2, "milvus_index": "flat"}, "a_gen_000001", "u")
    with pytest.raises(BadInput, match="replaced by another project"):
        dense.search(np.eye(2, dtype=np.float32)[:1], 2)


def test_settings_and_uris(tmp_path):
    from rag_cli.config import Config, IndexConfig
    from rag_cli.errors import BadInput
    from rag_cli.index.milvus import collection_of, concrete, default_alias, resolve_uri

    assert resolve_uri("http://127.0.0.1:19530", tmp_path) == "http://127.0.0.1:19530"
    assert resolve_uri("", tmp_path) == str(tmp_path / "milvus.db")
    assert resolve_uri("sub/m.db", tmp_path) == str(tmp_path / "sub" / "m.db")
    assert resolve_uri("/abs/m.db", tmp_path) == "/abs/m.db"
    alias = default_alias(tmp_path)
    assert alias.startswith("rag_") and len(alias) == 16 and alias != default_alias(tmp_path / "other")
    assert collection_of("docs", "gen-000012") == "docs_gen_000012"
    c = concrete(IndexConfig(backend="milvus"), tmp_path)
    assert (c.uri, c.collection) == ("milvus.db", alias)  # resolved where used: a moved project opens its own
    assert concrete(IndexConfig(backend="milvus", uri="sub/m.db"), tmp_path).uri == "sub/m.db"
    with pytest.raises(BadInput, match="--collection '1bad-name'"):
        Config().with_options("index", {"collection": "1bad-name"})
    with pytest.raises(BadInput, match="--milvus-index 'diskann'"):
        Config().with_options("index", {"milvus_index": "diskann"})


def test_missing_pymilvus_is_exit_2_naming_the_extra(tmp_path, tiny_bi_encoder):
    """Without pymilvus, `rag index --backend milvus` exits 2 before reading anything, naming the extra."""
    from rag_cli import Project

    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.chunk([REPO / "sample_corpus" / "docs"])
    p.embed()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pymilvus.py").write_text("raise ImportError('No module named pymilvus (hidden by the test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(REPO)])}
    res = subprocess.run([sys.executable, "-m", "rag_cli", "index", "--backend", "milvus", "--uri",
                          str(tmp_path / "m.db"), "-p", str(p.root)], capture_output=True, text=True, env=env)
    assert res.returncode == 2, res.stderr
    assert "pip install 'rag-cli[milvus]'" in " ".join(res.stderr.split())
    assert not (p.root / "index").exists() and not (tmp_path / "m.db").exists()


@pytest.mark.slow
def test_a_milvus_generation_without_pymilvus_is_exit_2(tmp_path, tiny_bi_encoder, milvus_lite):
    """A project published to Milvus Lite, searched where pymilvus is missing: exit 2 naming the extra."""
    from rag_cli import Project
    from rag_cli.index.milvus import close_clients

    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.chunk([REPO / "sample_corpus" / "docs"])
    p.embed()
    p.index(backend="milvus", uri="m.db")
    assert p.search("reciprocal rank fusion", mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    close_clients()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pymilvus.py").write_text("raise ImportError('No module named pymilvus (hidden by the test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(REPO)])}
    for mode in ("dense", "sparse"):
        res = subprocess.run([sys.executable, "-m", "rag_cli", "search", "bm25", "--mode", mode, "-p", str(p.root)],
                             capture_output=True, text=True, env=env)
        assert res.returncode == 2, res.stderr
        assert "pip install 'rag-cli[milvus]'" in " ".join(res.stderr.split())


@pytest.mark.slow
def test_a_backend_given_up_leaves_no_collection_once_pruned(tmp_path, tiny_bi_encoder, milvus_lite):
    """milvus, then exact: the milvus generation (kept for rollback) keeps its collection and alias; once
    it is pruned, both are gone."""
    from rag_cli import Project
    from rag_cli.index.milvus import client

    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.chunk([REPO / "sample_corpus" / "docs"])
    p.embed()
    first = p.index(backend="milvus", uri="m.db", collection="given_up").generation
    c = client(str(p.root / "m.db"))
    assert c.describe_alias("given_up")["collection_name"] == "given_up_" + first.replace("-", "_")
    p.index(backend="exact")
    assert "given_up_" + first.replace("-", "_") in c.list_collections()  # still a rollback target
    p.index(backend="exact", keep=0)
    assert c.list_collections() == [] and "given_up" not in c.list_aliases()["aliases"]


def _tiny_project(folder: Path, encoder: Path, docs: Path | None = None, **chunk):
    """A project of `docs` (sample_corpus/docs) chunked (with [chunk] options `chunk`) and embedded with the
    tiny bi-encoder (not indexed)."""
    from rag_cli import Project

    p = Project.create(folder, model={"embedder": str(encoder)})
    p.chunk([docs or REPO / "sample_corpus" / "docs"], **chunk)
    p.embed()
    return p


@pytest.mark.slow
def test_two_projects_sharing_a_collection_name_never_mix(tmp_path, tiny_bi_encoder, milvus_lite):
    """Two projects with the same --collection on one Milvus: the second's publish is refused (naming
    --collection and the first project) before anything changes; a collection replaced behind a
    generation's back (another token) is BadInput at search, not another corpus's rows; pruning in one
    project never drops the other's collections."""
    from rag_cli.errors import BadInput
    from rag_cli.index.milvus import TOKEN, client

    uri = str(tmp_path / "shared.db")
    a = _tiny_project(tmp_path / "a", tiny_bi_encoder)
    other_docs = tmp_path / "other-docs"
    other_docs.mkdir()
    (other_docs / "zebra.md").write_text("# Zebras\n\nZebras graze on the savanna in large herds.\n")
    b = _tiny_project(tmp_path / "b", tiny_bi_encoder, other_docs)
    first = a.index(backend="milvus", uri=uri, collection="docs").generation
    c = client(uri)
    before = sorted(c.list_collections())
    with pytest.raises(BadInput, match=r"--collection docs.*another project \(" + str(a.root.resolve())):
        b.index(backend="milvus", uri=uri, collection="docs")
    assert sorted(c.list_collections()) == before and not list((b.root / "index").glob("gen-*"))
    assert c.describe_alias("docs")["collection_name"] == "docs_" + first.replace("-", "_")
    assert a.search("reciprocal rank fusion", mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    # b with its own alias, then pruning everything older in b: a's collection stays
    b.index(backend="milvus", uri=uri, collection="docs_b")
    b.index(backend="milvus", uri=uri, collection="docs_b", keep=0)
    assert "docs_" + first.replace("-", "_") in c.list_collections()
    assert a.search("reciprocal rank fusion", mode="hybrid").hits[0].doc_id == "hybrid_rrf.md"
    # a collection replaced behind the generation's back (another publisher's token): refused at search
    from rag_cli.index.milvus import close_clients

    c.alter_collection_properties("docs_" + first.replace("-", "_"), properties={TOKEN: "someone-else"})
    close_clients()  # a fresh process: the collection is checked when first loaded
    a2 = type(a)(a.root)
    for mode in ("sparse", "dense", "hybrid"):
        with pytest.raises(BadInput, match="replaced by another project.*rag index"):
            a2.search("reciprocal rank fusion", mode=mode)
    close_clients()


@pytest.mark.slow
def test_a_copied_or_moved_project_never_touches_the_originals_collections(tmp_path, tiny_bi_encoder, milvus_lite):
    """`cp -r P Q`: Q's writes never drop or overwrite P's collections (owned by P's folder), whether Q
    reaches P's Milvus (an absolute --uri: refused while the alias is P's; with its own --collection, P's
    pruned-in-Q generation stays) or its own file (the default relative uri, resolved in Q). A project
    with a relative --uri that is moved still searches its own file and can write again."""
    from rag_cli import Project
    from rag_cli.errors import BadInput
    from rag_cli.index.milvus import client, close_clients

    q_text = "reciprocal rank fusion"
    shared = str(tmp_path / "shared.db")
    p = _tiny_project(tmp_path / "p", tiny_bi_encoder)
    gen = p.index(backend="milvus", uri=shared, collection="docs").generation
    p_coll = "docs_" + gen.replace("-", "_")
    close_clients()
    shutil.copytree(p.root, tmp_path / "q")
    q = Project(tmp_path / "q")
    with pytest.raises(BadInput, match=r"--collection docs.*another project"):
        q.index(keep=0)  # uri and alias from rag.toml: P's
    q.index(collection="docs_q", keep=0)  # prunes Q's copy of P's generation, not P's collection
    c = client(shared)
    assert p_coll in c.list_collections() and c.describe_alias("docs")["collection_name"] == p_coll
    assert p.search(q_text, mode="hybrid").hits[0].doc_id == "hybrid_rrf.md"
    assert q.search(q_text, mode="hybrid").hits[0].doc_id == "hybrid_rrf.md"
    close_clients()

    # the default uri (milvus.db in the project folder): recorded relative, so the copy opens its own file
    r = _tiny_project(tmp_path / "r", tiny_bi_encoder)
    r.index(backend="milvus", uri="sub/m.db")
    assert json.loads(next((r.root / "index").glob("gen-*/dense/rag_dense.json")).read_text())["uri"] == "sub/m.db"
    r_names = client(str(r.root / "sub" / "m.db")).list_collections()
    close_clients()
    shutil.copytree(r.root, tmp_path / "s")
    shutil.rmtree(tmp_path / "s" / "sub")
    s = Project(tmp_path / "s")
    s.index(keep=0)
    assert s.search(q_text, mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    close_clients()
    assert client(str(r.root / "sub" / "m.db")).list_collections() == r_names
    assert r.search(q_text, mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    close_clients()

    # moved: the relative file moves with it; search and a new generation work at the new place
    shutil.move(str(r.root), str(tmp_path / "moved"))
    m = Project(tmp_path / "moved")
    assert m.search(q_text, mode="dense").hits
    m.index(keep=0)
    assert m.search(q_text, mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    assert len(client(str(tmp_path / "moved" / "sub" / "m.db")).list_collections()) == 1
    close_clients()


@pytest.mark.slow
def test_a_rollback_whose_alias_switch_fails_changes_nothing(tmp_path, tiny_bi_encoder, milvus_lite):
    """`rag rollback` with the Milvus Lite file gone: exit 2 (BadInput: the file the generations name is
    missing, like a generation's own file) naming the file and `rag index`, CURRENT still the newer
    generation, and no empty Lite file created; with the file back, rollback works."""
    from rag_cli.errors import BadInput
    from rag_cli.index.milvus import close_clients
    from rag_cli.store.index_folder import current_generation

    p = _tiny_project(tmp_path / "p", tiny_bi_encoder)
    first = p.index(backend="milvus", uri="m.db").generation
    second = p.index(backend="milvus", uri="m.db").generation
    close_clients()
    saved = tmp_path / "saved.db"
    shutil.move(str(p.root / "m.db"), str(saved))
    with pytest.raises(BadInput, match=re.escape(str(p.root / "m.db")) + " does not exist.*rag index"):
        p.rollback()
    assert current_generation(p.root / "index").name == second
    assert not (p.root / "m.db").exists()
    close_clients()
    shutil.move(str(saved), str(p.root / "m.db"))
    assert p.rollback().to == first
    assert current_generation(p.root / "index").name == first
    close_clients()


@pytest.mark.slow
def test_a_refused_rollback_never_moves_current(tmp_path, tiny_bi_encoder, milvus_lite):
    """`rag rollback` is checked before CURRENT moves (a `rag serve` would hot-reload every move): with the
    Lite file held by another process it is WorkFailed naming the holder, and to a generation whose
    collection is gone (the file deleted and published anew by `rag index`) BadInput naming `rag index`;
    either way CURRENT is never rewritten (the same file, not moved and moved back)."""
    from rag_cli.errors import BadInput, WorkFailed
    from rag_cli.index.milvus import close_clients

    p = _tiny_project(tmp_path / "p", tiny_bi_encoder)
    p.index(backend="milvus", uri="m.db")
    second = p.index(backend="milvus", uri="m.db").generation
    close_clients()
    current = p.root / "index" / "CURRENT"
    before = (current.stat().st_ino, current.read_bytes())
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(p.root / "m.db" / "LOCK")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(WorkFailed, match=re.escape(str(p.root / "m.db")) + f" is in use by pid {holder.pid}"):
            p.rollback()
        assert (current.stat().st_ino, current.read_bytes()) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    shutil.rmtree(p.root / "m.db")
    third = p.index(keep=5).generation  # a new file: only the new generation's collection
    before = (current.stat().st_ino, current.read_bytes())
    with pytest.raises(BadInput, match=f"cannot roll back to {second}: its collection .* is not in Milvus at "
                                       f".*run `rag index`.*nothing was changed"):
        p.rollback()
    assert (current.stat().st_ino, current.read_bytes()) == before
    assert p.search("reciprocal rank fusion", mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    assert third in current.read_text()
    close_clients()


@pytest.mark.slow
def test_rollback_moves_the_alias_of_the_generation_it_makes_current(tmp_path, tiny_bi_encoder, milvus_lite):
    """The rule: `rag rollback` moves the alias the target generation was published under (its own
    rag_dense.json), none for a local generation; another generation's alias is left serving what it
    served, and `rag status` names it in its stale-index line."""
    from rag_cli.index.milvus import client, close_clients, collection_of

    p = _tiny_project(tmp_path / "p", tiny_bi_encoder)
    first = p.index(backend="milvus", uri="m.db", collection="one").generation
    second = p.index(collection="two").generation
    c = client(str(p.root / "m.db"))
    c.alter_alias(collection_of("two", second), "one")  # moved away behind the project's back
    assert p.rollback().to == first
    assert c.describe_alias("one")["collection_name"] == collection_of("one", first)
    assert c.describe_alias("two")["collection_name"] == collection_of("two", second)
    why = next(s for s in p.status().stale if s["stage"] == "index")["why"]
    assert f"the Milvus alias two at {p.root / 'm.db'} still serves the collection it pointed at" in why, why
    assert "one at" not in why
    third = p.index(backend="exact").generation
    p.index(backend="milvus", collection="two")
    p.rollback()  # to the exact generation `third`: no alias moves
    assert p.status().current == third
    assert c.describe_alias("two")["collection_name"] != collection_of("two", third)
    why = next(s for s in p.status().stale if s["stage"] == "index")["why"]
    assert "the Milvus alias two at" in why and "which has none" in why, why
    close_clients()


# --------------------------------------------------------------------------- when Milvus cannot be used
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def rag_cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """`rag ARGS` in a fresh process of this checkout (its own Milvus Lite, as a second shell has)."""
    return subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args)], capture_output=True, text=True,
                          env=env or ENV, timeout=600)


def only_message(res: subprocess.CompletedProcess, code: int) -> str:
    """The exit status is `code` and stderr is rag-cli's one `error: ...` line and nothing else (no log
    line of pymilvus or Milvus Lite, no traceback); returns that message."""
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released): a connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generations(p) -> list[str]:
    return sorted(g.name for g in (Path(p.root) / "index").glob("gen-*"))


def test_an_unreachable_server_is_exit_1_naming_the_uri(tmp_path, tiny_bi_encoder, monkeypatch):
    """`rag index --backend milvus --uri http://127.0.0.1:PORT` with nothing listening: exit 1 (a service
    that is down is a failure of the work), one line naming the URI and what to check, no pymilvus log
    line, no generation written; the connection waits CONNECT_TIMEOUT seconds, not pymilvus's default."""
    pymilvus = require_module("pymilvus", "pymilvus", "milvus")
    import rag_cli.index.milvus_connection as conn
    from rag_cli.errors import WorkFailed

    uri = f"http://127.0.0.1:{free_port()}"
    p = _tiny_project(tmp_path / "p", tiny_bi_encoder)
    config = (p.root / "rag.toml").read_bytes()
    res = rag_cli("index", "--backend", "milvus", "--uri", uri, "-p", p.root)
    msg = only_message(res, 1)
    assert f"cannot reach the Milvus server at {uri}" in msg and "check that Milvus is running" in msg
    assert generations(p) == [] and not (p.root / "index" / "CURRENT").exists()
    assert (p.root / "rag.toml").read_bytes() == config  # --backend and --uri are not recorded

    # a port that accepts connections and never answers (a hung server): the wait is CONNECT_TIMEOUT
    timeouts = []
    real = pymilvus.MilvusClient

    def spy(*args, **kwargs):
        timeouts.append(kwargs.get("timeout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pymilvus, "MilvusClient", spy)
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        hung_uri = f"http://127.0.0.1:{hung.getsockname()[1]}"
        with pytest.raises(WorkFailed, match=re.escape(hung_uri) + r".* within 5 s"):
            conn.client(hung_uri)
    assert timeouts == [conn.CONNECT_TIMEOUT] == [5.0]
    assert hung_uri not in conn._clients


def test_a_uri_of_another_scheme_is_exit_2_naming_the_accepted_forms(tmp_path, tiny_bi_encoder):
    """`--uri ftp://x/y.db` (not a path: no folder `ftp:` made) and `--uri grpc://127.0.0.1:19530` (not a
    scheme pymilvus connects with; it would call it illegal, after a connection wait): exit 2 at once,
    naming --uri and the accepted forms, nothing written. The schemes pymilvus takes are servers."""
    require_module("pymilvus", "pymilvus", "milvus")
    from rag_cli.index.milvus_connection import is_server

    assert all(map(is_server, ("http://h:19530", "HTTPS://h", "tcp://h:19530", "unix:/run/milvus.sock")))
    assert not any(map(is_server, ("grpc://h:19530", "m.db", "/abs/unix:x.db")))
    p = _tiny_project(tmp_path / "p", tiny_bi_encoder)
    config = (p.root / "rag.toml").read_bytes()
    for uri in ("ftp://x/y.db", "grpc://127.0.0.1:19530"):
        msg = only_message(rag_cli("index", "--backend", "milvus", "--uri", uri, "-p", p.root), 2)
        assert f"--uri {uri}: the scheme {uri.split(':')[0]}:// is not one Milvus is reached with" in msg
        assert "a local path ending in .db" in msg and "http://host:19530" in msg
        assert generations(p) == [] and not (p.root / "ftp:").exists() and not (p.root / "grpc:").exists()
        assert (p.root / "rag.toml").read_bytes() == config


def test_lite_holders_names_the_process_holding_the_lock(tmp_path):
    """`lite_holders` finds the process that holds a Lite folder's LOCK (from /proc/locks, without taking
    the lock), and `lite_busy` sees it held; both see it free once that process is gone."""
    fcntl = pytest.importorskip("fcntl")  # noqa: F841 - flock: Linux and macOS
    from rag_cli.index.milvus_connection import busy, lite_busy, lite_holders

    folder = tmp_path / "m.db"
    folder.mkdir()
    assert lite_holders(folder) == [] and not lite_busy(folder)  # no LOCK file yet
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder / "LOCK")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lite_busy(folder)
        found = lite_holders(folder)
        if found is not None:  # None: no /proc/locks here
            assert found == [holder.pid]
            assert f"pid {holder.pid} (" in str(busy(str(folder), found))
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert lite_holders(folder) == [] and not lite_busy(folder)


@pytest.mark.slow
def test_an_alias_named_like_a_collection_and_a_failed_alias_switch_change_nothing(tmp_path, tiny_bi_encoder,
                                                                                     milvus_lite):
    """`--collection X` where the Milvus already has a collection named X (another project's
    `docs_gen_000001`): exit 2 naming --collection, checked before anything is published (no generation,
    no CURRENT, no new collection). An alias switch that fails anyway (here: Milvus refuses it) is
    WorkFailed and leaves CURRENT, the generations and the collections as they were: the alias moves
    before CURRENT, and the unpublished generation's collection is dropped."""
    import pymilvus

    from rag_cli.errors import WorkFailed
    from rag_cli.index.milvus import client, close_clients

    shared = str(tmp_path / "shared.db")
    a = _tiny_project(tmp_path / "a", tiny_bi_encoder)
    first = a.index(backend="milvus", uri=shared, collection="docs").generation
    clash = "docs_" + first.replace("-", "_")
    close_clients()
    b = _tiny_project(tmp_path / "b", tiny_bi_encoder)
    msg = only_message(rag_cli("index", "--backend", "milvus", "--uri", shared, "--collection", clash, "-p", b.root), 2)
    assert f"--collection {clash}: Milvus at {shared} already has a collection named {clash}" in msg, msg
    assert "nothing was changed" in msg
    assert generations(b) == [] and not (b.root / "index" / "CURRENT").exists()
    c = client(shared)
    assert sorted(c.list_collections()) == [clash] and c.list_aliases()["aliases"] == ["docs"]

    b.index(backend="milvus", uri=shared, collection="docs_b")
    names, before = sorted(c.list_collections()), generations(b)
    current = (b.root / "index" / "CURRENT").read_bytes()

    def refuse(self, *args, **kwargs):
        raise pymilvus.MilvusException(message="alias refused (by the test)")

    real = pymilvus.MilvusClient.alter_alias
    pymilvus.MilvusClient.alter_alias = refuse
    try:
        with pytest.raises(WorkFailed, match="switching the alias docs_b to the collection docs_b_gen_000002 failed"):
            b.index()
    finally:
        pymilvus.MilvusClient.alter_alias = real
    assert (b.root / "index" / "CURRENT").read_bytes() == current and generations(b) == before
    assert sorted(c.list_collections()) == names
    assert b.search("reciprocal rank fusion", mode="sparse").hits[0].doc_id == "hybrid_rrf.md"
    close_clients()


@pytest.mark.slow
def test_a_lite_file_held_by_rag_serve_is_exit_1_for_every_command(tmp_path, tiny_bi_encoder, milvus_lite):
    """While `rag serve` holds a project's Milvus Lite file, `rag search`, `rag index`, `rag update` (with a
    changed source) and `rag rollback` in another shell exit 1 alike (a busy resource), each with one line
    naming the file and the serving process, and change nothing (`rag update` stops before rechunking);
    once it stops, they work."""
    require_module("fastapi", "fastapi")
    from rag_cli import Project
    from rag_cli.index.milvus import close_clients
    from test_serve import serving

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "sample_corpus" / "docs", docs)
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.build([docs], backend="milvus", uri="m.db")  # the sources remembered
    p.index()  # a second generation: something to roll back to
    close_clients()
    before = generations(p)
    current = (p.root / "index" / "CURRENT").read_bytes()
    inode = (p.root / "index" / "CURRENT").stat().st_ino  # CURRENT never rewritten (the server would reload it)
    chunks = (p.root / "chunks.parquet").read_bytes()
    (docs / "new.md").write_text("# Zymurgy\n\nZymurgy is the chemistry of fermentation.\n")
    db = str(p.root / "m.db")
    with serving(p.root, env=ENV) as server:
        r = server.post("/search", {"query": "reciprocal rank fusion", "mode": "sparse", "k": 3})
        assert r.status_code == 200, r.text  # it has the file open
        for args in (("search", "reciprocal rank fusion", "--mode", "sparse"), ("search", "fusion", "--mode", "dense"),
                     ("index",), ("update",), ("rollback",)):
            msg = only_message(rag_cli(*args, "-p", p.root), 1)
            assert f"the Milvus Lite file {db} is in use by pid {server.proc.pid} (" in msg, (args, msg)
            assert "serve" in msg and "Milvus Lite serves one process" in msg
        assert generations(p) == before and (p.root / "index" / "CURRENT").read_bytes() == current
        assert (p.root / "index" / "CURRENT").stat().st_ino == inode
        assert not list((p.root / "index").glob(".gen-*"))  # no half-written generation left
        assert (p.root / "chunks.parquet").read_bytes() == chunks
    assert json.loads(rag_cli("search", "reciprocal rank fusion", "--mode", "sparse", "--json", "-p",
                              p.root).stdout)["results"][0]["doc_id"] == "hybrid_rrf.md"


@pytest.mark.slow
def test_a_deleted_lite_file_is_named_and_never_recreated(tmp_path, tiny_bi_encoder, milvus_lite):
    """The project's Milvus Lite file deleted: `rag search` (dense, sparse) and `rag update` (with a changed
    source, so it has something to publish) exit 2 naming the file and `rag index`, create no file and
    write no generation; `rag index` publishes again and search works."""
    from rag_cli import Project
    from rag_cli.index.milvus import close_clients

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "sample_corpus" / "docs", docs)
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    p.build([docs], backend="milvus", uri="m.db")  # the sources remembered, for `rag update`
    close_clients()
    shutil.rmtree(p.root / "m.db")
    before = generations(p)
    db = str(p.root / "m.db")
    for mode in ("sparse", "dense"):
        msg = only_message(rag_cli("search", "reciprocal rank fusion", "--mode", mode, "-p", p.root), 2)
        assert f"the Milvus Lite file {db} does not exist" in msg and "`rag index`" in msg
        assert not (p.root / "m.db").exists()
    for verify in ((), ("--verify",)):  # status says so (its generation's files are intact)
        res = rag_cli("status", *verify, "-p", p.root)
        out = " ".join((res.stdout + res.stderr).split())
        assert res.returncode == 2, (verify, out)
        assert (f"the current generation {before[-1]} is served from the Milvus Lite file {db}, which does not "
                "exist") in out and "run `rag index`" in out and "up to date" not in out
        assert not (p.root / "m.db").exists()
    (docs / "new.md").write_text("# Zymurgy\n\nZymurgy is the chemistry of fermentation.\n")
    chunks = (p.root / "chunks.parquet").read_bytes()
    msg = only_message(rag_cli("update", "-p", p.root), 2)
    assert f"published to the Milvus Lite file {db}, which does not exist" in msg and "`rag index`" in msg
    assert not (p.root / "m.db").exists() and generations(p) == before
    assert (p.root / "chunks.parquet").read_bytes() == chunks  # refused before rechunking
    (p.root / "m.db").write_text("not a Milvus Lite folder")
    msg = only_message(rag_cli("search", "fusion", "--mode", "sparse", "-p", p.root), 2)
    assert f"{db} is a file, but Milvus Lite 3 keeps its data in a folder" in msg
    (p.root / "m.db").unlink()
    res = rag_cli("index", "-p", p.root)  # uri and alias from rag.toml
    assert res.returncode == 0, res.stderr
    assert "Milvus Lite file" not in rag_cli("status", "-p", p.root).stdout
    res = rag_cli("search", "reciprocal rank fusion", "--mode", "sparse", "--json", "-p", p.root)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert json.loads(res.stdout)["results"][0]["doc_id"] == "hybrid_rrf.md"


@pytest.mark.slow
def test_lite_builds_the_index_parameters_asked_for(tmp_path, tiny_bi_encoder, milvus_lite):
    """Milvus Lite builds its faiss index with the parameters given (read back from the index files it
    writes), not its defaults (nlist 128, M 16, efConstruction 200, which it uses when the parameters come
    only as pymilvus 3 sends them): `--milvus-index ivf-sq8 --nlist 4` has 4 cells, as rag_dense.json
    records; an nlist above n / 39 (157 chunks: 4) is recorded and built as that, so faiss's k-means has
    the 39 training vectors per cell it wants and `rag index` prints no faiss warning; `hnsw` has the
    --hnsw-m and --ef-construction given."""
    faiss = require_module("faiss", "faiss-cpu")
    from rag_cli.index.milvus import close_clients

    def built(db: Path, kind: str) -> list:
        files = sorted(db.rglob(f"*.vector.{kind}.idx"))
        indexes = [faiss.read_index(str(f)) for f in files]
        if kind == "ivf_sq8":
            return [faiss.extract_index_ivf(i).nlist for i in indexes]
        return [(i.hnsw.nb_neighbors(1), i.hnsw.efConstruction) for i in indexes]

    p = _tiny_project(tmp_path / "p", tiny_bi_encoder, size=40, overlap=0)
    n = p.status().chunks
    assert n // 39 == 4, n
    for nlist, db in ((4, "four.db"), (4096, "many.db")):
        res = rag_cli("index", "--backend", "milvus", "--uri", db, "--milvus-index", "ivf-sq8", "--nlist", nlist,
                      "--keep", 0, "-p", p.root)
        assert res.returncode == 0 and "WARNING" not in res.stderr, res.stderr  # faiss's "clustering 157 points.."
        gen = sorted((p.root / "index").glob("gen-*"))[-1]
        params = json.loads((gen / "dense" / "rag_dense.json").read_text())
        assert params["index_type"] == "IVF_SQ8" and params["index_params"]["nlist"] == 4
        assert p.search("reciprocal rank fusion", mode="dense", k=3).hits
        assert built(p.root / db, "ivf_sq8") == [4]
        close_clients()
    p.index(backend="milvus", uri="hnsw.db", milvus_index="hnsw", hnsw_m=8, hnsw_ef_construction=40, keep=0)
    assert p.search("reciprocal rank fusion", mode="dense", k=3).hits
    assert built(p.root / "hnsw.db", "hnsw") == [(8, 40)]
    close_clients()


@pytest.mark.slow
def test_ownerless_collections_are_pruned_only_from_the_projects_own_lite_file(tmp_path, tiny_bi_encoder,
                                                                                milvus_lite):
    """Collections published before owners were recorded (no `rag_cli.owner`): pruned with their
    generation when they are in a Lite file inside the project folder (it serves this project alone) and
    are not the alias's target; in a Lite file outside the project (shared, like a server) they are left."""
    from rag_cli.index.milvus import OWNER, TOKEN, client, close_clients, collection_of

    def strip_owner(c, name: str) -> None:
        c.drop_collection_properties(name, property_keys=[OWNER, TOKEN])
        assert OWNER not in c.describe_collection(name).get("properties", {})

    for uri, pruned in (("m.db", True), (str(tmp_path / "shared.db"), False)):
        p = _tiny_project(tmp_path / f"p-{pruned}", tiny_bi_encoder)
        first = p.index(backend="milvus", uri=uri, collection="docs").generation
        c = client(str(p.root / uri))
        old = collection_of("docs", first)
        strip_owner(c, old)
        leftover = collection_of("docs", "gen-000099")  # a killed writer's, of the same era (no folder)
        c.create_collection(leftover, dimension=4)
        second = p.index(keep=0).generation  # prunes `first`
        names = set(c.list_collections())
        assert collection_of("docs", second) in names
        assert (old in names, leftover in names) == (not pruned, not pruned), names
        assert c.describe_alias("docs")["collection_name"] == collection_of("docs", second)
        close_clients()


def test_bm25_variants_with_a_constant_are_refused(tmp_path):
    from rag_cli.config import IndexConfig
    from rag_cli.errors import BadInput
    from rag_cli.index.backends import check_backend

    with pytest.raises(BadInput, match="--bm25-method bm25l"):
        check_backend(IndexConfig(backend="milvus", bm25_method="bm25l"))


# --------------------------------------------------------------------------- on Milvus Lite (slow: the default model)


@pytest.fixture(scope="module")
def milvus_lite():
    """pymilvus and milvus_lite (the milvus extra); Milvus Lite servers started by the module's tests are
    closed at its end."""
    require_module("pymilvus", "pymilvus", "milvus")
    require_module("milvus_lite", "milvus-lite", "milvus")
    from rag_cli.index.milvus import close_clients

    try:
        yield
    finally:
        close_clients()


@pytest.fixture(scope="module")
def sf(tmp_path_factory, default_model, scifact_dir, milvus_lite):
    """The SciFact subset built once locally (hnswlib), copied and indexed with exact and with milvus."""
    from test_cli_e2e import rag, scifact_subset

    root = tmp_path_factory.mktemp("milvus-sf")
    data = scifact_subset(scifact_dir, root / "data")
    local = root / "local"
    rag("build", data.corpus, "--format", "beir", "--size", 500, "--overlap", 50, "-p", local)
    exact, milvus = root / "exact", root / "milvus"
    shutil.copytree(local, exact)
    shutil.copytree(local, milvus)
    rag("index", "--backend", "exact", "-p", exact)
    uri = root / "lite" / "milvus.db"
    rag("index", "--backend", "milvus", "--uri", uri, "--collection", "sf", "-p", milvus)
    return type("SF", (), dict(root=root, data=data, local=local, exact=exact, milvus=milvus, uri=str(uri),
                              scifact=scifact_dir))


def run(project: Path, data, mode: str, name: str, *extra) -> dict[str, list[dict]]:
    """`rag search --queries` into runs/NAME.parquet; {query_id: rows best first}."""
    import pyarrow.parquet as pq

    from test_cli_e2e import rag

    rag("search", "--queries", data.queries, "--mode", mode, "-k", 10, "--name", name, *extra, "-p", project)
    out: dict[str, list[dict]] = {}
    for r in pq.read_table(project / "runs" / f"{name}.parquet").to_pylist():
        out.setdefault(r["query_id"], []).append(r)
    return {q: sorted(rows, key=lambda r: r["rank"]) for q, rows in out.items()}


def same_up_to_ties(got: list[dict], want: list[dict]) -> None:
    """Equal scores at every rank (relative TOLERANCE), and the same chunks except among equal scores."""
    gs, ws = [r["score"] for r in got], [r["score"] for r in want]
    assert len(gs) == len(ws)
    np.testing.assert_allclose(gs, ws, rtol=TOLERANCE)
    for g, w in zip(got, want):
        if g["chunk_id"] != w["chunk_id"]:
            tied = [r["chunk_id"] for r in want if abs(r["score"] - g["score"]) <= TOLERANCE * abs(g["score"])]
            assert g["chunk_id"] in tied or abs(g["score"] - ws[-1]) <= TOLERANCE * abs(ws[-1]), (g, w)


@pytest.mark.slow
def test_sparse_top10_equals_local_bm25(sf):
    want = run(sf.local, sf.data, "sparse", "sp")
    got = run(sf.milvus, sf.data, "sparse", "sp")
    assert set(got) == set(want) and len(want) == 25
    for q in want:
        same_up_to_ties(got[q], want[q])


@pytest.mark.slow
def test_dense_recall_against_exact_and_hybrid_ndcg(sf):
    from test_cli_e2e import rag_json

    truth = run(sf.exact, sf.data, "dense", "de")
    got = run(sf.milvus, sf.data, "dense", "de")
    recall = np.mean([len({r["chunk_id"] for r in got[q]} & {r["chunk_id"] for r in truth[q]}) / len(truth[q])
                      for q in truth])
    assert recall >= 0.99
    ndcg = {}
    for project in (sf.local, sf.milvus):
        run(project, sf.data, "hybrid", "hy")
        ndcg[project] = rag_json("eval", "--run", project / "runs" / "hy.parquet", "--qrels", sf.data.qrels,
                                 "--name", "hy", "-p", project)["metrics"]["ndcg@10"]
    assert abs(ndcg[sf.milvus] - ndcg[sf.local]) <= 0.005, ndcg
    assert ndcg[sf.milvus] >= 0.88  # the e2e bound of the local backend on this subset


@pytest.mark.slow
def test_filter_gives_the_local_filtered_results(sf):
    docs = [d["_id"] for d in sf.data.docs[:40]]
    flt = f"doc_id in [{','.join(docs)}]"
    for mode in ("sparse", "dense", "hybrid"):
        want = run(sf.exact, sf.data, mode, f"f-{mode}", "--filter", flt)
        got = run(sf.milvus, sf.data, mode, f"f-{mode}", "--filter", flt)
        assert {r["doc_id"] for rows in got.values() for r in rows} <= set(docs)
        for q in want:
            same_up_to_ties(got.get(q, []), want[q])


def alias_target(uri: str, alias: str) -> str:
    from rag_cli.index.milvus import client

    return client(uri).describe_alias(alias)["collection_name"]


@pytest.mark.slow
def test_generation_switch_and_rollback_move_the_alias(sf):
    from rag_cli.index.milvus import client
    from test_cli_e2e import rag, rag_json

    first = alias_target(sf.uri, "sf")
    assert first.startswith("sf_gen_")
    rag("index", "--milvus-index", "flat", "-p", sf.milvus)  # uri and alias from rag.toml
    second = alias_target(sf.uri, "sf")
    assert second != first and {first, second} <= set(client(sf.uri).list_collections())
    q = "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors."
    flat = rag_json("search", q, "--mode", "dense", "-p", sf.milvus)
    rag("rollback", "-p", sf.milvus)
    assert alias_target(sf.uri, "sf") == first
    back = rag_json("search", q, "--mode", "dense", "-p", sf.milvus)
    assert [h["chunk_id"] for h in back["results"]] == [h["chunk_id"] for h in flat["results"]]
    # a write with --keep 0 prunes every other generation, and its collection with it
    rag("index", "--keep", 0, "-p", sf.milvus)
    third = alias_target(sf.uri, "sf")
    names = set(client(sf.uri).list_collections())
    assert third in names and first not in names and second not in names


@pytest.mark.slow
def test_update_publishes_changed_removed_and_added_documents(sf):
    """`rag update` after one document changed, one removed and one added: the new generation's collection
    gives the local BM25 results again, never the removed document, and finds the added one."""
    import gzip

    import tomli_w

    from test_cli_e2e import rag, rag_json, read_jsonl, write_jsonl

    docs = read_jsonl(sf.data.corpus)
    removed, changed = docs[0], docs[1]
    with gzip.open(sf.scifact / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        added = next(d for d in map(json.loads, f) if d["_id"] not in {x["_id"] for x in docs})
    new_docs = [dict(changed, text=changed["text"] + " Zymurgy of lager yeast.")] + docs[2:] + [added]
    corpus = write_jsonl(sf.root / "data" / "corpus-updated.jsonl", new_docs)
    for project in (sf.exact, sf.milvus):
        cfg = tomllib.loads((project / "rag.toml").read_text())
        cfg["sources"]["paths"] = [str(corpus)]
        (project / "rag.toml").write_text(tomli_w.dumps(cfg))
        out = rag_json("update", "-p", project)
        assert out["chunk"]["docs_removed"] == 1 and out["chunk"]["docs_added"] == 1
        assert out["chunk"]["docs_changed"] == 1
    queries = [removed["title"], added["title"], "zymurgy lager yeast"]
    for q in queries:
        want = rag_json("search", q, "--mode", "sparse", "-p", sf.exact)["results"]
        got = rag_json("search", q, "--mode", "sparse", "-p", sf.milvus)["results"]
        same_up_to_ties(got, want)
        assert removed["_id"] not in {h["doc_id"] for h in got}
    assert rag_json("search", added["title"], "--mode", "dense", "-p", sf.milvus)["results"][0]["doc_id"] == added["_id"]
    assert rag_json("search", "zymurgy lager yeast", "--mode", "sparse", "-p", sf.milvus)["results"][0]["doc_id"] == \
        changed["_id"]


@pytest.mark.slow
def test_serve_answers_from_milvus(sf):
    """`rag serve` on the milvus project answers /search and /ask as the CLI does (the CLI's Milvus Lite is
    closed first: a Lite file serves one process)."""
    require_module("fastapi", "fastapi")
    from rag_cli.index.milvus import close_clients
    from test_cli_e2e import rag_json
    from test_serve import serving, without_timings

    queries = [q["text"] for q in sf.data.query_rows[:3]]
    want = {q: rag_json("search", q, "-k", 5, "-p", sf.milvus) for q in queries}
    answer = rag_json("ask", queries[0], "-p", sf.milvus)
    close_clients()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with serving(sf.milvus, env=env) as server:
        for q in queries:
            r = server.post("/search", {"query": q, "k": 5})
            assert r.status_code == 200, r.text
            assert [h["chunk_id"] for h in r.json()["results"]] == [h["chunk_id"] for h in want[q]["results"]]
        import httpx

        r = httpx.post(server.url + "/ask", json={"question": queries[0]}, timeout=600)  # e5 on shared cores
        assert r.status_code == 200, r.text
        assert without_timings(r.json()) == without_timings(answer)
