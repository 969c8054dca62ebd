"""`rag serve` with several collections and scoped keys (issue #32), on a real server process on
127.0.0.1 (tests/test_serve.py's `serving`: port 0, bounded waits, always stopped): routes per collection,
one bi-encoder shared by collections of the same model, hot reloads independent per collection, a damaged
collection answering 503 while the others serve, keys with and without scopes over HTTP and MCP (404 for a
collection a key may not read, /collections filtered, the scope ANDed with the request's filter), the key
file reloaded on change and on SIGHUP, a malformed key file keeping the old keys, and `rag serve --check`.
The property that a scope leaks nothing is tested in process (test_scope_property.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_serve import ENV, JSON, serve_extra, serving  # noqa: F401 (serve_extra: a fixture)

httpx = pytest.importorskip("httpx")

ADMIN, ALICE, CONTRACTOR = "admin-k3y", "alice-k3y", "contractor-k3y"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def write_team_corpus(folder: Path, extra: int = 0) -> None:
    """Markdown documents with front matter: teams finance and eng, public/ and internal/ folders."""
    topics = ["budget forecast quarterly revenue", "kubernetes deployment rollout", "invoice payment terms",
              "database index migration", "expense report travel", "api gateway latency"]
    for i in range(12 + extra):
        team = "finance" if i % 2 == 0 else "eng"
        sub = folder / ("public" if i % 3 == 0 else "internal")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"doc{i:02d}.md").write_text(
            f"---\nteam: {team}\nlevel: {i % 4}\n---\n# Note {i}\n\n{topics[i % len(topics)]} number {i}. "
            f"The {team} team wrote this note about {topics[(i + 1) % len(topics)]}.\n", encoding="utf-8")


def build_project(root: Path, src: Path, model: Path):
    from rag_cli import Project

    p = Project.create(root, model={"embedder": str(model)})
    p.build([src])
    return p


@pytest.fixture(scope="module")
def collections(tmp_path_factory, tiny_bi_encoder):
    """Projects a and b (same tiny bi-encoder), c (built, then damaged: a file of its index truncated)."""
    base = tmp_path_factory.mktemp("coll")
    out = {}
    for name in ("a", "b", "c"):
        write_team_corpus(base / f"src-{name}")
        out[name] = build_project(base / name, base / f"src-{name}", tiny_bi_encoder).root
    current = (out["c"] / "index" / "CURRENT").read_text().split()[0]
    gen = out["c"] / "index" / current
    victim = max((f for f in gen.iterdir() if f.is_file() and f.name != "files.json"), key=lambda f: f.stat().st_size)
    cut = victim.with_name(victim.name + ".cut")  # replaced, never cut in place under a reader that maps it
    cut.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    cut.replace(victim)
    out["base"] = base
    return out


def key_file(path: Path, *, extra: str = "") -> Path:
    path.write_text(f"""
[keys.admin]
env = "RAG_T_ADMIN"
collections = ["*"]

[keys.alice]
sha256 = "{sha(ALICE)}"
collections = ["a"]

[keys.contractor]
sha256 = "{sha(CONTRACTOR)}"
collections = ["a", "b"]
filter = {{ b = ["team=eng"], a = "doc_id=public/*" }}
{extra}""", encoding="utf-8")
    return path


def h(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(collections):
    base = collections["base"]
    keys = key_file(base / "keys.toml")
    env = {**ENV, "RAG_T_ADMIN": ADMIN}
    with serving(base, "--collection", f"a={collections['a']}", "--collection", f"b={collections['b']}",
                 "--collection", f"c={collections['c']}", "--keys", str(keys), env=env) as s:
        yield s


def chunk_docs(root: Path) -> dict[str, dict]:
    """doc_id -> {"path", "team"} of a project's current index (to check hits against)."""
    from rag_cli.index.generation import IndexFolder

    s = IndexFolder.open(root / "index", root, ())
    meta = [json.loads(m or "{}") for m in s.docs.column("metadata").to_pylist()]
    return {d: {"path": path, **m} for d, path, m in zip(s.docs.column("doc_id").to_pylist(),
                                                         s.docs.column("path").to_pylist(), meta)}


