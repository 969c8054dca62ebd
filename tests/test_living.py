"""The living index: generations, one writer, `rag build` / `update` / `rollback` / `status`,
crash safety (SIGKILL at random moments) and searches during updates."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.project import Project
from rag_cli.store.index_folder import current_generation, generations

REPO = Path(__file__).resolve().parents[1]
QUERIES = ["cancer therapy tumor", "protein folding", "vitamin D deficiency", "insulin resistance obesity",
           "DNA methylation", "antibiotic resistance bacteria", "stem cells", "immune response T cells"]


@pytest.fixture(scope="module")
def scifact_docs(scifact_dir) -> list[tuple[str, str]]:
    """The first 120 SciFact documents: (doc_id, title + text)."""
    out = []
    with gzip.open(scifact_dir / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            out.append((r["_id"], f"{r['title']}\n\n{r['text']}\n"))
            if len(out) == 120:
                break
    return out


def write_corpus(folder: Path, docs: list[tuple[str, str]]) -> None:
    """Make `folder` hold exactly `docs` as DOC_ID.txt (files whose text is the same are left alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    want = {f"{d}.txt": t for d, t in docs}
    for p in folder.iterdir():
        if p.name not in want:
            p.unlink()
    for name, text in want.items():
        p = folder / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")


def state_b(docs):
    """The corpus after edits (3), removals (2) and additions (2)."""
    out = [(d, t + "Edited: insulin resistance obesity.\n" if i in (3, 40, 77) else t)
           for i, (d, t) in enumerate(docs[:100]) if i not in (10, 11)]
    return out + docs[100:102]


#: The dense backends the update and kill tests run on ([index] settings).
BACKENDS = {"hnswlib": {}, "exact": {"backend": "exact"},
            "faiss-hnsw-sq8": {"backend": "faiss", "index_type": "hnsw-sq8"},
            "faiss-ivf-pq": {"backend": "faiss", "index_type": "ivf-pq"}}


@pytest.fixture(params=list(BACKENDS))
def backend(request) -> dict:
    """The [index] settings of one dense backend (faiss: fails under CI without faiss-cpu)."""
    if request.param.startswith("faiss"):
        request.getfixturevalue("faiss")
    return BACKENDS[request.param]


def build(root: Path, src: Path, model: Path, index: dict | None = None, **kw) -> Project:
    p = Project.create(root, model={"embedder": str(model)}, chunk={"unit": "chars", "size": 400, "overlap": 40},
                       index={"hnsw_m": 8, "hnsw_ef_construction": 64, **(index or {})})
    p.build([src], **kw)
    return p


def sparse_results(p: Project) -> list[list[tuple[str, float]]]:
    fresh = Project.open(p.root)
    return [[(h.chunk_id, round(h.score, 5)) for h in fresh.search(q, mode="sparse", k=10)] for q in QUERIES]


def test_update_equals_a_fresh_build(tmp_path, scifact_docs, tiny_bi_encoder, backend):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:100])
    p = build(tmp_path / "p", src, tiny_bi_encoder, backend)
    first, results_a = current_generation(p.index_dir).name, sparse_results(p)
    time.sleep(0.01)
    write_corpus(src, state_b(scifact_docs))
    out = p.update()
    c = out["chunk"]
    assert (c["docs_added"], c["docs_changed"], c["docs_removed"], c["docs_unchanged"]) == (2, 3, 2, 95)
    assert out["full_rechunk"] is None and out["index"]["full"] is None
    # chunks of an edited document whose text did not change keep their vector (and HNSW label)
    i = out["index"]
    assert 0 < i["vectors_added"] <= c["chunks_added"] and 0 < i["vectors_deleted"] <= c["chunks_removed"]
    assert i["vectors_added"] - i["vectors_deleted"] == c["chunks_added"] - c["chunks_removed"]
    assert out["embed"]["n_embedded"] <= c["chunks_added"]
    assert p.manifest()["update"]["chunk"]["docs_changed"] == 3

    fresh = build(tmp_path / "fresh", src, tiny_bi_encoder, backend)
    assert sparse_results(p) == sparse_results(fresh)
    import pyarrow.parquet as pq

    assert pq.read_table(p.chunks_path).equals(pq.read_table(fresh.chunks_path))
    # dense: the updated graph finds the exact top 10 (brute force over the vectors) as well as a fresh one
    s_upd, s_fresh = p.engines.searcher(p.config, with_embedder=True), fresh.engines.searcher(fresh.config, with_embedder=True)
    qv = s_upd.encode_queries(QUERIES)
    vecs = s_fresh.dense.vectors(range(s_fresh.chunks.num_rows))
    exact = np.argsort(-(qv @ vecs.T / np.linalg.norm(vecs, axis=1)), axis=1)[:, :10]
    exact_ids = [{s_fresh._chunk_ids[r] for r in row} for row in exact]

    def recall(s):
        got = s.batch_search(QUERIES, mode="dense", k=10, query_vectors=qv)
        return np.mean([len({h.chunk_id for h in hits} & e) / 10 for hits, e in zip(got, exact_ids)])

    assert recall(s_upd) >= recall(s_fresh) - 0.05 and recall(s_upd) >= 0.9

    # nothing changed: no new generation
    again = p.update()
    assert again["index"]["unchanged"] and again["chunk"]["docs_unchanged"] == 100
    assert [g for g, _ in generations(p.index_dir)][-1] == int(current_generation(p.index_dir).name[4:])
    # rollback to the first generation gives the first corpus's results
    second = current_generation(p.index_dir).name
    assert p.rollback() == {"from": second, "to": first}
    assert sparse_results(p) == results_a


def test_changed_chunk_settings_rechunk_everything(tmp_path, scifact_docs, tiny_bi_encoder):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:30])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    with p.folder.writing():
        p.folder.save(("chunk", {"size": 300}))
    out = p.update()
    assert out["full_rechunk"] == "the chunk settings changed"
    assert out["chunk"]["docs_changed"] == 30
    fresh = build(tmp_path / "fresh", src, tiny_bi_encoder)
    with fresh.folder.writing():
        fresh.folder.save(("chunk", {"size": 300}))
    fresh.build([src])
    assert sparse_results(p) == sparse_results(fresh)


