"""`--filter` on chunk columns, document fields and front-matter metadata:
parsing and matching, applied before retrieval in both indexes, unknown fields."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.errors import BadInput
from rag_cli.index.filters import chunk_mask, parse
from rag_cli.project import Project


def test_parse_and_match():
    c = parse("tags in [api, 'cli']")
    assert (c.field, c.op, c.value) == ("tags", "in", ("api", "cli"))
    assert c.matches(["cli", "x"]) and not c.matches(["x"]) and not c.matches(None)
    assert parse("tags not in [api]").matches(None) and not parse("tags not in [api]").matches(["api"])
    d = parse("date>=2025-01-01")
    assert d.matches("2025-01-01") and d.matches("2025-03-04T10:00:00Z") and not d.matches("2024-12-31")
    assert not d.matches("soon") and not d.matches(None)
    assert parse("year<2020").matches(2019) and parse("year<2020").matches("2019.5")
    assert not parse("year<2020").matches("2020") and not parse("year<2020").matches("2019-01-01")
    assert parse("doc_id=guides/*").matches("guides/a.md") and not parse("doc_id=guides/*").matches("x/guides/a")
    assert parse("draft=true").matches(True) and parse("n==3").matches(3.0)
    assert parse("lang!=en").matches("de") and parse("lang!=en").matches(None) and not parse("lang!=en").matches("en")
    for bad in ("date", "date>=soon", "=x", "tags in api"):
        with pytest.raises(BadInput, match="--filter"):
            parse(bad)


@pytest.mark.parametrize("bad, why", [
    ("path=[", "never closed"), ("path=guides/[ab", "never closed"), ("tags in [a, [b]", "never closed"),
    ("path=a\nb", "control character"), ("path=\x1b[31m", "control character"), ("path=a\tb", "control character"),
    ("path=", "no VALUE"), ("path!= ", "no VALUE"), ("tags in []", "list is empty"), ("tags in [ , ]", "list is empty"),
    ("path===x", "doubled operator"), ("n=>3", "doubled operator"), ("n<<3", "doubled operator"),
])
def test_expressions_that_could_never_match_are_refused(bad, why):
    """#31 item 18: a typo'd operator, an unclosed glob set, an empty value or list, a newline."""
    with pytest.raises(BadInput, match=why) as e:
        parse(bad)
    assert repr(bad) in str(e.value)


def test_what_the_refusals_leave_allowed():
    assert parse("path==x").value == "x" and parse("path==x").op == "="  # == is =
    assert parse('path=""').value == "" and parse('n="=3"').value == "=3"  # quoted: taken as written
    assert parse("path=[[]x").matches("[x") and not parse("path=[[]x").matches("x")  # a literal [
    assert parse("path=[!a]*").matches("b.md") and parse("path=[]]").matches("]") and parse("x=a]").matches("a]")


def test_chunk_mask_combines_with_and_and_names_unknown_fields():
    chunks = pa.table({"chunk_id": ["a#0", "a#1", "b#0", "c#0"], "doc_id": ["a", "a", "b", "c"],
                       "text": ["t"] * 4})
    docs = pa.table({"doc_id": ["a", "b", "c"], "path": ["/x/a.md", "/x/b.txt", "/y/c.md"],
                     "title": ["A", "B", "C"], "n_chars": [10, 20, 30],
                     "metadata": [json.dumps({"date": "2025-02-01", "tags": ["api"]}),
                                  json.dumps({"date": "2024-01-01"}), "{}"]})
    assert chunk_mask(None, chunks, docs) is None
    assert chunk_mask(["path=*.md"], chunks, docs).tolist() == [True, True, False, True]
    assert chunk_mask(["path=*.md", "date>=2025-01-01"], chunks, docs).tolist() == [True, True, False, False]
    assert chunk_mask("chunk_id=*#1", chunks, docs).tolist() == [False, True, False, False]
    assert chunk_mask(["n_chars>15", "tags not in [api]"], chunks, docs).tolist() == [False, False, True, True]
    with pytest.raises(BadInput, match=r"no field 'author'; the fields are chunk_id, doc_id, path, title, "
                                        r"n_chars, date, tags"):
        chunk_mask(["author=me"], chunks, docs)
    with pytest.raises(BadInput, match="no document table"):
        chunk_mask(["date>=2025-01-01"], chunks, None)


DOCS = {
    "api/intro.md": ("2025-03-01", "[api, cli]", 2024),
    "api/search.md": ("2025-05-10", "[api]", 2025),
    "guides/setup.md": ("2024-06-01", "[guide]", 2023),
    "guides/old.md": ("2023-01-15", "[guide, cli]", 2022),
}