# --------------------------------------------------------------------------- routes, health, 503, sharing
@pytest.mark.e2e
def test_collections_routes_health_and_a_damaged_one(server, collections):
    r = httpx.get(server.url + "/collections", timeout=30)
    assert r.status_code == 401
    probe = httpx.get(server.url + "/healthz", timeout=30).json()  # no key: counts, no names
    assert probe["collections"] == {"served": 3, "unavailable": 1} and '"a"' not in json.dumps(probe)
    health = httpx.get(server.url + "/healthz", headers=h(ADMIN), timeout=30).json()
    assert set(health["collections"]) == {"a", "b", "c"} and health["ok"] is False
    assert health["collections"]["a"]["available"] and health["collections"]["b"]["available"]
    assert not health["collections"]["c"]["available"] and health["collections"]["c"]["reload_error"]
    assert str(collections["base"]) not in json.dumps(health)
    assert health["embedders"] == 1  # a and b use the same bi-encoder: one loaded copy
    listing = httpx.get(server.url + "/collections", headers=h(ADMIN), timeout=30).json()["collections"]
    assert [(c["name"], c["available"]) for c in listing] == [("a", True), ("b", True), ("c", False)]
    for name in ("a", "b"):
        r = server.post(f"/c/{name}/search", {"query": "budget forecast", "k": 3}, headers=h(ADMIN))
        assert r.status_code == 200 and len(r.json()["results"]) == 3 and r.headers["x-rag-generation"]
        assert httpx.get(server.url + f"/c/{name}/status", headers=h(ADMIN), timeout=30).json()["project"] == \
            str(collections[name])
    r = server.post("/c/c/search", {"query": "budget", "k": 3}, headers=h(ADMIN))
    assert r.status_code == 503 and "'c' cannot be served" in r.json()["error"]
    assert httpx.get(server.url + "/c/c/status", headers=h(ADMIN), timeout=30).status_code == 503
    assert server.post("/search", {"query": "budget"}, headers=h(ADMIN)).status_code == 404  # 3 served: no /search
    r = server.post("/c/nope/search", {"query": "budget"}, headers=h(ADMIN))
    assert r.status_code == 404 and "no collection 'nope'" in r.json()["error"]


# --------------------------------------------------------------------------- keys and scopes over HTTP
@pytest.mark.e2e
def test_keys_see_only_what_they_may(server, collections):
    docs_a, docs_b = chunk_docs(collections["a"]), chunk_docs(collections["b"])
    assert server.post("/c/a/search", {"query": "budget"}, headers=h("wrong")).status_code == 401
    # alice: collection a only; b and c are 404, as a collection that does not exist, never named
    assert [c["name"] for c in httpx.get(server.url + "/collections", headers=h(ALICE), timeout=30)
            .json()["collections"]] == ["a"]
    for name in ("b", "c"):
        r = server.post(f"/c/{name}/search", {"query": "budget"}, headers=h(ALICE))
        assert r.status_code == 404 and r.json()["error"] == \
            f"no collection '{name}'; the collections this key may read: a"
        assert httpx.get(server.url + f"/c/{name}/status", headers=h(ALICE), timeout=30).status_code == 404
    health = httpx.get(server.url + "/healthz", headers=h(ALICE), timeout=30).json()
    assert set(health["collections"]) == {"a"}
    unscoped = server.post("/c/a/search", {"query": "budget forecast", "k": 12}, headers=h(ALICE)).json()
    assert {x["doc_id"].split("/")[0] for x in unscoped["results"]} == {"public", "internal"}
    # the contractor: a through doc_id=public/*, b through team=eng
    listing = httpx.get(server.url + "/collections", headers=h(CONTRACTOR), timeout=30).json()["collections"]
    assert [(c["name"], c["scoped"]) for c in listing] == [("a", True), ("b", True)]
    for mode in ("sparse", "dense", "hybrid"):
        hits = server.post("/c/b/search", {"query": "budget forecast invoice", "k": 20, "mode": mode},
                           headers=h(CONTRACTOR)).json()["results"]
        assert hits and all(docs_b[x["doc_id"]]["team"] == "eng" for x in hits), mode
        hits = server.post("/c/a/search", {"query": "kubernetes deployment", "k": 20, "mode": mode},
                           headers=h(CONTRACTOR)).json()["results"]
        assert hits and all(x["doc_id"].startswith("public/") for x in hits), mode
    # the request's filter is ANDed with the scope, never replacing it
    both = server.post("/c/b/search", {"query": "budget", "k": 20, "filter": "doc_id=public/*"},
                       headers=h(CONTRACTOR)).json()["results"]
    assert both and all(docs_b[x["doc_id"]]["team"] == "eng" and x["doc_id"].startswith("public/")
                        for x in both)
    none = server.post("/c/b/search", {"query": "budget", "k": 20, "filter": ["team=finance"]},
                       headers=h(CONTRACTOR))
    assert none.status_code == 200 and none.json()["results"] == []
    # an answer's evidence and citations stay in the scope
    answer = server.post("/c/b/ask", {"question": "What does the finance team say about the budget forecast?"},
                         headers=h(CONTRACTOR)).json()
    cited = [c.split("#")[0] for c in answer.get("citations", [])] + \
        [e["doc_id"] for e in answer.get("evidence", []) if isinstance(e, dict) and "doc_id" in e]
    assert all(docs_b[d]["team"] == "eng" for d in cited), answer
    # /status: counted in the scope
    status = httpx.get(server.url + "/c/b/status", headers=h(CONTRACTOR), timeout=30).json()
    eng = [d for d, m in docs_b.items() if m["team"] == "eng"]
    assert status["scoped"] is True and status["documents"] == len(eng) and "project" not in status
    # an error message names no field that only documents outside the scope have
    r = server.post("/c/b/search", {"query": "budget", "filter": "nosuchfield=1"}, headers=h(CONTRACTOR))
    assert r.status_code == 400 and "nosuchfield" in r.json()["error"]


