"""`rag eval` refuses inputs that would score nothing silently (exit 2, nothing written) and warns on
suspicious ones: qrels of another query set, a folder given for a file, answers of another project,
empty --ks items, JSON arrays in a .jsonl query file, --gold without --answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_cli.cli import app
from rag_cli.errors import BadInput
from rag_cli.evaluate.datasets import queries_with_relevant, read_qrels, read_queries
from rag_cli.evaluate.report import parse_cutoffs
from rag_cli.store.answers import read_answers, write_answers
from rag_cli.store.chunks import read_chunks
from rag_cli.store.runs import read_run
from test_tuning import SAMPLE_QRELS, SAMPLE_QUESTIONS, project  # noqa: F401 (the module's built sample project)



def invoke(*args: str):
    return CliRunner().invoke(app, ["eval", *map(str, args)])


@pytest.fixture()
def other_qrels(tmp_path) -> Path:
    """Qrels of another query set: none of the sample questions is judged."""
    path = tmp_path / "other.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nzz1\tdoc-a\t1\nzz2\tdoc-b\t2\nq1\tdoc-c\t0\n")
    return path


def test_queries_with_relevant_keeps_the_judged_in_order():
    queries = [("a", "x"), ("b", "y"), ("c", "z")]
    assert queries_with_relevant(queries, {"c": {"d": 2}, "a": {"d": 1}, "b": {"d": 0}}, "Q", "R") == \
        [("a", "x"), ("c", "z")]
    with pytest.raises(BadInput, match=r"no query of --queries q.jsonl has a relevant document .* in --qrels r.tsv"):
        queries_with_relevant(queries, {"b": {"d": 0}, "zz": {"d": 1}}, "--queries q.jsonl", "--qrels r.tsv")


def test_tune_fusion_with_qrels_of_another_query_set_refuses_and_writes_nothing(project, other_qrels, tmp_path):
    before = project.config_path.read_bytes()
    out = tmp_path / "tune.json"
    res = invoke("tune", "fusion", "--queries", SAMPLE_QUESTIONS, "--qrels", other_qrels, "-o", out,
                 "-p", project.root)
    assert res.exit_code == 2, res.output
    assert f"no query of --queries {SAMPLE_QUESTIONS} has a relevant document" in " ".join(res.stderr.split())
    assert project.config_path.read_bytes() == before and not out.exists()
    test = invoke("tune", "fusion", "--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS,
                  "--test-queries", SAMPLE_QUESTIONS, "--test-qrels", other_qrels, "-o", out, "-p", project.root)
    assert test.exit_code == 2, test.output
    assert f"--test-qrels {other_qrels}" in " ".join(test.stderr.split())
    assert project.config_path.read_bytes() == before and not out.exists()


def test_perturb_and_funnel_with_qrels_of_another_query_set_refuse(project, other_qrels, tmp_path):
    for mode in (["perturb", "--perturb", "upper"], ["funnel"]):
        out = tmp_path / "r.json"
        res = invoke(*mode, "--queries", SAMPLE_QUESTIONS, "--qrels", other_qrels, "-o", out, "-p", project.root)
        assert res.exit_code == 2, (mode, res.output)
        assert "has a relevant document" in res.stderr and not out.exists()


def test_ann_recall_over_no_query_is_not_zero(project):
    from rag_cli.evaluate.funnel import funnel

    s = project.engines.searcher(project.config, with_embedder=True)
    report = funnel(s, [("q1", "bm25")], {"zz": {"d": 1}}, k=3, candidates=5, rrf_k=60, ann_ks=(10,))
    assert report["n_queries"] == 0 and report["ann"] == {"ann_recall@10": None}


def test_compare_warns_for_each_run_of_another_query_set(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1\td1\t1\nq2\td2\t1\n")
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 2.0 a\nq2 Q0 d2 1 2.0 a\n")
    # b shares q1 (runs that share no query are refused: test_compare.py)
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 2.0 b\nx1 Q0 d1 1 2.0 b\nx2 Q0 d2 1 2.0 b\n")
    res = invoke("compare", "--qrels", qrels, tmp_path / "a.trec", tmp_path / "b.trec", "--permutations", "10",
                 "--ks", "1", "-o", tmp_path / "c.json")
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "b.trec: 2 run queries are not in the qrels and ignored: x1, x2" in err
    assert "b.trec: 1 of 2 qrels queries are not in the run and score 0" in err
    assert "a.trec:" not in err


def test_folders_are_refused_by_name(tmp_path, project):
    folder = tmp_path / "d"
    folder.mkdir()
    for read in (read_queries, read_qrels):
        with pytest.raises(BadInput, match=r"d: is a folder, not a file"):
            read(folder)
    with pytest.raises(BadInput, match="is a folder, not a file; give one answers/NAME.parquet file"):
        read_answers(folder)
    with pytest.raises(BadInput, match="is a folder, not a file; give one run file"):
        read_run(folder)
    with pytest.raises(BadInput, match="is a folder, not a file"):
        read_chunks(folder)
    res = invoke("make-unanswerable", "1", "--corpus", folder, "--queries", SAMPLE_QUESTIONS, "--qrels",
                 SAMPLE_QRELS, "-o", tmp_path / "out")
    assert res.exit_code == 2 and f"--corpus {folder}: is a folder, not a file" in " ".join(res.stderr.split())
    # a folder of answers files: pyarrow would read them all as one table
    answers = tmp_path / "answers"
    answers.mkdir()
    row = {"query_id": "q1", "question": "q", "answer": "a", "citations": [], "contexts": [], "refused": False}
    write_answers(answers / "one.parquet", [row])
    write_answers(answers / "two.parquet", [row])
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"_id": "q1", "answers": ["a"]}\n')
    res = invoke("answers", "--answers", answers, "--gold", gold, "-o", tmp_path / "a.json", "-p", project.root)
    assert res.exit_code == 2 and "is a folder" in res.stderr and not (tmp_path / "a.json").exists()


def test_answers_of_another_project(project, tmp_path):
    chunk_ids = read_chunks(project.chunks_path, columns=["chunk_id"], required=["chunk_id"]).column("chunk_id").to_pylist()
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"_id": "q1", "answers": ["a"]}\n{"_id": "q2", "answers": ["b"]}\n')
    base = {"question": "q", "answer": "a [1]", "refused": False}
    elsewhere = tmp_path / "elsewhere.parquet"
    write_answers(elsewhere, [{**base, "query_id": "q1", "citations": ["zz#0"], "contexts": ["zz#0", "zz#1"]}])
    out = tmp_path / "a.json"
    res = invoke("answers", "--answers", elsewhere, "--gold", gold, "-o", out, "-p", project.root)
    assert res.exit_code == 2, res.output
    err = " ".join(res.stderr.split())
    assert f"the answers in {elsewhere} cite chunks that are not in project {project.root}" in err
    assert "use -p" in err and not out.exists()
    some = tmp_path / "some.parquet"
    write_answers(some, [{**base, "query_id": "q1", "citations": [chunk_ids[0]], "contexts": [chunk_ids[0], "zz#1"]},
                         {**base, "query_id": "q2", "citations": ["zz#2"], "contexts": ["zz#2"]}])
    res = invoke("answers", "--answers", some, "--gold", gold, "-o", out, "-p", project.root)
    assert res.exit_code == 0, res.output
    assert "2 chunk id(s) cited or given as evidence" in " ".join(res.stderr.split())
    assert json.loads(out.read_text())["n_chunks_not_in_project"] == 2


def test_ks_with_an_empty_item():
    assert parse_cutoffs("10, 1,5,5") == [1, 5, 10]
    for bad in ("1,,5", "1,5,", ""):
        with pytest.raises(BadInput, match=r"--ks .*empty item.*e\.g\. 1,5,10"):
            parse_cutoffs(bad)
    res = invoke("--qrels", SAMPLE_QRELS, "--run", "x.trec", "--ks", "1,,5")
    assert res.exit_code == 2 and "--ks '1,,5'" in res.stderr


def test_json_array_line_in_a_jsonl_query_file(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"_id": "1", "text": "a"}\n["2", "b"]\n')
    with pytest.raises(BadInput, match=r"q.jsonl:2: a JSON list, not an object; each line of a .jsonl query file "
                                       r"must be a JSON object with '_id' and 'text'"):
        read_queries(path)
    path.write_text('["2", "b"]\n')
    with pytest.raises(BadInput, match=r"q.jsonl:1: a JSON list, not an object"):
        read_queries(path)


def test_gold_without_answers_names_the_modes():
    res = invoke("--qrels", SAMPLE_QRELS, "--run", "r.trec", "--gold", "g.jsonl")
    assert res.exit_code == 2
    err = " ".join(res.stderr.split())
    assert "No such option: --gold (an option of" in err and "eval answers`)" in err


def test_a_run_shallower_than_k_is_said(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1\td1\t1\nq2\td2\t1\n")
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 2.0 a\nq1 Q0 d3 2 1.0 a\nq2 Q0 d2 1 2.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 2.0 b\nq2 Q0 d2 1 2.0 b\n")
    res = invoke("--qrels", qrels, "--run", tmp_path / "a.trec", "--ks", "1,2,10", "-o", tmp_path / "a.json")
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "the run holds at most 2 documents per query, fewer than k = 10: metrics at a larger k count only " \
           "those (P@10 <= 0.2)" in err
    assert json.loads((tmp_path / "a.json").read_text())["run_depth"] == 2
    res = invoke("--qrels", qrels, "--run", tmp_path / "a.trec", "--ks", "1,2", "-o", tmp_path / "a2.json")
    assert "at most" not in res.stderr
    res = invoke("compare", "--qrels", qrels, tmp_path / "a.trec", tmp_path / "b.trec", "--ks", "1,2",
                 "--permutations", "10", "-o", tmp_path / "c.json")
    err = " ".join(res.stderr.split())
    assert res.exit_code == 0 and "b.trec: the run holds at most 1 document per query, fewer than k = 2" in err
    assert "a.trec:" not in err


@pytest.fixture()
def foreign_doc_qrels(tmp_path) -> Path:
    """The sample qrels with every document id renamed: the right queries, another collection's documents."""
    lines = SAMPLE_QRELS.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "foreign.tsv"
    path.write_text("\n".join([lines[0], *("\t".join([q, "nope-" + d, r]) for q, d, r in
                                           (line.split("\t") for line in lines[1:] if line.strip()))]) + "\n")
    return path


