"""A key's scope leaks nothing (issue #32), as a hypothesis property over the served search itself
(`Service.search` / `ask` / `status` with a scope, in process: the same code as `rag serve`): random
metadata on the documents, random scope and request filters, every mode; each hit, answer citation and
evidence chunk must belong to a document that satisfies the scope AND the request's filter, computed by
brute force over the metadata here (not by the filter code), and a dense search returns as many hits as
the scope lets through (up to k), so the scope is a pre-filter, not a cut of a ranking."""

from __future__ import annotations

import fnmatch
import json
import random
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TEAMS = ["finance", "eng", "legal"]
TAGS = ["api", "cli", "ops", "hr"]
WORDS = ["budget", "kubernetes", "invoice", "database", "travel", "latency", "contract", "deploy", "audit"]


def _corpus(folder: Path, seed: int = 32) -> dict[str, dict]:
    """40 Markdown documents with random front matter (team, level, tags; some fields missing).
    Returns the metadata by relative path (the doc_id)."""
    rng = random.Random(seed)
    out = {}
    for i in range(40):
        sub = rng.choice(["public", "internal", "public/deep"])
        meta = {}
        if rng.random() < 0.9:
            meta["team"] = rng.choice(TEAMS)
        if rng.random() < 0.8:
            meta["level"] = str(rng.randint(0, 5))
        if rng.random() < 0.7:
            meta["tags"] = rng.sample(TAGS, rng.randint(1, 3))
        rel = f"{sub}/d{i:02d}.md"
        (folder / sub).mkdir(parents=True, exist_ok=True)
        front = "".join(f"{k}: [{', '.join(v)}]\n" if isinstance(v, list) else f"{k}: {v}\n" for k, v in meta.items())
        body = " ".join(rng.choice(WORDS) for _ in range(30))
        (folder / rel).write_text(f"---\n{front}---\n# D{i}\n\n{body}.\n", encoding="utf-8")
        out[rel] = meta
    return out


def _served(base: Path, model: Path, **build):
    """(Service over the random corpus, {doc_id: metadata}, {doc_id: n chunks}); `build`: `Project.build`'s
    index options (the Milvus backend)."""
    from rag_cli import Project
    from rag_cli.config import ServeConfig
    from rag_cli.serve.service import Service

    _corpus(base / "src")
    p = Project.create(base / "p", model={"embedder": str(model)})
    p.build([base / "src"], **build)
    service = Service(Project.open(base / "p"), ServeConfig()).open()
    s = service.engines.served
    meta = {d: {**json.loads(m or "{}"), "doc_id": d} for d, m in zip(
        s.docs.column("doc_id").to_pylist(), s.docs.column("metadata").to_pylist())}
    assert {m["doc_id"].split("/")[0] for m in meta.values()} == {"public", "internal"}
    n_chunks: dict[str, int] = {}
    for d in s.chunks.column("doc_id").to_pylist():
        n_chunks[d] = n_chunks.get(d, 0) + 1
    return service, meta, n_chunks


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_bi_encoder):
    service, meta, n_chunks = _served(tmp_path_factory.mktemp("scope"), tiny_bi_encoder)
    try:
        yield service, meta, n_chunks
    finally:
        service.close()


@pytest.fixture(scope="module")
def served_milvus(tmp_path_factory, tiny_bi_encoder):
    """`served` on the Milvus backend (Milvus Lite, closed at the end)."""
    from conftest import require_module

    require_module("pymilvus", "pymilvus", "milvus")
    require_module("milvus_lite", "milvus-lite", "milvus")
    from rag_cli.index.milvus import close_clients

    try:
        service, meta, n_chunks = _served(tmp_path_factory.mktemp("scope-milvus"), tiny_bi_encoder,
                                          backend="milvus", uri="m.db")
        assert service.engines.served.meta["dense"]["backend"] == "milvus"
        assert type(service.engines.served.sparse).__module__ == "rag_cli.index.milvus"
        try:
            yield service, meta, n_chunks
        finally:
            service.close()
    finally:
        close_clients()