# --------------------------------------------------------------------------- MCP with a key
@pytest.mark.e2e
def test_mcp_with_a_scoped_key(server, collections):
    from mcp import Client

    docs_b = chunk_docs(collections["b"])

    async def main():
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=h(CONTRACTOR), timeout=60) as http:
            async with Client(streamable_http_client(server.url + "/mcp", http_client=http)) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                resources = sorted(str(r.uri) for r in (await c.list_resources()).resources)
                found = await c.call_tool("search", {"collection": "b", "query": "budget invoice", "k": 10})
                hidden = await c.call_tool("search", {"collection": "c", "query": "budget"})
                status = await c.read_resource("rag://c/b/status")
                return tools, resources, found, hidden, status

    tools, resources, found, hidden, status = asyncio.run(asyncio.wait_for(main(), timeout=120))
    assert tools["search"].input_schema["properties"]["collection"]["enum"] == ["a", "b"]
    assert resources == ["rag://c/a/status", "rag://c/b/status"]
    hits = found.structured_content["results"]
    assert not found.is_error and hits and all(docs_b[x["doc_id"]]["team"] == "eng" for x in hits)
    assert hidden.is_error and "no collection 'c'; the collections this key may read: a, b" in hidden.content[0].text
    assert json.loads(status.contents[0].text)["scoped"] is True