def test_qrels_of_another_collection_refuse_before_any_search(project, foreign_doc_qrels, tmp_path):
    before = project.config_path.read_bytes()
    runs = sorted(p.name for p in (project.root / "runs").glob("*")) if (project.root / "runs").exists() else []
    for mode in (["tune", "fusion"], ["perturb", "--perturb", "upper"], ["funnel"], []):
        out = tmp_path / "r.json"
        res = invoke(*mode, "--queries", SAMPLE_QUESTIONS, "--qrels", foreign_doc_qrels, "-o", out, "-p", project.root)
        assert res.exit_code == 2, (mode, res.output)
        err = " ".join(res.stderr.split())
        assert f"relevant documents of --qrels {foreign_doc_qrels} (nope-" in err, err
        assert f"is in project {project.root}" in err and not out.exists()
    assert project.config_path.read_bytes() == before
    after = sorted(p.name for p in (project.root / "runs").glob("*")) if (project.root / "runs").exists() else []
    assert after == runs, "eval --queries searched and wrote a run before refusing"


def test_outputs_inside_the_project_go_under_eval_only(project, tmp_path):
    chunks = project.root / "chunks.parquet"
    before = chunks.read_bytes()
    for flag, path in (("-o", chunks), ("-o", project.root / "runs" / "x.json"), ("--md", project.root / "s.md"),
                       ("--plots", project.root / "plots")):
        res = invoke("--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS, flag, path, "-p", project.root)
        assert res.exit_code == 2, (flag, res.output)
        assert f"{flag} {path} is inside the project folder {project.root}" in " ".join(res.stderr.split())
    assert chunks.read_bytes() == before and not (project.root / "plots").exists()
    ok = invoke("--queries", SAMPLE_QUESTIONS, "--qrels", SAMPLE_QRELS, "-o", project.root / "eval" / "mine.json",
                "-p", project.root)
    assert ok.exit_code == 0, ok.output


def test_plots_folder_holding_an_input_is_refused(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1\td1\t1\n")
    plots = tmp_path / "plots"
    plots.mkdir()
    run = plots / "eval-metrics.png"  # the very name the metric plot would get
    run.write_text("q1 Q0 d1 1 2.0 a\n")
    res = invoke("--qrels", qrels, "--run", run, "--plots", plots, "-o", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    assert f"--plots {plots} holds --run {run}" in " ".join(res.stderr.split())
    assert run.read_text() == "q1 Q0 d1 1 2.0 a\n"


def test_corpus_not_utf8_is_bad_input_naming_the_flag(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"_id": "d1", "text": "caf\xe9"}\n')
    qrels = tmp_path / "q.tsv"
    qrels.write_text("q1\td1\t1\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "x"}\n')
    res = invoke("make-unanswerable", "1", "--corpus", corpus, "--queries", queries, "--qrels", qrels,
                 "-o", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert f"--corpus {corpus}: not UTF-8 text" in " ".join(res.stderr.split())
    assert not (tmp_path / "out").exists()


def test_gold_or_judge_alone_ask_for_answers():
    for flags in (["--gold", "g.jsonl"], ["--judge"]):
        res = invoke("answers", *flags)
        assert res.exit_code == 2
        assert f"{flags[0]} scores answers: give --answers FILE too" in " ".join(res.stderr.split())


def test_answers_whose_chunk_texts_changed_are_said(project, tmp_path):
    table = read_chunks(project.chunks_path, columns=["chunk_id", "text"], required=["chunk_id", "text"])
    cid, text = table.column("chunk_id")[0].as_py(), table.column("text")[0].as_py()
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"_id": "q1", "answers": ["a"]}\n')
    row = {"question": "q", "answer": "a [1]", "refused": False, "query_id": "q1", "citations": [cid],
           "contexts": [cid]}
    out = tmp_path / "a.json"
    for evidence, changed in (({cid: text}, False), ({cid: text + " (another project's text)"}, True),
                              (None, None)):
        answers = tmp_path / "a.parquet"
        write_answers(answers, [row], evidence)
        res = invoke("answers", "--answers", answers, "--gold", gold, "-o", out, "-p", project.root)
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text())["evidence_changed"] is changed
        said = "had other texts when they were answered" in " ".join(res.stderr.split())
        assert said is bool(changed), res.stderr


def test_a_row_subset_of_an_answers_file_keeps_its_evidence_unchanged(project, tmp_path):
    """A file cut to some of its rows (its answerable ones, say) is compared on the ids those rows use (#31 item 25)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = read_chunks(project.chunks_path, columns=["chunk_id", "text"], required=["chunk_id", "text"])
    (c1, c2), (t1, t2) = table.column("chunk_id").to_pylist()[:2], table.column("text").to_pylist()[:2]
    rows = [{"question": "q", "answer": "a [1]", "refused": False, "query_id": q, "citations": [c], "contexts": [c]}
            for q, c in (("q1", c1), ("q2", c2))]
    answers, subset = tmp_path / "a.parquet", tmp_path / "answerable.parquet"
    write_answers(answers, rows, {c1: t1, c2: t2})
    full = pq.read_table(answers)
    pq.write_table(full.filter(pc.equal(full.column("query_id"), "q1")), subset)
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"_id": "q1", "answers": ["a"]}\n')
    out = tmp_path / "r.json"
    for path, changed in ((subset, False), (answers, False)):
        res = invoke("answers", "--answers", path, "--gold", gold, "-o", out, "-p", project.root)
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text())["evidence_changed"] is changed, path
        assert "had other texts" not in " ".join(res.stderr.split())
    write_answers(answers, rows, {c1: t1 + " (changed)", c2: t2})
    full = pq.read_table(answers)
    pq.write_table(full.filter(pc.equal(full.column("query_id"), "q2")), subset)
    res = invoke("answers", "--answers", subset, "--gold", gold, "-o", out, "-p", project.root)
    assert json.loads(out.read_text())["evidence_changed"] is False  # q2's chunk did not change
    pq.write_table(full.filter(pc.equal(full.column("query_id"), "q1")), subset)
    res = invoke("answers", "--answers", subset, "--gold", gold, "-o", out, "-p", project.root)
    assert json.loads(out.read_text())["evidence_changed"] is True, res.output
    write_answers(answers, rows, {c1: t1, c2: t2 + " (changed)"})  # only q2's chunk, and q2 has no gold
    res = invoke("answers", "--answers", answers, "--gold", gold, "-o", out, "-p", project.root)
    assert json.loads(out.read_text())["evidence_changed"] is False, res.output


def test_rag_ask_queries_keeps_the_evidence_fingerprint(project, tmp_path):
    import pyarrow.parquet as pq

    from rag_cli.store.answers import evidence_fingerprint, read_evidence_fingerprint

    res = CliRunner().invoke(app, ["ask", "--queries", str(SAMPLE_QUESTIONS), "--name", "fp", "-p", str(project.root),
                                   "-q"])
    assert res.exit_code == 0, res.output
    table = pq.read_table(project.root / "answers" / "fp.parquet")
    ids = {c for cs in table.column("contexts").to_pylist() for c in cs}
    chunks = read_chunks(project.chunks_path, columns=["chunk_id", "text"], required=["chunk_id", "text"])
    texts = {c: t for c, t in zip(chunks.column("chunk_id").to_pylist(), chunks.column("text").to_pylist())
             if c in ids}
    assert ids and read_evidence_fingerprint(table) == evidence_fingerprint(texts)


def test_qrels_of_chunk_ids_are_still_scored(project, tmp_path):
    """Qrels may judge chunk ids (a chunk-level evaluation); the collection check accepts them."""
    chunks = read_chunks(project.chunks_path, columns=["chunk_id", "doc_id"], required=["chunk_id", "doc_id"])
    first = dict(zip(chunks.column("doc_id").to_pylist()[::-1], chunks.column("chunk_id").to_pylist()[::-1]))
    lines = SAMPLE_QRELS.read_text(encoding="utf-8").splitlines()
    qrels = tmp_path / "chunks.tsv"
    qrels.write_text("\n".join([lines[0], *("\t".join([q, first[d], r]) for q, d, r in
                                           (line.split("\t") for line in lines[1:] if line.strip()))]) + "\n")
    res = invoke("--queries", SAMPLE_QUESTIONS, "--qrels", qrels, "--ks", "1,3", "-o", tmp_path / "r.json",
                 "-p", project.root, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["level"] == "chunk"