def test_generations_keep_rollback_and_leftovers(tmp_path, scifact_docs, tiny_bi_encoder):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:20])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    for _ in range(4):
        p.index()
    names = [g.name for _, g in generations(p.index_dir)]
    assert names == ["gen-000003", "gen-000004", "gen-000005"]  # keep 2 besides the current one
    assert (p.index_dir / "CURRENT").read_text().splitlines()[0] == "gen-000005"
    # what a killed writer leaves is removed by the next one, never read; its numbers are not given out again
    (p.index_dir / ".gen-000006.tmp").mkdir()
    (p.index_dir / "gen-000007").mkdir()
    (p.root / ".index.abc.tmp").mkdir()
    # a writer killed while writing the lock holder or the manifest (CI, stop 26: ..lock.json.py4uqs9v.tmp)
    killed = [p.root / "..lock.json.py4uqs9v.tmp", p.root / ".manifest.json.k2x.tmp"]
    for f in killed:
        f.write_text("{")
    assert p.search("cancer", mode="sparse", k=1)
    p.index(keep=0)
    assert sorted(x.name for x in p.index_dir.iterdir()) == ["CURRENT", "gen-000008"]
    assert not (p.root / ".index.abc.tmp").exists()
    assert not any(f.exists() for f in killed) and not list(p.root.rglob("*.tmp"))
    with pytest.raises(BadInput, match="no generation older than gen-000008"):
        p.rollback()
    st = p.status()
    assert st["current"] == "gen-000008" and st["documents"] == 20 and st["stale"] == []
    assert st["generations"][0]["n_chunks"] == st["chunks"] == st["vectors"]


def test_status_names_stale_stages_and_the_command(tmp_path, scifact_docs, tiny_bi_encoder):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    time.sleep(0.01)
    (src / f"{scifact_docs[0][0]}.txt").write_text("changed text about tumors\n", encoding="utf-8")
    assert [(s["stage"], s["command"]) for s in p.status()["stale"]] == [("chunk", "rag update")]
    from typer.testing import CliRunner

    from rag_cli.cli import app

    res = CliRunner().invoke(app, ["status", "--json", "-p", str(p.root)])
    assert res.exit_code == 0 and json.loads(res.stdout)["stale"][0]["command"] == "rag update"


def test_status_names_every_stale_file_in_plain_lines(tmp_path, scifact_docs, tiny_bi_encoder):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    time.sleep(0.01)
    edited, removed = src / f"{scifact_docs[0][0]}.txt", src / f"{scifact_docs[1][0]}.txt"
    edited.write_text("changed text about tumors\n", encoding="utf-8")
    removed.unlink()
    (src / "new.txt").write_text("a new document about otters\n", encoding="utf-8")
    (src / "empty.txt").write_text("", encoding="utf-8")  # skipped by the next update: not stale after it
    [chunk] = p.status()["stale"]
    assert chunk["files"] == {"changed": [str(edited)], "removed": [str(removed)],
                              "added": [str(src / "empty.txt"), str(src / "new.txt")]}
    res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert ("stale: chunk (source files differ from docs.parquet: 1 changed, 1 removed, 2 added): "
            "run `rag update`") in lines
    assert f"  changed: {edited}" in lines and f"  removed: {removed}" in lines and f"  added: {src / 'new.txt'}" in lines
    assert "up to date" not in lines and "None" not in res.stdout and "{" not in res.stdout
    assert lines[0] == f"project {p.root}: 10 documents, {p.status()['chunks']} chunks, {p.status()['vectors']} vectors"
    fp = p.status()["model_fingerprints"]["index"]
    assert f"embedder fingerprint: {fp[:12]} (embeddings and index)" in lines
    p.update()
    assert p.status()["stale"] == []
    res = CliRunner().invoke(app, ["status", "-q", "-p", str(p.root)])
    assert res.exit_code == 0 and res.stdout == ""


def test_status_prints_a_file_name_with_a_newline_escaped(tmp_path, scifact_docs, tiny_bi_encoder):
    """#23 item 12: a file name holding a line feed (or an escape sequence) cannot forge a line of `rag status`."""
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:3])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    forged = src / "new\nup to date\n\x1b[31mred.txt"
    forged.write_text("a new document about otters\n", encoding="utf-8")
    assert p.status()["stale"][0]["files"] == {"added": [str(forged)]}  # the library keeps the exact name
    res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "up to date" not in lines and "\x1b" not in res.stdout
    assert f"  added: {src}/new\\nup to date\\n\\x1b[31mred.txt" in lines
    res = CliRunner().invoke(app, ["status", "--json", "-p", str(p.root)])
    assert json.loads(res.stdout)["stale"][0]["files"]["added"] == [str(forged)]


def test_status_without_an_index_and_after_rollback_is_stale(tmp_path, scifact_docs, tiny_bi_encoder):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    res = CliRunner().invoke(app, ["init", "-q", str(tmp_path / "p")])
    assert res.exit_code == 0 and res.output == "" and (tmp_path / "p" / "rag.toml").is_file()
    (tmp_path / "p" / "rag.toml").unlink()
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)})
    assert [(s["stage"], s["why"]) for s in p.status()["stale"]] == [("chunk", "nothing is chunked yet")]
    p.chunk([src])
    assert [(s["stage"], s["command"]) for s in p.status()["stale"]] == [("embed", "rag embed"),
                                                                         ("index", "rag index")]
    p.embed()
    assert [(s["stage"], s["why"], s["command"]) for s in p.status()["stale"]] == [
        ("index", "there is no index yet", "rag index")]
    res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
    assert "up to date" not in res.stdout and "stale: index (there is no index yet): run `rag index`" in res.stdout
    assert "index: none built yet" in res.stdout and "embedder fingerprint: embeddings " in res.stdout
    p.index()
    assert p.status()["stale"] == []
    write_corpus(src, scifact_docs[:12])
    p.chunk([src])
    p.embed()
    p.index()
    assert p.status()["stale"] == []
    res = CliRunner().invoke(app, ["rollback", "-q", "-p", str(p.root)])
    assert res.exit_code == 0 and res.output == "" and current_generation(p.index_dir).name == "gen-000001"
    [stale] = p.status()["stale"]
    assert stale["stage"] == "index" and stale["why"].startswith("the current generation gen-000001 is not gen-000002")
    res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 0 and "up to date" not in res.stdout