# --------------------------------------------------------------------------- independent hot reloads
@pytest.mark.e2e
def test_hot_reloads_are_independent(tmp_path, tiny_bi_encoder):
    for name in ("a", "b"):
        write_team_corpus(tmp_path / f"src-{name}")
        build_project(tmp_path / name, tmp_path / f"src-{name}", tiny_bi_encoder)
    with serving(tmp_path, "--collection", f"a={tmp_path / 'a'}", "--collection", f"b={tmp_path / 'b'}",
                 "--reload-poll", "0.1", "--mcp", "none", "--log") as s:
        before = httpx.get(s.url + "/healthz", timeout=30).json()["collections"]
        write_team_corpus(tmp_path / "src-a", extra=3)
        proc = subprocess.run([sys.executable, "-m", "rag_cli", "update", "-p", str(tmp_path / "a"), "-q"], env=ENV,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 60
        while (now := httpx.get(s.url + "/healthz", timeout=30).json()["collections"])["a"]["reloads"] < 1:
            assert time.monotonic() < deadline, "collection a did not reload within 60 s"
            time.sleep(0.1)
        assert now["a"]["generation"] != before["a"]["generation"]
        assert now["b"] == {**before["b"], "uptime_s": now["b"]["uptime_s"], "requests": now["b"]["requests"]}
        a = s.post("/c/a/search", {"query": "note 14", "k": 20, "mode": "sparse"}).json()
        b = s.post("/c/b/search", {"query": "note 14", "k": 20, "mode": "sparse"}).json()
        assert any("doc14" in x["doc_id"] for x in a["results"])
        assert not any("doc14" in x["doc_id"] for x in b["results"])
        s.post("/c/b/search", {"query": "only in b", "k": 1})
    from rag_cli.store.query_log import read_log  # the query log is per collection

    assert read_log(tmp_path / "a", "queries").column("query").to_pylist() == ["note 14"]
    assert read_log(tmp_path / "b", "queries").column("query").to_pylist() == ["note 14", "only in b"]
    # one collection: the single-project routes too
    with serving(tmp_path, "--collection", f"a={tmp_path / 'a'}", "--mcp", "none") as s:
        assert s.post("/search", {"query": "budget", "k": 2}).json() == s.post("/c/a/search",
                                                                             {"query": "budget", "k": 2}).json()


# --------------------------------------------------------------------------- the key file reloaded
@pytest.mark.e2e
def test_key_file_reload_and_a_malformed_one(collections, tmp_path):
    keys = key_file(tmp_path / "keys.toml")
    env = {**ENV, "RAG_T_ADMIN": ADMIN}
    with serving(tmp_path, "--collection", f"a={collections['a']}", "--collection", f"b={collections['b']}",
                 "--keys", str(keys), "--mcp", "none", env=env) as s:
        new = "fresh-k3y"
        assert s.post("/c/b/search", {"query": "budget"}, headers=h(new)).status_code == 401
        key_file(keys, extra=f'\n[keys.bob]\nsha256 = "{sha(new)}"\ncollections = ["b"]\n')
        deadline = time.monotonic() + 30
        while s.post("/c/b/search", {"query": "budget"}, headers=h(new)).status_code != 200:  # by mtime
            assert time.monotonic() < deadline, "the changed key file was not reloaded within 30 s"
            time.sleep(0.2)
        # malformed: the old keys stay, /healthz and stderr say why
        text = keys.read_text()
        keys.write_text(text.replace('collections = ["b"]', 'collections = ["b"]\nfilter = { b = "team===x" }'))
        deadline = time.monotonic() + 30
        while (health := httpx.get(s.url + "/healthz", headers=h(ADMIN), timeout=30).json())["keys"]["error"] is None:
            assert time.monotonic() < deadline, "the malformed key file was not noticed within 30 s"
            time.sleep(0.2)
        assert "keys.toml:18:" in health["keys"]["error"] and "doubled operator" in health["keys"]["error"]
        assert s.post("/c/b/search", {"query": "budget"}, headers=h(new)).status_code == 200
        assert s.post("/c/a/search", {"query": "budget"}, headers=h(ALICE)).status_code == 200
        probe = httpx.get(s.url + "/healthz", timeout=30).json()
        assert probe["keys"]["error"] and "keys.toml" not in probe["keys"]["error"]
        # SIGHUP: the repaired file, bob removed (the mtime poll may also see it: either reloads it)
        keys.write_text(text.split("\n[keys.bob]")[0])
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while s.post("/c/b/search", {"query": "budget"}, headers=h(new)).status_code != 401:
            assert time.monotonic() < deadline, "the key file was not reloaded after SIGHUP within 30 s"
            time.sleep(0.2)
        assert httpx.get(s.url + "/healthz", headers=h(ADMIN), timeout=30).json()["keys"]["error"] is None
    log = s.log.read_text()
    assert "the key file could not be reloaded" in log and "keys reloaded" in log
    assert ALICE not in log and CONTRACTOR not in log and ADMIN not in log


# --------------------------------------------------------------------------- rag serve --check
@pytest.mark.e2e
def test_serve_check(collections, tmp_path):
    def check(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rag_cli", "serve", "--check", *map(str, args)],
                              env={**ENV, "RAG_T_ADMIN": ADMIN}, capture_output=True, text=True, timeout=120)

    keys = key_file(tmp_path / "keys.toml")
    server_file = tmp_path / "serve.toml"
    server_file.write_text(f'[server]\nkeys = "keys.toml"\n\n[collections.a]\nfolder = "{collections["a"]}"\n'
                           f'max_k = 20\n\n[collections.b]\nfolder = "{collections["b"]}"\n', encoding="utf-8")
    res = check("--server-file", server_file)
    assert res.returncode == 0, res.stderr
    assert "key contractor: a (doc_id=public/*), b (team=eng)" in res.stdout and res.stdout.strip().endswith("ok")
    key_file(keys, extra='\n[keys.dup]\nsha256 = "' + sha(ALICE) + '"\ncollections = ["a"]\n')
    res = check("--server-file", server_file)
    assert res.returncode == 2 and f"{keys}:15:" in res.stderr and "the same key as 'alice'" in res.stderr
    keys.write_text(keys.read_text().split("\n[keys.dup]")[0].replace("team=eng", "tema=eng"))
    res = check("--server-file", server_file)
    assert res.returncode == 2 and f"{keys}:13:" in res.stderr and "no field 'tema'" in res.stderr
    res = check("--collection", f"a={collections['a']}", "--collection", f"c={collections['c']}")
    assert res.returncode == 2 and "--collection: collection 'c'" in res.stderr
    res = check("--collection", f"a={collections['a']}", "--keys", key_file(keys))
    assert res.returncode == 2 and "names the collection 'b', which is not served" in res.stderr
