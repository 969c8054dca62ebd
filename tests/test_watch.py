"""`rag watch`: a real `python -m rag_cli watch` process on a temporary folder,
edited like editors and users do, stopped with SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_cli.project import Project
from rag_cli.stages.watch import watch_roots
from rag_cli.store.index_folder import current_generation

REPO = Path(__file__).resolve().parents[1]


def _wait_for(what: str, check, timeout: float = 60.0, proc: subprocess.Popen | None = None):
    """Poll `check()` every 0.1 s until it returns a true value (returned), or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"rag watch exited with {proc.returncode} while waiting for {what}: {proc.stderr.read()}")
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def _sparse_ids(root: Path, query: str) -> list[str]:
    return [h.doc_id for h in Project.open(root).search(query, mode="sparse", k=10)]


def test_watch_roots(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f.md").write_text("x")
    (tmp_path / "c").mkdir()
    got = watch_roots([str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path / "a" / "f.md"),
                       str(tmp_path / "c" / "**" / "*.md")])
    assert got == [(tmp_path / "a").resolve(), (tmp_path / "c").resolve()]


@pytest.mark.slow
def test_watch_applies_batches_and_stops_cleanly_on_sigterm(tmp_path, tiny_bi_encoder):
    src, root = tmp_path / "src", tmp_path / "p"
    src.mkdir()
    (src / "alpha.txt").write_text("Alpha talks about tumour growth in mice.\n", encoding="utf-8")
    (src / "beta.txt").write_text("Beta is about protein folding.\n", encoding="utf-8")
    (src / "gamma.md").write_text("# Gamma\n\nGamma covers vitamin D levels.\n", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_cli", "watch", str(src), "-p", str(root), "--model", str(tiny_bi_encoder),
         "--unit", "chars", "--size", "200", "--overlap", "20", "--debounce", "0.3", "--keep", "1"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = _wait_for("the first generation", lambda: current_generation(root / "index"), proc=proc)
        assert _sparse_ids(root, "vitamin") == ["gamma.md"]
        time.sleep(1.0)  # the watcher starts after the build; the catch-up update covers edits before that

        # one batch: an editor's save (temp file + rename) of beta, a new file, a deletion
        tmp = src / ".beta.txt.swp"
        tmp.write_text("Beta now is about insulin resistance.\n", encoding="utf-8")
        os.replace(tmp, src / "beta.txt")
        (src / "delta.txt").write_text("Delta: insulin and obesity.\n", encoding="utf-8")
        (src / "alpha.txt").unlink()

        def applied():
            gen = current_generation(root / "index")
            done = gen != first and sorted(_sparse_ids(root, "insulin")) == ["beta.txt", "delta.txt"] \
                and _sparse_ids(root, "tumour") == []
            return gen if done else None

        second = _wait_for("the update of the three changes", applied, proc=proc)
        assert _sparse_ids(root, "protein") == [] and _sparse_ids(root, "vitamin") == ["gamma.md"]
        assert Project.open(root).status()["documents"] == 3
        assert "beta.txt" in {d.name for d in src.iterdir()} and not tmp.exists()

        # a second change later: another generation, the one before kept (--keep 1)
        (src / "gamma.md").write_text("# Gamma\n\nGamma now covers stem cells.\n", encoding="utf-8")
        _wait_for("the update of gamma.md",
                  lambda: current_generation(root / "index") not in (first, second)
                  and _sparse_ids(root, "stem") == ["gamma.md"], proc=proc)
        assert _sparse_ids(root, "vitamin") == []
        # the update ends by removing generations beyond --keep 1: wait for it, then stop
        _wait_for("the oldest generation removed", lambda: len(list((root / "index").iterdir())) == 3, proc=proc)

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped" in err and "change(s)" in err
        leftovers = [x.name for x in (root / "index").iterdir() if x.name.startswith(".")]
        assert leftovers == [] and not (root / ".lock.json").exists()
        names = sorted(x.name for x in (root / "index").iterdir())
        assert names[0] == "CURRENT" and names[1:] == [second.name, current_generation(root / "index").name]
        assert Project.open(root).status()["stale"] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_without_sources_or_build_is_bad_input(tmp_path):
    from typer.testing import CliRunner

    from rag_cli.cli import app

    res = CliRunner().invoke(app, ["watch", "-p", str(tmp_path / "p")])
    assert res.exit_code == 2 and "remembers no sources" in res.stderr
    res = CliRunner().invoke(app, ["watch", str(tmp_path), "-p", str(tmp_path / "p"), "--debounce", "0"])
    assert res.exit_code == 2 and "--debounce 0" in res.stderr
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", [".rag", "index-project"])
def test_a_project_folder_inside_a_watched_source_does_not_trigger_itself(tmp_path, tiny_bi_encoder, name):
    # issue 23 item 11: with the project folder inside the watched folder (as the systemd recipe had it),
    # every update's own writes started the next update (7 updates in 90 s with no file changed)
    import threading

    src = tmp_path / "notes"
    src.mkdir()
    (src / "alpha.txt").write_text("Alpha talks about tumour growth in mice.\n", encoding="utf-8")
    p = Project.create(src / name, model={"embedder": str(tiny_bi_encoder)},
                       chunk={"unit": "chars", "size": 200, "overlap": 20})
    stop, batches, updates, errors = threading.Event(), [], [], []
    t = threading.Thread(target=lambda: p.watch([src], debounce=0.2, on_batch=batches.append,
                                                on_update=updates.append, on_error=errors.append, stop=stop))
    t.start()
    try:
        _wait_for("the first build", lambda: current_generation(src / name / "index"))
        time.sleep(4.0)  # nothing changes in the sources: at most the one catch-up update
        assert len(updates) <= 1 and batches == [] and errors == [], (len(updates), batches[:2], errors)
        (src / "beta.txt").write_text("Beta is about protein folding.\n", encoding="utf-8")
        _wait_for("the update of beta.txt", lambda: _sparse_ids(src / name, "protein") == ["beta.txt"])
        # CURRENT moves before the update records and reports itself: wait for its own summary too
        gen = current_generation(src / name / "index").name
        _wait_for("the summary of that update", lambda: any(u.index.generation == gen for u in updates))
        n = len(updates)
        time.sleep(3.0)
        assert len(updates) == n, len(updates) - n
    finally:
        stop.set()
        t.join(timeout=30)
    assert not t.is_alive()