@pytest.mark.parametrize("damage", ["meta.json", "files.json", "dense/hnsw.bin", "chunks.arrow", "docs.parquet"])
def test_status_reports_a_damaged_current_generation(tmp_path, scifact_docs, tiny_bi_encoder, damage):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    f = p.index_dir / "gen-000002" / damage
    with open(f, "r+b") as fh:
        fh.truncate(100)
    run = CliRunner().invoke
    res = run(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 2 and "up to date" not in res.stdout
    assert "* gen-000002" in res.stdout and f"damaged: {f}" in res.stdout.replace("\n", "")
    res = run(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 2 and "verified 1 of 2 generations" in res.stdout
    assert str(f) in res.stderr.replace("\n", "") and "* gen-000002" in res.stdout
    res = run(app, ["status", "--verify", "--json", "-p", str(p.root)])
    gens = {g["name"]: g for g in json.loads(res.stdout)["generations"]}
    assert res.exit_code == 2 and gens["gen-000001"]["verified"] is None and str(f) in gens["gen-000002"]["verified"]
    assert gens["gen-000002"]["current"]


def test_status_reports_damaged_project_tables(tmp_path, scifact_docs, tiny_bi_encoder):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    with open(p.chunks_path, "r+b") as fh:
        fh.truncate(100)
    st = p.status()
    assert st["chunks"] is None and len(st["damaged"]) == 1
    assert st["damaged"][0].startswith(f"{p.chunks_path} cannot be read as Parquet")
    res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 2 and "no chunks" in res.stdout and "None" not in res.stdout
    assert f"damaged: {p.chunks_path} cannot be read" in res.stdout and "up to date" not in res.stdout
    res = CliRunner().invoke(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 2 and str(p.chunks_path) in res.stderr


def test_update_interrupted_after_chunking_changes_nothing_and_the_rerun_counts_the_changes(tmp_path, scifact_docs,
                                                                                   tiny_bi_encoder, monkeypatch):
    from typer.testing import CliRunner

    import rag_cli.stages.embed
    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:100])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    time.sleep(0.01)
    write_corpus(src, state_b(scifact_docs))
    embed = rag_cli.stages.embed.embed_chunks

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rag_cli.stages.embed, "embed_chunks", killed)
    res = CliRunner().invoke(app, ["update", "-p", str(p.root)])
    assert res.exit_code == 130
    assert "previous files are intact" in res.stderr  # update commits all its stages or none (#31)
    assert current_generation(p.index_dir).name == "gen-000001"
    assert {s["stage"] for s in p.status()["stale"]} == {"chunk"}  # the sources changed, nothing else
    monkeypatch.setattr(rag_cli.stages.embed, "embed_chunks", embed)
    c = p.update()["chunk"]
    assert (c["docs_added"], c["docs_changed"], c["docs_removed"], c["docs_unchanged"]) == (2, 3, 2, 95)
    c = p.update()["chunk"]  # the index now holds them: nothing pending
    assert (c["docs_added"], c["docs_changed"], c["docs_removed"], c["docs_unchanged"]) == (0, 0, 0, 100)


def test_old_flat_index_is_read_and_migrated(tmp_path, scifact_docs, tiny_bi_encoder):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    gen = current_generation(p.index_dir)
    before = sparse_results(p)
    for f in gen.iterdir():  # the layout of earlier versions: the files directly in index/
        if f.name != "files.json":
            f.rename(p.index_dir / f.name)
    shutil.rmtree(gen)
    (p.index_dir / "CURRENT").unlink()
    assert sparse_results(p) == before
    p.index()
    assert sorted(x.name for x in p.index_dir.iterdir()) == ["CURRENT", "gen-000001"]
    assert sparse_results(p) == before


def test_a_second_writer_fails_at_once_naming_the_holder(tmp_path, scifact_docs, tiny_bi_encoder):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:5])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    other = Project.open(p.root)
    with p.folder.writing("update"):
        t0 = time.monotonic()
        with pytest.raises(WorkFailed, match=rf"pid {os.getpid()}, `rag update`, since 20"):
            other.update()
        assert time.monotonic() - t0 < 1.0  # --wait 0 (the default): at once
        with pytest.raises(WorkFailed, match="waited 0.3 s"):
            other.index(wait=0.3)
        assert other.search("cancer", mode="sparse", k=1)  # readers take no lock
    assert not (p.root / ".lock.json").exists()