#: The dense backends every filter test runs on ([index] settings).
BACKENDS = {"hnswlib": {}, "exact": {"backend": "exact"},
            "faiss-hnsw-sq8": {"backend": "faiss", "index_type": "hnsw-sq8"},
            "faiss-ivf-pq": {"backend": "faiss", "index_type": "ivf-pq"}}


@pytest.fixture(params=list(BACKENDS))
def project(request, tmp_path, tiny_bi_encoder):
    if request.param.startswith("faiss"):
        request.getfixturevalue("faiss")  # fails under CI without faiss-cpu
    src = tmp_path / "src"
    for rel, (date, tags, year) in DOCS.items():
        f = src / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        paras = "\n\n".join(f"Paragraph {i} of {rel} on search index chunk number {i}." for i in range(8))
        f.write_text(f"---\ndate: {date}\ntags: {tags}\nyear: {year}\n---\n# {rel}\n\n{paras}\n", encoding="utf-8")
    p = Project.create(tmp_path / "p", model={"embedder": str(tiny_bi_encoder)},
                       chunk={"unit": "chars", "size": 120, "overlap": 0}, index=BACKENDS[request.param])
    p.build([src])
    return p


def _search(p, *args):
    res = CliRunner().invoke(app, ["search", "search index chunk", "-p", str(p.root), "--json", *args])
    return res


@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid"])
def test_filters_apply_before_retrieval_in_every_mode(project, mode):
    docs = project.status()["documents"]
    assert docs == 4
    n_per_doc = project.status()["chunks"] // 4
    assert n_per_doc >= 6
    res = _search(project, "--mode", mode, "-k", "10", "--filter", "date>=2025-01-01", "--filter", "tags in [cli]")
    assert res.exit_code == 0, res.stderr
    hits = json.loads(res.stdout)["results"]
    # only api/intro.md matches both; it has n_per_doc >= 6 chunks, all of them come back
    assert {h["doc_id"] for h in hits} == {"api/intro.md"} and len(hits) == min(10, n_per_doc)
    res = _search(project, "--mode", mode, "-k", "10", "--filter", "doc_id=guides/*", "--filter", "year<2023")
    hits = json.loads(res.stdout)["results"]
    assert {h["doc_id"] for h in hits} == {"guides/old.md"} and len(hits) == min(10, n_per_doc)
    res = _search(project, "--mode", mode, "-k", "10", "--filter", "path=*/api/*")
    hits = json.loads(res.stdout)["results"]
    assert {h["doc_id"] for h in hits} <= {"api/intro.md", "api/search.md"} and len(hits) == 10


def test_unknown_field_exits_2_listing_the_fields(project):
    res = _search(project, "--filter", "author=me")
    assert res.exit_code == 2
    assert "no field 'author'" in res.stderr and "date, tags, year" in res.stderr and "doc_id" in res.stderr
    res = CliRunner().invoke(app, ["ask", "what is the search index?", "-p", str(project.root),
                                   "--filter", "tags in [nope]", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["refused"]


def test_update_brings_changed_front_matter_into_the_index(project, tmp_path):
    f = tmp_path / "src" / "guides" / "old.md"
    f.write_text(f.read_text(encoding="utf-8").replace("year: 2022", "year: 2026"), encoding="utf-8")
    out = project.update()
    assert out["chunk"]["docs_changed"] == 1 and not out["index"]["unchanged"]
    hits = project.search("search index chunk", mode="sparse", k=50, filter=["year>=2026"]).hits
    assert {h.doc_id for h in hits} == {"guides/old.md"}
    assert project.search("search index chunk", mode="sparse", k=50, filter="year<2023").hits == []


def test_dense_exact_fallback_returns_min_k_allowed():
    from rag_cli.config import IndexConfig
    from rag_cli.index.dense import DenseIndex

    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3000, 8)).astype(np.float32)
    idx = DenseIndex.build(vecs, IndexConfig(hnsw_m=4, hnsw_ef_construction=16, hnsw_ef=10))
    mask = np.zeros(3000, dtype=bool)
    mask[::500] = True  # 6 allowed rows
    rows, sims = idx.search(vecs[:1], 10, mask=mask)[0]
    assert sorted(rows.tolist()) == list(range(0, 3000, 500))
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    np.testing.assert_allclose(sims, unit[rows] @ unit[0], rtol=1e-5)
    assert rows[0] == 0
