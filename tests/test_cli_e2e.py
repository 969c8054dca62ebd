"""End-to-end tests: the real `rag` CLI on real data.

Each project is built once per module (module-scoped fixtures) with the
default model (multilingual-e5-small, converted once per session by
tests/conftest.py) and reused by the tests:

- a SciFact subset (English, BEIR): ~120 documents = every relevant document
  of the first 25 test queries plus deterministic distractors;
- a CMRC 2018 subset (Chinese): the first 40 passages and their questions;
- the sample corpus of the README (sample_corpus/).

Quality bounds are set below values measured on these subsets (see the
constants), so they catch regressions, not noise.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rag_cli.cli import app

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO / "sample_corpus" / "docs"
SAMPLE_QUESTIONS = REPO / "sample_corpus" / "questions.jsonl"

N_SCIFACT_QUERIES = 25
N_SCIFACT_DOCS = 120
N_CMRC_PASSAGES = 40
N_CMRC_ASK = 24

# Bounds, each set with margin below what was measured on these subsets (int8 e5-small):
# SciFact subset nDCG@10 sparse 0.9333, dense 0.9175, hybrid 0.9600;
#                Recall@100 sparse 0.9600, dense 1.0, hybrid 1.0;
# CMRC subset (151 questions) top-1 passage sparse 0.9669, dense 0.9669;
#             gold answer inside the extractive answer 20 of 24 (0.8333).
SCIFACT_MIN_NDCG10 = {"sparse": 0.85, "dense": 0.83, "hybrid": 0.88}
SCIFACT_MIN_RECALL100 = {"sparse": 0.90, "dense": 0.95, "hybrid": 0.95}
CMRC_MIN_TOP1 = {"sparse": 0.90, "dense": 0.90}  # share of questions whose top-1 doc is their passage
CMRC_MIN_ANSWER_IN_EXTRACT = 0.60  # share of answered questions whose gold answer is in the extract

# --------------------------------------------------------------------------- running the CLI
_runner = CliRunner()


def rag(*args, code: int = 0) -> SimpleNamespace:
    """Run `rag ARGS` in-process; assert the exit code; return stdout/stderr."""
    res = _runner.invoke(app, [str(a) for a in args])
    if res.exit_code != code:
        raise AssertionError(
            f"rag {' '.join(map(str, args))}: exit {res.exit_code}, want {code}\n"
            f"stdout: {res.stdout[-3000:]}\nstderr: {res.stderr[-3000:]}\nexception: {res.exception!r}"
        )
    return SimpleNamespace(code=res.exit_code, stdout=res.stdout, stderr=res.stderr)


def rag_json(*args):
    return json.loads(rag(*args, "--json").stdout)


def rag_proc(*args, code: int = 0) -> subprocess.CompletedProcess:
    """Run `python -m rag_cli ARGS` in a subprocess (the real entry point)."""
    res = subprocess.run([sys.executable, "-m", "rag_cli", *map(str, args)], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=300)
    assert res.returncode == code, f"exit {res.returncode}, want {code}\nstdout: {res.stdout}\nstderr: {res.stderr}"
    return res


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: Path, rows) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def read_run(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def maxp(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Document-level run: each document's best chunk score (MaxP; the rank column is not used)."""
    best: dict[str, dict[str, float]] = {}
    for r in rows:
        per_q = best.setdefault(r["query_id"], {})
        per_q[r["doc_id"]] = max(per_q.get(r["doc_id"], -float("inf")), r["score"])
    return best


def top1_docs(rows: list[dict]) -> dict[str, str]:
    return {r["query_id"]: r["doc_id"] for r in rows if r["rank"] == 1}