# conditions: (expression, brute-force predicate over a document's metadata)
def _eq(field, value):
    return f"{field}={value}", lambda m: (any(fnmatch.fnmatchcase(x, value) for x in m[field])
                                          if isinstance(m.get(field), list) else
                                          field in m and fnmatch.fnmatchcase(str(m[field]), value))


def _ne(field, value):
    expr, pos = _eq(field, value)
    return f"{field}!={value}", lambda m: not pos(m)


def _ge(value):
    return f"level>={value}", lambda m: "level" in m and float(m["level"]) >= value


def _lt(value):
    return f"level<{value}", lambda m: "level" in m and float(m["level"]) < value


def _in(field, values):
    return f"{field} in [{', '.join(values)}]", lambda m: (
        any(x in values for x in m[field]) if isinstance(m.get(field), list) else m.get(field) in values)


conditions = st.one_of(
    st.sampled_from(TEAMS).map(lambda t: _eq("team", t)),
    st.sampled_from(TEAMS).map(lambda t: _ne("team", t)),
    st.sampled_from(TAGS).map(lambda t: _eq("tags", t)),
    st.integers(0, 6).map(_ge),
    st.integers(0, 6).map(_lt),
    st.lists(st.sampled_from(TEAMS), min_size=1, max_size=2, unique=True).map(lambda v: _in("team", v)),
    st.sampled_from(["public/*", "internal/*", "public/deep/*", "*d1?.md"]).map(lambda g: _eq("doc_id", g)),
)


def _all(conds):
    return lambda m: all(pred(m) for _, pred in conds)


#: A scope, a request filter, a mode, a query of known words and k: what every scope property is tried on.
search_cases = given(scope=st.lists(conditions, min_size=1, max_size=2), request=st.lists(conditions, max_size=2),
                     mode=st.sampled_from(["sparse", "dense", "hybrid"]),
                     words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), k=st.integers(1, 30))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@search_cases
def test_a_scope_leaks_nothing(served, scope, request, mode, words, k):
    _check_search(served, scope, request, mode, words, k)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@search_cases
def test_a_scope_leaks_nothing_on_milvus(served_milvus, scope, request, mode, words, k):
    _check_search(served_milvus, scope, request, mode, words, k)


def _check_search(served, scope, request, mode, words, k):
    from rag_cli.serve.requests import SearchRequest

    service, meta, n_chunks = served
    allowed = {d for d, m in meta.items() if _all(scope)(m) and _all(request)(m)}
    req = SearchRequest(query=" ".join(words), mode=mode, k=k, filter=[e for e, _ in request] or None)
    hits = service.search(req, scope=tuple(e for e, _ in scope)).data["results"]
    outside = [h["doc_id"] for h in hits if h["doc_id"] not in allowed]
    assert outside == [], (scope, request, outside)
    if mode == "dense":  # a pre-filter: k hits whenever k chunks are in the scope
        assert len(hits) == min(k, sum(n_chunks[d] for d in allowed))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=st.lists(conditions, min_size=1, max_size=2), mode=st.sampled_from(["sparse", "dense", "hybrid"]),
       words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_answers_and_status_stay_in_the_scope(served, scope, mode, words):
    from rag_cli.serve.requests import AskRequest

    service, meta, n_chunks = served
    allowed = {d for d, m in meta.items() if _all(scope)(m)}
    exprs = tuple(e for e, _ in scope)
    answer = service.ask(AskRequest(question=f"What about the {' '.join(words)}?", mode=mode), scope=exprs).data
    seen = [c.split("#")[0] for c in answer.get("citations") or []]
    for key in ("evidence", "sources"):
        seen += [e["doc_id"] for e in answer.get(key) or [] if isinstance(e, dict) and "doc_id" in e]
    assert [d for d in seen if d not in allowed] == [], (scope, answer)
    status = service.status(exprs)
    assert status["documents"] == len(allowed) and status["chunks"] == sum(n_chunks[d] for d in allowed)