# ---------------------------------------------------------------- crash and concurrency
def _rag(*args, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "rag_cli", *map(str, args)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


@pytest.fixture(scope="module")
def two_states(tmp_path_factory, scifact_docs, tiny_bi_encoder):
    """Expected sparse results of corpus A (100 docs) and B (`state_b`), from fresh builds."""
    root = tmp_path_factory.mktemp("states")
    out = {}
    for name, docs in (("a", scifact_docs[:100]), ("b", state_b(scifact_docs))):
        write_corpus(root / name, docs)
        out[name] = sparse_results(build(root / f"p{name}", root / name, tiny_bi_encoder))
    return out


def _kill_trials(tmp_path, scifact_docs, tiny_bi_encoder, two_states, command: str, trials: int, seed: int,
                 index: dict | None = None) -> None:
    """Kill `rag COMMAND` with SIGKILL at a random moment `trials` times while the corpus alternates
    between A and B: after every kill the current generation loads and gives exactly A's or B's
    results (and its dense index of backend `index` loads and answers), and `rag status` finds
    nothing damaged (CURRENT included); then an uninterrupted `rag update` gives the last
    corpus's results and leaves nothing behind. Every third trial starts with a `rag rollback`,
    and every other write runs with `--keep 0`: a generation name never means two generations,
    and the last one has the highest number (issue 23 items 2-4, 6, 7)."""
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:100])
    p = build(tmp_path / "p", src, tiny_bi_encoder, index)
    rng = random.Random(seed)
    names: dict[str, str] = {}  # generation name -> sha256 of its files.json

    def note_generations():
        for _, g in generations(p.index_dir):
            sha = hashlib.sha256((g / "files.json").read_bytes()).hexdigest()
            assert names.setdefault(g.name, sha) == sha, f"trial {trial}: the name {g.name} was given out twice"

    for trial in range(trials):
        write_corpus(src, state_b(scifact_docs) if trial % 2 == 0 else scifact_docs[:100])
        if trial % 3 == 2:
            with contextlib.suppress(BadInput):  # no older generation (--keep 0 before)
                p.rollback()
        keep = ["--keep", "0"] if trial % 2 else []
        proc = _rag(*([command, src] if command == "build" else [command]), "-p", p.root, "-q", *keep)
        time.sleep(rng.uniform(0.2, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = sparse_results(p)  # the current generation loads and is one of the two corpora
        assert got in (two_states["a"], two_states["b"]), f"trial {trial}: a mixed or broken index"
        assert len(Project.open(p.root).search(QUERIES[0], mode="dense", k=5).hits) == 5
        assert p.status()["damaged"] == [], f"trial {trial}: {p.status()['damaged']}"
        note_generations()
    highest = max(int(n[4:]) for n in names)
    proc = _rag("update", "-p", p.root, "-q")
    assert proc.wait() == 0, proc.stderr.read()
    assert sparse_results(p) == two_states["b" if (trial % 2 == 0) else "a"]
    assert not [x for x in p.index_dir.iterdir() if x.name.startswith(".")]
    assert _temporary_files(p.root) == []  # issue 23 item 4: e.g. a killed embed's .embeddings.parquet.*.tmp
    current = current_generation(p.index_dir).name
    assert current in names or int(current[4:]) > highest  # a new generation gets a new, higher number
    note_generations()
    assert p.status()["damaged"] == []


def _temporary_files(root: Path) -> list[str]:
    """The temporary files (`*.tmp`) anywhere in the project folder."""
    return sorted(str(f.relative_to(root)) for f in root.rglob("*.tmp"))


@pytest.mark.slow
@pytest.mark.parametrize("command", ["update", "index"])
def test_sigkill_at_random_moments_leaves_a_working_index(tmp_path, scifact_docs, tiny_bi_encoder, two_states,
                                                          command, backend):
    _kill_trials(tmp_path, scifact_docs, tiny_bi_encoder, two_states, command, trials=3, seed=7, index=backend)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["build", "update", "index"])
def test_sigkill_many_trials_per_stage(tmp_path, scifact_docs, tiny_bi_encoder, two_states, command):
    """At least 20 kills per stage (RAG_CRASH_TRIALS overrides, e.g. for a quick local check)."""
    trials = int(os.environ.get("RAG_CRASH_TRIALS", "20"))
    _kill_trials(tmp_path, scifact_docs, tiny_bi_encoder, two_states, command, trials=trials, seed=11)


@pytest.mark.slow
def test_searches_during_updates_see_whole_generations(tmp_path, scifact_docs, tiny_bi_encoder, two_states):
    _searches_during_updates(tmp_path, scifact_docs, tiny_bi_encoder, two_states, n_updates=6)


@pytest.mark.slow
def test_searches_during_50_updates_see_whole_generations(tmp_path, scifact_docs, tiny_bi_encoder, two_states):
    """The issue's run: a search loop while 50 updates alternate the corpus."""
    _searches_during_updates(tmp_path, scifact_docs, tiny_bi_encoder, two_states, n_updates=50)


def _searches_during_updates(tmp_path, scifact_docs, tiny_bi_encoder, two_states, n_updates: int) -> None:
    """Search loops (a new Project for each round, and one long-lived Project that keeps its loaded
    searcher) while `rag update` alternates the corpus, every other one with `--keep 0` (a reader may
    find its generation removed while it checks it: issue 23 item 9). Every result is one of the two
    corpora's; at the end the long-lived Project answers from the last generation (item 2)."""
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:100])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    expected = (two_states["a"], two_states["b"])
    live = Project.open(p.root)
    errors, wrong, n = [], [], [0]
    stop = threading.Event()

    def live_results():
        return [[(h.chunk_id, round(h.score, 5)) for h in live.search(q, mode="sparse", k=10)] for q in QUERIES]

    def search_loop():
        while not stop.is_set():
            try:
                for got in (sparse_results(p), live_results()):  # each query may see another generation
                    wrong.extend((q, hits) for q, hits in enumerate(got)
                                 if hits not in (expected[0][q], expected[1][q]))
                n[0] += 1
            except Exception as exc:  # noqa: BLE001 - any error counts
                errors.append(repr(exc))

    t = threading.Thread(target=search_loop)
    t.start()
    try:
        for i in range(n_updates):
            write_corpus(src, state_b(scifact_docs) if i % 2 == 0 else scifact_docs[:100])
            proc = _rag("update", "-p", p.root, "-q", "--keep", str(i % 2))
            assert proc.wait() == 0, proc.stderr.read()
    finally:
        stop.set()
        t.join()
    assert errors == [] and wrong == [] and n[0] >= n_updates, (errors[:3], len(wrong), n[0])
    assert live_results() == two_states["b" if (n_updates - 1) % 2 == 0 else "a"]


@pytest.mark.slow
def test_two_updates_started_together_one_runs_the_other_exits_1_naming_it(tmp_path, scifact_docs, tiny_bi_encoder,
                                                                          two_states):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:100])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    holder = p.root / ".lock.json"
    for attempt in range(6):  # catch the first update while it holds the lock (it may be too quick)
        write_corpus(src, state_b(scifact_docs) if attempt % 2 == 0 else scifact_docs[:100])
        first = _rag("update", "-p", p.root, "-q")
        while first.poll() is None and not holder.exists():
            time.sleep(0.002)
        if first.poll() is None:
            first.send_signal(signal.SIGSTOP)  # hold it inside its update
            if holder.exists():
                break
            first.send_signal(signal.SIGCONT)
        assert first.wait() == 0
    else:
        pytest.skip("the update never overlapped with the check")
    expected = two_states["b" if attempt % 2 == 0 else "a"]
    try:
        assert json.loads(holder.read_text())["pid"] == first.pid
        second = _rag("update", "-p", p.root, "--wait", "0")
        err = second.communicate(timeout=60)[1].decode()
        assert second.returncode == 1 and f"pid {first.pid}, `rag update`" in err, err
        third = _rag("update", "-p", p.root, "--wait", "60", "-q")  # waits for the first one
        time.sleep(0.5)
        assert third.poll() is None
        got = sparse_results(p)  # the index being searched is whole: one of the two corpora
        assert got in (two_states["a"], two_states["b"])
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=60) == 0 and third.wait(timeout=60) == 0
    assert sparse_results(p) == expected
    assert p.manifest()["update"]["index"]["unchanged"]  # the third found the first one's work done


