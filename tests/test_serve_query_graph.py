"""`rag serve --query-graph passage` (serve.query_graph): the server encodes queries with the graph the
chunks were embedded with instead of the model's query graph; the index, its fingerprint check and the
passage vectors are unchanged. Tested on WarmEngines (what the server holds), without a server process."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rag_cli import Project
from rag_cli.errors import BadInput
from rag_cli.serve.warm import WarmEngines

DOCS = Path(__file__).resolve().parents[1] / "sample_corpus" / "docs"
QUERY = "How does reciprocal rank fusion combine rankings?"


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_bi_encoder) -> Project:
    """sample_corpus/docs embedded with the tiny bi-encoder whose folder also has a query graph: another
    tiny graph of the same size (seed 1), so that query vectors tell which graph made them."""
    from tiny_models import make_bi_encoder

    root = tmp_path_factory.mktemp("query-graph")
    model = root / "model"
    shutil.copytree(tiny_bi_encoder, model)
    other = make_bi_encoder(root / "other", seed=1)
    shutil.copy(other / "model.onnx", model / "model_query.onnx")
    p = Project.create(root / "p", model={"embedder": str(model)})
    p.chunk([DOCS])
    p.embed()
    p.index()
    return p


def _served(project: Project, query_graph: str):
    engines = WarmEngines(project.folder, query_graph=query_graph)
    return engines, engines.load()


def test_the_default_serves_queries_from_the_query_graph(project):
    engines, s = _served(project, "query")
    enc = s.embedder
    assert enc.folder.query_onnx_path is not None and enc.query_encoder is not enc
    via_query_graph = enc.encode_queries([QUERY])
    on_passage_graph = enc.encode([QUERY], enc.folder.query_prefix)
    assert not np.allclose(via_query_graph, on_passage_graph, atol=1e-3)  # two graphs, two vectors
    assert engines.query_graph_used() == "query"  # what /healthz reports


def test_passage_runs_queries_on_the_passage_graph_and_keeps_the_index(project):
    engines, s = _served(project, "passage")
    enc = s.embedder
    assert enc.query_encoder is enc and engines.query_graph_used() == "passage"
    np.testing.assert_array_equal(enc.encode_queries([QUERY]), enc.encode([QUERY], enc.folder.query_prefix))
    # the fingerprint is still the folder's (query graph included), so the index opened without complaint,
    # and the dense hits are the passage graph's query vector's exact neighbours
    assert enc.folder.fingerprint == s.meta["model_fingerprint"] != enc.folder.passage_fingerprint
    hits = s.search(QUERY, mode="dense", k=3)
    assert len(hits) == 3
    vectors = s.dense.vectors(np.array([h.row for h in hits]))
    q = enc.encode([QUERY], enc.folder.query_prefix)[0]
    np.testing.assert_allclose([h.score for h in hits], vectors @ q, atol=1e-5)
    # the models are kept across generations: the same embedder object, still on the passage graph
    assert engines.embedder(project.folder.config) is enc


def test_a_bad_query_graph_setting_is_refused_naming_the_flag(project):
    with pytest.raises(BadInput, match=r"--query-graph"):
        project.folder.with_options("serve", {"query_graph": "int8"})


def test_healthz_names_the_graph_used_not_the_setting(tmp_path, make_sample_project):
    """A model without a query graph encodes queries on its one graph whatever serve.query_graph says."""
    p = make_sample_project(tmp_path / "plain")
    engines = WarmEngines(p.folder, query_graph="query")
    assert engines.query_graph_used() is None  # nothing served yet
    engines.load()
    assert engines.served.embedder.folder.query_onnx_path is None and engines.query_graph_used() == "passage"


def test_a_bad_query_graph_in_rag_toml_is_refused_naming_the_file(project, tmp_path):
    from rag_cli.store.folder import ProjectFolder

    text = project.folder.config_path.read_text(encoding="utf-8")  # only rag.toml is read
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "rag.toml").write_text(text.replace('query_graph = "query"', 'query_graph = "x"'))
    bad = tmp_path / "bad"
    with pytest.raises(BadInput, match=r"rag\.toml: \[serve\] query_graph = 'x': must be one of query, passage"):
        ProjectFolder(bad).config