# --------------------------------------------------------------------------- data subsets
def scifact_subset(src: Path, dest: Path) -> SimpleNamespace:
    """corpus.jsonl (~120 docs), queries.jsonl (25), qrels.tsv of a SciFact subset of `src`, in `dest`."""
    qrels: dict[str, dict[str, int]] = {}
    with open(src / "qrels" / "test.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            q, d, s = line.rstrip("\n").split("\t")
            if q not in qrels and len(qrels) == N_SCIFACT_QUERIES:
                continue
            qrels.setdefault(q, {})[d] = int(s)
    relevant = {d for docs in qrels.values() for d in docs}
    with gzip.open(src / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    # distractors: every 37th document of the corpus, in corpus order
    chosen = set(relevant)
    for doc in corpus[::37]:
        if len(chosen) >= N_SCIFACT_DOCS:
            break
        chosen.add(doc["_id"])
    docs = [d for d in corpus if d["_id"] in chosen]
    queries = [q for q in read_jsonl(src / "queries.jsonl") if q["_id"] in qrels]
    dest.mkdir(parents=True, exist_ok=True)
    write_jsonl(dest / "corpus.jsonl", docs)
    write_jsonl(dest / "queries.jsonl", queries)
    with open(dest / "qrels.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, ds in qrels.items():
            for d, s in ds.items():
                f.write(f"{q}\t{d}\t{s}\n")
    return SimpleNamespace(corpus=dest / "corpus.jsonl", queries=dest / "queries.jsonl", qrels=dest / "qrels.tsv",
                           qrels_dict=qrels, docs=docs, query_rows=queries)


def cmrc_subset(src: Path, dest: Path) -> SimpleNamespace:
    """The first N passages of CMRC 2018 trial (`src`) with all their questions and gold answers."""
    docs = read_jsonl(src / "corpus.jsonl")[:N_CMRC_PASSAGES]
    ids = {d["_id"] for d in docs}
    gold_doc: dict[str, str] = {}
    with open(src / "qrels" / "test.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            q, d, _ = line.rstrip("\n").split("\t")
            if d in ids:
                gold_doc[q] = d
    queries = [q for q in read_jsonl(src / "queries.jsonl") if q["_id"] in gold_doc]
    answers = {a["_id"]: a["answers"] for a in read_jsonl(src / "answers.jsonl") if a["_id"] in gold_doc}
    dest.mkdir(parents=True, exist_ok=True)
    write_jsonl(dest / "corpus.jsonl", docs)
    write_jsonl(dest / "queries.jsonl", queries)
    with open(dest / "qrels.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in queries:
            f.write(f"{q['_id']}\t{gold_doc[q['_id']]}\t1\n")
    return SimpleNamespace(corpus=dest / "corpus.jsonl", queries=dest / "queries.jsonl", qrels=dest / "qrels.tsv",
                           gold_doc=gold_doc, answers=answers, query_rows=queries, docs=docs)


# --------------------------------------------------------------------------- projects (built once per module)
@pytest.fixture(scope="module")
def scifact(tmp_path_factory, default_model, scifact_dir):
    root = tmp_path_factory.mktemp("scifact")
    data = scifact_subset(scifact_dir, root / "data")
    p = root / "proj"
    chunked = rag_json("chunk", data.corpus, "--format", "beir", "--size", 500, "--overlap", 50, "-p", p)
    embedded = rag_json("embed", "-p", p)
    rag("index", "-p", p)
    runs = {}
    for mode in ("sparse", "dense", "hybrid"):
        rag("search", "--queries", data.queries, "--mode", mode, "-k", 100, "--name", f"sf-{mode}", "-p", p)
        runs[mode] = p / "runs" / f"sf-{mode}.parquet"
    return SimpleNamespace(root=root, data=data, project=p, runs=runs, chunked=chunked, embedded=embedded)


@pytest.fixture(scope="module")
def cmrc(tmp_path_factory, default_model, cmrc_dir):
    root = tmp_path_factory.mktemp("cmrc")
    data = cmrc_subset(cmrc_dir, root / "data")
    p = root / "proj"
    rag("chunk", data.corpus, "--format", "beir", "-p", p)
    rag("embed", "-p", p)
    rag("index", "-p", p)
    runs = {}
    for mode in ("sparse", "dense"):
        rag("search", "--queries", data.queries, "--mode", mode, "-k", 10, "--name", f"cmrc-{mode}", "-p", p)
        runs[mode] = p / "runs" / f"cmrc-{mode}.parquet"
    # `rag ask` scores every evidence sentence with the bi-encoder: keep it to the first question of
    # the first N_CMRC_ASK passages, with 3 evidence chunks, so the module stays fast on 2 cores
    first: dict[str, dict] = {}
    for q in data.query_rows:
        first.setdefault(data.gold_doc[q["_id"]], q)
    ask_rows = list(first.values())[:N_CMRC_ASK]
    write_jsonl(data.corpus.parent / "ask.jsonl", ask_rows)
    rag("ask", "--queries", data.corpus.parent / "ask.jsonl", "-k", 3, "--name", "cmrc", "-p", p)
    return SimpleNamespace(root=root, data=data, project=p, runs=runs, answers=p / "answers" / "cmrc.parquet",
                           ask_rows=ask_rows)


@pytest.fixture(scope="module")
def sample(tmp_path_factory, default_model):
    root = tmp_path_factory.mktemp("sample")
    p = root / "proj"
    rag("chunk", SAMPLE_DOCS, "-p", p)
    rag("embed", "-p", p)
    rag("index", "-p", p)
    return SimpleNamespace(root=root, project=p)


# --------------------------------------------------------------------------- SciFact
def test_scifact_project_conforms_to_contract(scifact, check_contract):
    check_contract(scifact.project)
    assert scifact.chunked["n_docs"] == len(scifact.data.docs) >= N_SCIFACT_DOCS
    n_chunks = pq.read_metadata(scifact.project / "chunks.parquet").num_rows
    assert scifact.chunked["n_chunks"] == n_chunks == scifact.embedded["n_chunks"] == scifact.embedded["n_embedded"]
    assert scifact.embedded["n_reused"] == 0
    for mode, path in scifact.runs.items():
        rows = read_run(path)
        assert {r["stage"] for r in rows} == {mode}
        assert {r["query_id"] for r in rows} == set(scifact.data.qrels_dict)
        for qid in scifact.data.qrels_dict:
            ranks = [r["rank"] for r in rows if r["query_id"] == qid]
            n_docs = len({r["doc_id"] for r in rows if r["query_id"] == qid})
            assert ranks == list(range(1, len(ranks) + 1))
            if mode == "sparse":  # BM25 keeps only chunks that share a term with the query
                assert 0 < n_docs <= 100
            else:  # the chunks of 100 distinct documents: there are more documents than that
                assert n_docs == 100 and len(ranks) >= 100


@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid"])
def test_scifact_eval_matches_pytrec_eval(scifact, mode, pytrec_eval):

    report = rag_json("eval", "--run", scifact.runs[mode], "--qrels", scifact.data.qrels, "-p", scifact.project)
    m = report["metrics"]
    assert report["n_queries"] == N_SCIFACT_QUERIES
    assert (scifact.project / "eval" / f"sf-{mode}-qrels.json").exists()  # RUN-QRELS

    run = maxp(read_run(scifact.runs[mode]))
    qrels = scifact.data.qrels_dict
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    per_q = ev.evaluate(run)
    top10 = {q: dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]) for q, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    assert len(per_q) == N_SCIFACT_QUERIES
    want = {
        "ndcg@10": np.mean([v["ndcg_cut_10"] for v in per_q.values()]),
        "recall@100": np.mean([v["recall_100"] for v in per_q.values()]),
        "mrr@10": np.mean([v["recip_rank"] for v in rr.values()]),
    }
    for name, value in want.items():
        assert m[name] == pytest.approx(value, abs=1e-6), name
    print(f"\nscifact subset {mode}: " + ", ".join(f"{k} {v:.4f}" for k, v in want.items()))
    assert m["ndcg@10"] > SCIFACT_MIN_NDCG10[mode]
    assert m["recall@100"] >= SCIFACT_MIN_RECALL100[mode]


def test_scifact_trec_format(scifact):
    p = scifact.project
    rag("search", "--queries", scifact.data.queries, "--mode", "sparse", "-k", 100, "--name", "sf-trec",
        "--format", "trec", "-p", p)
    lines = (p / "runs" / "sf-trec.trec").read_text(encoding="utf-8").splitlines()
    parquet = read_run(scifact.runs["sparse"])
    assert len(lines) == len(parquet)
    for line, row in zip(lines, parquet):
        cols = line.split()
        assert len(cols) == 6
        assert cols[0] == row["query_id"] and cols[1] == "Q0" and cols[2] == row["chunk_id"]
        assert int(cols[3]) == row["rank"] and float(cols[4]) == pytest.approx(row["score"], rel=1e-6)
        assert cols[5] == "sparse"
    # the TREC run is also a valid input of `rag eval`, with the same numbers
    a = rag_json("eval", "--run", p / "runs" / "sf-trec.trec", "--qrels", scifact.data.qrels, "-p", p)["metrics"]
    b = rag_json("eval", "--run", scifact.runs["sparse"], "--qrels", scifact.data.qrels, "-p", p)["metrics"]
    assert a == pytest.approx(b, abs=1e-9)


def test_scifact_single_query_json_via_subprocess(scifact):
    query = scifact.data.query_rows[0]["text"]
    res = rag_proc("search", query, "--json", "-k", 7, "--mode", "hybrid", "-p", scifact.project)
    out = json.loads(res.stdout)  # stdout is exactly one JSON document
    assert out["query"] == query and out["mode"] == "hybrid"
    assert [r["rank"] for r in out["results"]] == list(range(1, 8))
    assert all(r["stage"] == "hybrid" and r["chunk_id"].startswith(r["doc_id"] + "#") for r in out["results"])
    scores = [r["score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("mode", ["dense", "hybrid", "sparse"])
def test_k_larger_than_corpus_returns_each_chunk_once(scifact, mode):
    n_chunks = pq.read_metadata(scifact.project / "chunks.parquet").num_rows
    out = rag_json("search", "the effect of gene expression in cells", "-k", 100000, "--mode", mode,
                   "-p", scifact.project)
    ids = [r["chunk_id"] for r in out["results"]]
    assert len(ids) == len(set(ids))
    assert [r["rank"] for r in out["results"]] == list(range(1, len(ids) + 1))
    if mode == "sparse":  # BM25 returns only chunks that share a term with the query
        assert 0 < len(ids) <= n_chunks
    else:
        assert len(ids) == n_chunks


def test_embed_is_incremental(scifact, tmp_path, check_contract):
    p = tmp_path / "proj"
    shutil.copytree(scifact.project, p)
    before = pq.read_table(p / "embeddings.parquet")
    again = rag_json("embed", "-p", p)
    assert again["n_embedded"] == 0 and again["n_reused"] == again["n_chunks"] == before.num_rows
    assert pq.read_table(p / "embeddings.parquet").equals(before)

    # re-chunk the same corpus: still nothing to embed
    rag("chunk", scifact.data.corpus, "--format", "beir", "--size", 500, "--overlap", 50, "-p", p)
    assert rag_json("embed", "-p", p)["n_embedded"] == 0

    # change one document's text: only its changed chunks are embedded again
    old_chunks = pq.read_table(p / "chunks.parquet").to_pylist()
    docs = [dict(d) for d in scifact.data.docs]
    target = docs[3]["_id"]
    docs[3]["text"] = docs[3]["text"] + " This sentence was appended by the incremental embedding test."
    corpus2 = write_jsonl(tmp_path / "corpus2.jsonl", docs)
    rag("chunk", corpus2, "--format", "beir", "--size", 500, "--overlap", 50, "-p", p)
    new_chunks = pq.read_table(p / "chunks.parquet").to_pylist()
    old_sha = {c["sha256"] for c in old_chunks}
    changed = [c for c in new_chunks if c["sha256"] not in old_sha]
    assert changed and {c["doc_id"] for c in changed} == {target}
    summary = rag_json("embed", "-p", p)
    assert summary["n_embedded"] == len(changed)
    assert summary["n_reused"] == len(new_chunks) - len(changed)
    # vectors of unchanged chunks are byte-identical
    old_vec = dict(zip(before.column("chunk_id").to_pylist(), before.column("vector").to_pylist()))
    after = pq.read_table(p / "embeddings.parquet")
    changed_ids = {c["chunk_id"] for c in changed}
    for cid, vec in zip(after.column("chunk_id").to_pylist(), after.column("vector").to_pylist()):
        if cid not in changed_ids:
            assert vec == old_vec[cid]
    check_contract(p)


# --------------------------------------------------------------------------- CMRC 2018
@pytest.mark.parametrize("mode", ["sparse", "dense"])
def test_cmrc_retrieval_finds_the_passage(cmrc, mode):
    rows = read_run(cmrc.runs[mode])
    top1 = top1_docs(rows)
    n = len(cmrc.data.query_rows)
    hit1 = sum(top1.get(q) == d for q, d in cmrc.data.gold_doc.items()) / n
    report = rag_json("eval", "--run", cmrc.runs[mode], "--qrels", cmrc.data.qrels, "-p", cmrc.project)
    print(f"\ncmrc subset {mode}: {n} questions, top-1 passage {hit1:.4f}, "
          f"hit@5 {report['metrics']['hit@5']:.4f}, mrr@10 {report['metrics']['mrr@10']:.4f}")
    assert report["metrics"]["hit@1"] == pytest.approx(hit1, abs=1e-9)
    assert hit1 >= CMRC_MIN_TOP1[mode]


def test_cmrc_answers(cmrc, check_contract):
    from rag_cli.loaders import normalize_text

    check_contract(cmrc.project)
    rows = pq.read_table(cmrc.answers).to_pylist()
    assert [r["query_id"] for r in rows] == [q["_id"] for q in cmrc.ask_rows]
    assert len(rows) == N_CMRC_ASK
    answered = [r for r in rows if not r["refused"]]
    found = 0
    for r in answered:
        assert r["citations"] and set(r["citations"]) <= set(r["contexts"])
        gold = [normalize_text(a) for a in cmrc.data.answers[r["query_id"]]]
        found += any(g in normalize_text(r["answer"]) for g in gold)
    share = found / len(answered)
    print(f"\ncmrc subset ask: {len(rows)} questions, {len(answered)} answered, "
          f"gold answer in the extract for {found} ({share:.4f})")
    assert len(answered) >= 0.9 * len(rows)
    assert share >= CMRC_MIN_ANSWER_IN_EXTRACT


def test_cmrc_ask_in_chinese(cmrc):
    q = cmrc.data.query_rows[0]
    out = rag_json("ask", q["text"], "-p", cmrc.project)
    assert out["refused"] is False
    assert "[1]" in out["answer"] or any(f"[{e['n']}]" in out["answer"] for e in out["evidence"])
    assert out["citations"] and set(out["citations"]) <= {e["chunk_id"] for e in out["evidence"]}
    assert cmrc.data.gold_doc[q["_id"]] in {c.split("#")[0] for c in out["citations"]}


# --------------------------------------------------------------------------- sample corpus
def test_sample_ask_q3_cites_hnsw_doc(sample):
    q3 = next(q for q in read_jsonl(SAMPLE_QUESTIONS) if q["query_id"] == "q3")
    out = rag_json("ask", q3["query"], "-p", sample.project)
    assert out["refused"] is False
    assert out["citations"]
    assert all(c.startswith("dense_retrieval_hnsw.txt#") for c in out["citations"]), out["citations"]
    numbers = {e["chunk_id"]: e["n"] for e in out["evidence"]}
    for c in out["citations"]:
        assert f"[{numbers[c]}]" in out["answer"]


def test_sample_unanswerable_is_refused(sample):
    q9 = next(q for q in read_jsonl(SAMPLE_QUESTIONS) if q["query_id"] == "q9")
    out = rag_json("ask", q9["query"], "-p", sample.project)
    assert out["refused"] is True and out["answer"] == "Not found in the sources." and out["citations"] == []
    # and the plain output says so too
    assert "Not found in the sources." in rag("ask", q9["query"], "-p", sample.project).stdout


def test_sample_unanswerable_chinese_is_refused(sample):
    out = rag_json("ask", "1850年巴黎的天气怎么样？", "-p", sample.project)
    assert out["refused"] is True and out["answer"] == "资料中未提及。" and out["citations"] == []


def test_sample_ask_queries_writes_answers(sample, check_contract):
    out = rag_json("ask", "--queries", SAMPLE_QUESTIONS, "-p", sample.project)
    path = sample.project / "answers" / "questions.parquet"
    assert Path(out["answers"]) == path and out["n"] == 9
    check_contract(sample.project)
    table = pq.read_table(path)
    for col in ("query_id", "question", "answer", "citations", "contexts", "refused", "generator", "latency_ms"):
        assert col in table.column_names
    rows = {r["query_id"]: r for r in table.to_pylist()}
    assert list(rows) == [f"q{i}" for i in range(1, 10)]
    assert rows["q9"]["refused"] and rows["q9"]["answer"] == "Not found in the sources."
    assert not rows["q3"]["refused"]
    assert out["refused"] == sum(r["refused"] for r in rows.values())
    for r in rows.values():
        assert r["generator"] == "extractive" and r["latency_ms"] > 0
        assert set(r["citations"]) <= set(r["contexts"])
        assert bool(r["citations"]) != r["refused"]


# --------------------------------------------------------------------------- rerank
def test_rerank_scores_equal_the_cross_encoder(sample, tmp_path, tiny_cross_encoder, check_contract):
    from rag_cli.models.cross_encoder import CrossEncoder
    from rag_cli.models.folder import ModelFolder

    p = tmp_path / "proj"
    shutil.copytree(sample.project, p)
    rag("search", "--queries", SAMPLE_QUESTIONS, "--mode", "hybrid", "-k", 30, "--name", "base", "-p", p)
    run = p / "runs" / "base.parquet"
    rag("rerank", "--run", run, "--model", tiny_cross_encoder, "--candidates", 20, "--top-n", 5,
        "--name", "reranked", "-p", p)
    out = read_run(p / "runs" / "reranked.parquet")
    check_contract(p)

    base = read_run(run)
    chunks = pq.read_table(p / "chunks.parquet")
    col = "embed_text" if "embed_text" in chunks.column_names else "text"
    text_of = dict(zip(chunks.column("chunk_id").to_pylist(), chunks.column(col).to_pylist()))
    ce = CrossEncoder(ModelFolder.load(tiny_cross_encoder))
    qids = list(dict.fromkeys(r["query_id"] for r in base))
    assert list(dict.fromkeys(r["query_id"] for r in out)) == qids
    for qid in qids:
        cands = sorted((r for r in base if r["query_id"] == qid), key=lambda r: r["rank"])[:20]
        got = [r for r in out if r["query_id"] == qid]
        assert len(got) == 5
        assert [r["rank"] for r in got] == [1, 2, 3, 4, 5]
        assert all(r["stage"] == "rerank" for r in got)
        scores = [r["score"] for r in got]
        assert scores == sorted(scores, reverse=True)
        direct = ce.score(cands[0]["query"], [text_of[c["chunk_id"]] for c in cands])
        by_chunk = {c["chunk_id"]: float(s) for c, s in zip(cands, direct)}
        for r in got:
            assert r["score"] == pytest.approx(by_chunk[r["chunk_id"]], abs=1e-5)
        # the top 5 are the 5 best of the 20 candidates
        assert sorted(by_chunk.values(), reverse=True)[:5] == pytest.approx(scores, abs=1e-5)


# --------------------------------------------------------------------------- model fingerprints
def test_search_with_another_model_is_refused(sample, tmp_path, tiny_bi_encoder):
    import tomllib

    import tomli_w

    from rag_cli.models.folder import ModelFolder

    p = tmp_path / "proj"
    shutil.copytree(sample.project, p)
    from rag_cli.store.index_folder import current_generation

    meta = json.loads((current_generation(p / "index") / "meta.json").read_text())
    cfg = tomllib.loads((p / "rag.toml").read_text())
    cfg["model"]["embedder"] = str(tiny_bi_encoder)
    (p / "rag.toml").write_text(tomli_w.dumps(cfg))
    res = rag("search", "x", "--mode", "dense", "-p", p, code=2)
    tiny_fp = ModelFolder.load(tiny_bi_encoder).fingerprint
    message = "".join(res.stderr.split())  # rich wraps long lines on stderr
    assert meta["model_fingerprint"] in message and tiny_fp in message, res.stderr
    assert res.stdout == ""
    # sparse search needs no embedder and still works
    assert rag_json("search", "hnsw", "--mode", "sparse", "-p", p)["results"]