def test_index_rollback_alias_and_status_verify(tmp_path, scifact_docs, tiny_bi_encoder):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    run = CliRunner().invoke
    res = run(app, ["index", "--rollback", "--json", "-p", str(p.root)])
    assert res.exit_code == 0 and json.loads(res.stdout) == {"from": "gen-000002", "to": "gen-000001"}
    res = run(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 0 and "verified 2 of 2 generations" in res.stdout
    # one flipped byte, the size unchanged: --verify hashes every file of every generation
    f = p.index_dir / "gen-000002" / "dense" / "hnsw.bin"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    res = run(app, ["status", "--verify", "--json", "-p", str(p.root)])
    assert res.exit_code == 2
    gens = {g["name"]: g["verified"] for g in json.loads(res.stdout)["generations"]}
    assert gens["gen-000001"] is None and "hnsw.bin is damaged: its sha256 differs" in gens["gen-000002"]


def test_disk_use_tolerates_files_removed_while_it_measures(tmp_path, monkeypatch):
    # `rag status` reads while a writer works: the lock's holder file can vanish between listing and stat
    from pathlib import Path

    from rag_cli.stages.status import disk_use

    (tmp_path / "a.parquet").write_bytes(b"x" * 10)
    (tmp_path / ".lock.json").write_text("{}")
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "f.bin").write_bytes(b"y" * 7)
    real_stat = Path.stat

    def stat(self, **kw):
        if self.name in (".lock.json", "f.bin"):
            raise FileNotFoundError(self)
        return real_stat(self, **kw)

    monkeypatch.setattr(Path, "stat", stat)  # listed, then gone: is_file/is_dir answered before the removal
    monkeypatch.setattr(Path, "is_file", lambda self: self.name != "index")
    monkeypatch.setattr(Path, "is_dir", lambda self: self.name == "index")
    assert disk_use(tmp_path) == {".lock.json": 0, "a.parquet": 10, "index": 0}


def test_status_is_the_same_from_any_folder_after_chunking_a_relative_path(tmp_path, scifact_docs, tiny_bi_encoder,
                                                                           monkeypatch):
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from rag_cli.cli import app

    write_corpus(tmp_path / "work" / "src", scifact_docs[:5])
    monkeypatch.chdir(tmp_path / "work")
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)},
                       chunk={"unit": "chars", "size": 400, "overlap": 40})
    p.chunk(["src"])  # relative, as `rag chunk src` is typed
    p.embed()
    p.index()
    assert {d["path"] for d in pq.read_table(p.docs_path, columns=["path"]).to_pylist()} == \
        {str(tmp_path / "work" / "src" / f"{d}.txt") for d, _ in scifact_docs[:5]}
    for cwd in (tmp_path / "work", tmp_path):
        monkeypatch.chdir(cwd)
        res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
        assert res.exit_code == 0 and "up to date" in res.stdout and "stale" not in res.stdout, res.stdout


# ---------------------------------------------------------------- issue 23: edges of the living index
def _flip_byte(f: Path, at: int | None = None) -> None:
    """Flip one byte of `f` (in the middle unless `at`), keeping its size."""
    data = bytearray(f.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0xFF
    f.write_bytes(bytes(data))


def test_generation_numbers_only_grow_so_a_long_lived_project_never_serves_an_old_index(tmp_path, scifact_docs,
                                                                                         tiny_bi_encoder):
    # issue 23 item 2: rollback, then `update --keep 0` gave the new generation the rolled-back one's name,
    # and a long-lived Project kept answering from the searcher it had cached under that name
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    assert p.search("zyxwvut", mode="sparse", k=3).hits == []  # caches gen-000002
    assert p.rollback()["to"] == "gen-000001"
    time.sleep(0.01)
    (src / "new.txt").write_text("The zyxwvut enzyme.\n", encoding="utf-8")
    out = p.update(keep=0)
    assert out["index"]["generation"] == "gen-000003"
    assert [g.name for _, g in generations(p.index_dir)] == ["gen-000003"]
    assert [h.doc_id for h in p.search("zyxwvut", mode="sparse", k=3).hits] == ["new.txt"]
    assert [h.doc_id for h in Project.open(p.root).search("zyxwvut", mode="sparse", k=3).hits] == ["new.txt"]
    p.index(keep=0)
    assert current_generation(p.index_dir).name == "gen-000004"


def test_the_searcher_cache_key_is_the_generations_content(tmp_path, scifact_docs, tiny_bi_encoder):
    # item 2: even a generation folder replaced under the same name (by hand, or by an earlier version) is reloaded
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    other = build(tmp_path / "q", src, tiny_bi_encoder)
    (src / "new.txt").write_text("The zyxwvut enzyme.\n", encoding="utf-8")
    other.update()
    assert p.search("zyxwvut", mode="sparse", k=3).hits == []
    shutil.rmtree(p.index_dir)
    shutil.copytree(other.index_dir / "gen-000002", p.index_dir / "gen-000001")
    shutil.copy(other.index_dir / "CURRENT", p.index_dir / "CURRENT")
    (p.index_dir / "CURRENT").write_text("gen-000001\n")  # the one-line pointer of earlier versions
    assert [h.doc_id for h in p.search("zyxwvut", mode="sparse", k=3).hits] == ["new.txt"]


@pytest.mark.parametrize("damage", ["chunks.arrow", "dense/hnsw.bin"])
def test_rollback_onto_a_damaged_generation_refuses_naming_the_file(tmp_path, scifact_docs, tiny_bi_encoder, damage):
    # item 3: rollback made a damaged generation current (exit 0); the next search was exit 2
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    f = p.index_dir / "gen-000001" / damage
    _flip_byte(f)
    before = (p.index_dir / "CURRENT").read_bytes()
    with pytest.raises(BadInput, match="not rolled back"):
        p.rollback()
    res = CliRunner().invoke(app, ["rollback", "-p", str(p.root)])
    err = " ".join(res.stderr.split())
    assert res.exit_code == 2 and f"{f} is damaged" in err and "still points at gen-000002" in err, err
    assert (p.index_dir / "CURRENT").read_bytes() == before
    assert p.search("cancer", mode="sparse", k=1).hits


def test_plain_status_finds_a_flipped_byte_in_the_current_generation(tmp_path, scifact_docs, tiny_bi_encoder):
    # item 6: `rag status` said "up to date" (exit 0) for bytes flipped without a change of size
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    f = p.index_dir / "gen-000001" / "chunks.arrow"
    _flip_byte(f)
    st = p.status()
    assert len(st["damaged"]) == 1 and f"{f} is damaged: its sha256 differs" in st["damaged"][0]
    res = CliRunner().invoke(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 2 and "up to date" not in res.stdout and f"damaged: {f}" in res.stdout.replace("\n", "")


@pytest.mark.parametrize("damage", ["digit", "truncated", "one-line digit", "garbage", "empty"])
def test_a_damaged_current_pointer_is_bad_input_naming_it(tmp_path, scifact_docs, tiny_bi_encoder, damage):
    # item 7: one flipped digit in CURRENT served an older generation with exit 0; a truncated one said
    # "gen-0 was removed while it was being opened; try again"
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    cur = p.index_dir / "CURRENT"
    text = cur.read_text()
    assert text.startswith("gen-000002\nfiles.json sha256 ") and len(text.splitlines()) == 4
    cur.write_text({"digit": text.replace("gen-000002", "gen-000001", 1), "truncated": text[:5],
                    "one-line digit": "gen-000009\n", "garbage": "\x00\xff", "empty": ""}[damage])
    with pytest.raises(BadInput, match=str(cur)):
        Project.open(p.root).search("cancer", mode="sparse", k=1)
    run = CliRunner().invoke
    res = run(app, ["search", "cancer", "-p", str(p.root), "--mode", "sparse"])
    assert res.exit_code == 2 and str(cur) in res.stderr.replace("\n", "") and "was removed" not in res.stderr
    res = run(app, ["status", "-p", str(p.root)])
    assert res.exit_code == 2 and f"damaged: {cur}" in res.stdout.replace("\n", "")
    assert "* gen-" not in res.stdout  # no generation is called current
    res = run(app, ["update", "-p", str(p.root)])
    assert res.exit_code == 2 and str(cur) in res.stderr.replace("\n", "")
    p.index()  # the way out: a new generation and a new pointer; every complete generation was kept
    names = [g.name for _, g in generations(p.index_dir)]
    assert names[:2] == ["gen-000001", "gen-000002"] and len(names) == 3
    assert current_generation(p.index_dir).name == names[2]
    assert p.search("cancer", mode="sparse", k=1).hits and p.status()["damaged"] == []


def test_a_one_line_current_of_earlier_versions_is_read_and_replaced(tmp_path, scifact_docs, tiny_bi_encoder):
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    before = sparse_results(p)
    (p.index_dir / "CURRENT").write_text("gen-000001\n")
    assert sparse_results(p) == before and p.status()["damaged"] == []
    assert p.index()["generation"] == "gen-000002"
    assert (p.index_dir / "CURRENT").read_text().splitlines()[1].startswith("files.json sha256 ")


def test_a_one_line_current_naming_an_older_generation_is_refused(tmp_path, scifact_docs, tiny_bi_encoder):
    # #31 item 19: a one-line CURRENT (from a backup, or by hand) naming gen-000001 while gen-000002 exists
    # served gen-000001's results with exit 0
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    cur = p.index_dir / "CURRENT"
    cur.write_text("gen-000001\n")
    with pytest.raises(BadInput, match="names gen-000001, but gen-000002 is the newest complete generation"):
        Project.open(p.root).search("cancer", mode="sparse", k=1)
    res = CliRunner().invoke(app, ["search", "cancer", "-p", str(p.root), "--mode", "sparse"])
    err = " ".join(res.stderr.split())
    assert res.exit_code == 2 and str(cur) in res.stderr.replace("\n", ""), err
    assert "gen-000002 is the newest" in err and res.stdout == ""
    cur.write_text("gen-000002\n")  # naming the newest, it is still read
    assert Project.open(p.root).search("cancer", mode="sparse", k=1).hits


def test_a_search_retries_when_its_generation_is_removed_while_it_is_hashed(tmp_path, scifact_docs,
                                                                            tiny_bi_encoder, monkeypatch):
    # item 9: a generation deleted between the size check and the hash of one of its files gave
    # FileNotFoundError (exit 1) instead of reading CURRENT again
    import rag_cli.store.index_folder as index_folder

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    p.index()
    real = index_folder.sha256_file
    calls = []

    def writer_removes_it(path, *a, **kw):
        calls.append(Path(path))
        if len(calls) == 1:  # a writer switches CURRENT to another generation, then removes this one
            index_folder.switch_current(p.index_dir, "gen-000001")
            os.rename(p.index_dir / "gen-000002", p.index_dir / ".gen-000002.tmp")
            shutil.rmtree(p.index_dir / ".gen-000002.tmp")
        return real(path, *a, **kw)

    monkeypatch.setattr(index_folder, "sha256_file", writer_removes_it)
    hits = Project.open(p.root).search("cancer", mode="sparse", k=1).hits
    assert hits and calls[0].parent.name == "gen-000002" and calls[-1].is_relative_to(p.index_dir / "gen-000001")


def test_the_next_writer_removes_the_temporary_files_a_killed_one_left(tmp_path, scifact_docs, tiny_bi_encoder):
    # item 4: a killed embed left .embeddings.parquet.*.tmp behind, and later updates did not remove it
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    [cache] = (p.root / "cache" / "vectors").iterdir()
    left = [p.root / ".embeddings.parquet.k1ll3d.tmp", p.root / ".chunks.parquet.abc123.tmp",
            p.root / ".docs.parquet.x.tmp", cache / ".part-00000000000000000001-42-000001.parquet.zz.tmp"]
    for f in left:
        f.write_bytes(b"half a file")
    reader = p.root / "runs" / ".mine.parquet.r3ad.tmp"  # a reader (no lock) may be writing this one now
    reader.parent.mkdir()
    reader.write_bytes(b"being written")
    out = p.update()
    assert out["index"]["unchanged"]
    assert _temporary_files(p.root) == ["runs/.mine.parquet.r3ad.tmp"]


@pytest.mark.parametrize("where", ["index", "chunk tables", "vector cache", "embeddings"])
def test_a_full_disk_names_the_file_and_the_space_needed(tmp_path, scifact_docs, tiny_bi_encoder, monkeypatch, where):
    # item 5: a full disk failed cleanly but said only "OSError: [Errno 28] No space left on device"
    import errno

    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    import rag_cli.index.sparse
    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    time.sleep(0.01)
    write_corpus(src, scifact_docs[:12])
    full = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    def fail(*args, **kwargs):
        raise full

    if where == "index":
        monkeypatch.setattr(rag_cli.index.sparse.SparseIndex, "save", fail)
        named = p.index_dir / ".gen-000002.tmp" / "sparse"
    elif where == "chunk tables":
        real_write = pq.write_table
        monkeypatch.setattr(pq, "write_table", lambda t, where, *a, **k: fail() if ".chunks.parquet." in str(where)
                            else real_write(t, where, *a, **k))
        named = p.chunks_path
    elif where == "vector cache":
        real_write = pq.write_table
        monkeypatch.setattr(pq, "write_table", lambda t, where, *a, **k: fail() if "/.part-" in str(where)
                            else real_write(t, where, *a, **k))
        named = p.root / "cache" / "vectors"
    else:
        class Writer(pq.ParquetWriter):
            def write_table(self, table, *a, **k):
                fail() if ".embeddings.parquet." in str(self.where) else super().write_table(table, *a, **k)

        monkeypatch.setattr(pq, "ParquetWriter", Writer)
        named = p.embeddings_path
    kept = [p.index_dir / "CURRENT"] + ([p.embeddings_path] if where != "index" else [])  # index: embedded before
    before = {f: f.read_bytes() for f in kept}
    res = CliRunner().invoke(app, ["update", "-p", str(p.root)])
    err = " ".join(res.stderr.split())
    assert res.exit_code == 1 and f"no space left on the device: {named}" in err, err
    assert "this step needs about " in err and " are free" in err and "Errno 28" not in err
    assert {f: f.read_bytes() for f in before} == before
    assert current_generation(p.index_dir).name == "gen-000001" and _temporary_files(p.root) == []
    assert not [x for x in p.index_dir.iterdir() if x.name.startswith(".")]
    monkeypatch.undo()
    assert p.update()["index"]["generation"] == "gen-000002"


@pytest.mark.parametrize("same_tick", [False, True], ids=["edit during the read", "edit in the same mtime tick"])
def test_an_edit_that_lands_while_update_reads_the_file_is_not_lost(tmp_path, scifact_docs, tiny_bi_encoder,
                                                                    monkeypatch, same_tick):
    # item 1: an edit between reading a file and taking its mtime was never indexed: docs.parquet recorded
    # the new mtime with the old content, so every later update saw the file as unchanged
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    f = src / f"{scifact_docs[0][0]}.txt"
    time.sleep(0.01)
    f.write_text("Version two is about the qwertyuiop receptor.\n", encoding="utf-8")
    real = Path.read_bytes
    edited = []

    def read_then_edit(self):
        data = real(self)
        if self == f and not edited:  # the edit lands right after the bytes were read
            mtime = os.stat(f).st_mtime_ns
            f.write_text("Version three is about the asdfghjkl enzymes.\n", encoding="utf-8")  # same size
            if same_tick:  # an edit within the same tick of the file system's clock keeps the mtime
                os.utime(f, ns=(mtime, mtime))
            else:
                os.utime(f, ns=(mtime + 10_000_000, mtime + 10_000_000))
            edited.append(True)
        return data

    monkeypatch.setattr(Path, "read_bytes", read_then_edit)
    p.update()
    monkeypatch.undo()
    assert edited
    p.update()  # whatever the first update read, this one must index version three
    ids = [h.doc_id for h in Project.open(p.root).search("asdfghjkl", mode="sparse", k=3).hits]
    assert ids == [f.name]
    assert Project.open(p.root).search("qwertyuiop", mode="sparse", k=3).hits == []
    assert p.status()["stale"] == []


def _embedding_vectors(p: Project) -> np.ndarray:
    from rag_cli.store.embeddings import read_embeddings

    return read_embeddings(p.embeddings_path).vectors


def _damage_a_cached_vector(part: Path, keep_checksum: bool) -> None:
    """Give the first vector of a vector cache part a component of 3.2e34 (a flipped exponent bit),
    the part's metadata (its checksum) kept, or dropped as in parts of earlier versions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rag_cli.store.embeddings import to_matrix, vector_array

    t = pq.read_table(part)
    vecs = to_matrix(t.column("vector"), t.schema.field("vector").type.list_size).copy()
    vecs[0, 0] = 3.2e34
    schema = t.schema if keep_checksum else t.schema.remove_metadata()
    pq.write_table(pa.Table.from_arrays([t.column("text_sha256"), vector_array(vecs)], schema=schema), part,
                   compression="zstd")


@pytest.mark.parametrize("keep_checksum", [True, False], ids=["checksum", "norm (a part of an earlier version)"])
def test_a_damaged_vector_in_the_cache_is_set_aside_and_embedded_again(tmp_path, scifact_docs, tiny_bi_encoder,
                                                                       keep_checksum):
    # item 8: a flipped bit in the vector cache became a vector of norm 3.2e34 that embed, index and
    # `status --verify` all accepted
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    good = _embedding_vectors(p)
    [part] = (p.root / "cache" / "vectors").glob("*/part-*.parquet")
    _damage_a_cached_vector(part, keep_checksum)
    res = CliRunner().invoke(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 2 and str(part) in res.stderr.replace("\n", ""), res.output
    out = p.embed()
    assert out["cache_repaired"] and str(part) in out["cache_repaired"][0] and not part.exists()
    assert np.allclose(_embedding_vectors(p), good, atol=1e-6)
    assert p.status(verify=True)["damaged"] == []
    p.index()
    assert p.search("cancer", mode="dense", k=1).hits


def _parts(p: Project) -> set[Path]:
    return set((p.root / "cache" / "vectors").glob("*/part-*.parquet"))


def _built_with_a_part_of_two_documents(tmp_path, scifact_docs, tiny_bi_encoder) -> tuple[Project, Path, Path]:
    """(project, its sources, the vector cache part holding exactly the vectors of documents 10 and 11):
    built from documents 0-9, then updated with 10 and 11 added."""
    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    before = _parts(p)
    time.sleep(0.01)
    write_corpus(src, scifact_docs[:12])
    p.update()
    [part] = _parts(p) - before
    return p, src, part


@pytest.mark.parametrize("command", ["embed", "update"])
def test_a_damaged_cache_part_of_vectors_no_longer_used_is_set_aside(tmp_path, scifact_docs, tiny_bi_encoder,
                                                                     command):
    # issue 31 item 20: a damaged part holding only vectors of removed documents was never read by embed, so
    # never set aside, and `status --verify` exited 2 after every embed and update
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from rag_cli.cli import app

    p, src, part = _built_with_a_part_of_two_documents(tmp_path, scifact_docs, tiny_bi_encoder)
    time.sleep(0.01)
    write_corpus(src, scifact_docs[:10])  # documents 10 and 11 removed: nothing uses that part any more
    p.update()
    n_stale = pq.read_metadata(part).num_rows
    _damage_a_cached_vector(part, keep_checksum=True)
    run = CliRunner().invoke
    res = run(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 2 and str(part) in res.stderr.replace("\n", ""), res.output
    res = run(app, [command, "--json", "-p", str(p.root)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    embed = out if command == "embed" else out["embed"]
    assert embed["cache_repaired"] == [
        f"{part}: its vectors' sha256 differs from the one written (the file was changed or damaged); it was set "
        f"aside (deleted): none of its {n_stale} vector(s) is used by the current chunks"]
    assert (embed["n_embedded"], embed["n_texts_embedded"]) == (0, 0)
    assert not part.exists() and len(_parts(p)) == 1
    res = run(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 0 and "up to date" in res.stdout, res.output
    assert p.embed().cache_repaired is None  # nothing left to set aside


def test_a_repairing_embed_counts_the_vectors_it_embedded_again(tmp_path, scifact_docs, tiny_bi_encoder):
    # issue 31 item 20: `rag embed --json` that embedded again the vectors of a damaged cache part said
    # n_embedded 0 (and n_reused: every chunk)
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from rag_cli.cli import app

    p, _, part = _built_with_a_part_of_two_documents(tmp_path, scifact_docs, tiny_bi_encoder)
    good = _embedding_vectors(p)
    held = set(pq.read_table(part, columns=["text_sha256"]).column(0).to_pylist())
    shas = pq.read_table(p.embeddings_path, columns=["text_sha256"]).column(0).to_pylist()
    n_chunks, n_again = len(shas), sum(s in held for s in shas)
    assert 0 < n_again < n_chunks and len(held) == n_again  # (no two chunks of the corpus share a text)
    _damage_a_cached_vector(part, keep_checksum=True)
    res = CliRunner().invoke(app, ["embed", "--json", "-p", str(p.root)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["n_chunks"], out["n_embedded"], out["n_texts_embedded"], out["n_reused"]) == (
        n_chunks, n_again, n_again, n_chunks - n_again)
    assert out["cache_repaired"] == [
        f"{part}: its vectors' sha256 differs from the one written (the file was changed or damaged); it was set "
        f"aside and the {n_again} vector(s) of it that the chunks use are embedded again"]
    assert p.manifest()["embed"]["n_embedded"] == n_again
    assert np.allclose(_embedding_vectors(p), good, atol=1e-6)
    assert p.status(verify=True)["damaged"] == []


def test_index_refuses_embeddings_whose_vectors_lost_their_unit_norm(tmp_path, scifact_docs, tiny_bi_encoder):
    # item 8: a vector of norm 3.2e34 in embeddings.parquet was indexed
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from rag_cli.cli import app
    from rag_cli.store.embeddings import to_matrix, vector_array

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    t = pq.read_table(p.embeddings_path)
    vecs = to_matrix(t.column("vector"), t.schema.field("vector").type.list_size).copy()
    vecs[2, 0] = 3.2e34
    pq.write_table(t.set_column(t.schema.get_field_index("vector"), t.schema.field("vector"), vector_array(vecs)),
                   p.embeddings_path)
    before = (p.index_dir / "CURRENT").read_bytes()
    res = CliRunner().invoke(app, ["index", "-p", str(p.root)])
    err = " ".join(res.stderr.split())
    assert res.exit_code == 2 and f"{p.embeddings_path} is damaged" in err and "norm 3.2e+34" in err, err
    assert (p.index_dir / "CURRENT").read_bytes() == before
    res = CliRunner().invoke(app, ["status", "--verify", "-p", str(p.root)])
    assert res.exit_code == 2 and f"{p.embeddings_path} is damaged" in " ".join(res.stderr.split())


@pytest.mark.parametrize("command", ["index", "update", "embed"])
def test_invalid_utf8_in_chunks_parquet_is_bad_input_naming_the_file(tmp_path, scifact_docs, tiny_bi_encoder,
                                                                      command):
    # item 10: a flipped bit in chunks.parquet made update and index exit 1 with a bare UnicodeDecodeError
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from rag_cli.cli import app

    src = tmp_path / "src"
    write_corpus(src, scifact_docs[:10])
    p = build(tmp_path / "p", src, tiny_bi_encoder)
    t = pq.read_table(p.chunks_path)
    for name in ("text", "embed_text"):
        if name in t.column_names:
            raw = [s.encode() for s in t.column(name).to_pylist()]
            raw[1] = raw[1][:5] + b"\xff\xfe" + raw[1][7:]  # the bytes a flipped bit leaves: not UTF-8
            i = t.schema.get_field_index(name)
            t = t.set_column(i, t.schema.field(i), pa.array(raw, pa.binary()).view(pa.string()))
    pq.write_table(t, p.chunks_path, compression="zstd")
    time.sleep(0.01)
    (src / "new.txt").write_text("A new document about otters.\n", encoding="utf-8")
    res = CliRunner().invoke(app, [command, "-p", str(p.root)])
    err = " ".join(res.stderr.split())
    assert res.exit_code == 2 and str(p.chunks_path) in err and "UnicodeDecodeError" not in err, (res.exit_code, err)
    assert "UTF8" in err or "UTF-8" in err, err
    assert current_generation(p.index_dir).name == "gen-000001"


def test_a_project_folder_inside_a_source_is_not_read_as_documents(tmp_path, scifact_docs, tiny_bi_encoder):
    # item 11: the project folder inside a source (as the systemd recipe had it) is not a source
    src = tmp_path / "notes"
    write_corpus(src, scifact_docs[:5])
    p = build(src / "project", src, tiny_bi_encoder)
    (p.root / "eval").mkdir()
    (p.root / "eval" / "report.md").write_text("# An eval report\n\nrecall 0.9\n", encoding="utf-8")
    assert p.manifest()["chunk"]["skipped"] == []
    assert p.status()["stale"] == []
    out = p.update()
    assert out["chunk"]["n_docs"] == 5 and out["chunk"]["skipped"] == [] and out["index"]["unchanged"]
