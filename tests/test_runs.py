"""The run format: Parquet and TREC round trips, validation."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rag_cli.errors import BadInput
from rag_cli.store.runs import RUN_COLUMNS, RunRow, dedupe, doc_id_of, read_run, run_table, trec_order, write_run

ROWS = [
    RunRow("q1", "what is bm25?", 1, "bm25.md#2", "bm25.md", 12.5, "sparse"),
    RunRow("q1", "what is bm25?", 2, "rrf.md#0", "rrf.md", 0.1 + 0.2, "sparse"),
    RunRow("q1", "what is bm25?", 3, "notes/a#b.md#10", "notes/a#b.md", -1e-7, "sparse"),
    RunRow("q2", "什么是分词？", 1, "中文分词.md#0", "中文分词.md", 0.8123456789, "dense"),
]


def test_run_table_columns_and_types():
    table = run_table(ROWS)
    assert tuple(table.column_names) == RUN_COLUMNS
    types = {f.name: f.type for f in table.schema}
    assert types["query_id"] == pa.string() and types["query"] == pa.string()
    assert types["rank"] == pa.int32()
    assert types["chunk_id"] == pa.string() and types["doc_id"] == pa.string()
    assert pa.types.is_floating(types["score"])
    assert types["stage"] == pa.string()
    assert table.num_rows == 4
    # dicts and plain tuples are rows too
    assert run_table([r._asdict() for r in ROWS]).equals(table)
    assert run_table([tuple(r) for r in ROWS]).equals(table)
    assert run_table([]).num_rows == 0


def test_run_table_rejects_bad_rank():
    with pytest.raises(ValueError):
        run_table([RunRow("q", "", 0, "c#0", "c", 1.0, "dense")])


def test_parquet_round_trip(tmp_path):
    path = write_run(tmp_path / "runs" / "r.parquet", ROWS)
    assert read_run(path) == ROWS
    assert list(tmp_path.joinpath("runs").iterdir()) == [path]  # no temporary left


def test_trec_round_trip(tmp_path):
    path = write_run(tmp_path / "r.trec", ROWS, fmt="trec")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "q1 Q0 bm25.md#2 1 12.5 sparse"
    back = read_run(path)
    # the query text is not part of the TREC format; everything else survives exactly
    assert back == [r._replace(query="") for r in ROWS]


def test_foreign_trec_run_is_a_document_run(tmp_path):
    path = tmp_path / "bm25.run"
    path.write_text("1 Q0 31715818 1 15.25 bm25\n1 Q0 4983 2 9 bm25\n", encoding="utf-8")
    rows = read_run(path)
    assert rows[0] == RunRow("1", "", 1, "31715818", "31715818", 15.25, "bm25")
    assert rows[1].doc_id == "4983" and rows[1].score == 9.0


def test_doc_id_of():
    assert doc_id_of("a/b.md#12") == "a/b.md"
    assert doc_id_of("notes#x.md") == "notes#x.md"
    assert doc_id_of("4983") == "4983"


@pytest.mark.parametrize(
    "content, needle",
    [
        ("q1 Q0 d1 1 2.0 tag\nq1 Q0 d2 2 1.0\n", ":2:"),
        ("q1 Q0 d1 first 2.0 tag\n", "rank (4th field)"),
        ("q1 Q0 d1 1 high tag\n", "score (5th field)"),
        ("q1 Q0 d1 1 nan tag\n", "NaN"),
        ("", "empty"),
    ],
)
def test_bad_trec_run(tmp_path, content, needle):
    path = tmp_path / "bad.run"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        read_run(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_trec_write_escapes_whitespace_ids(tmp_path):
    write_run(tmp_path / "r.trec", [RunRow("q", "", 1, "my notes.md#0", "my notes.md", 1.0, "dense")], fmt="trec")
    assert (tmp_path / "r.trec").read_text() == "q Q0 my%20notes.md#0 1 1.0 dense\n"
    with pytest.raises(BadInput, match="empty"):
        write_run(tmp_path / "e.trec", [RunRow("q", "", 1, " ", "d", 1.0, "dense")], fmt="trec")
    assert not (tmp_path / "e.trec").exists()


def test_parquet_missing_columns(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"query_id": ["q"], "rank": [1]}), path)
    with pytest.raises(BadInput, match="missing query, chunk_id, doc_id, score, stage"):
        read_run(path)


def test_float32_parquet_is_read(tmp_path):
    path = tmp_path / "f32.parquet"
    table = run_table(ROWS[:1]).cast(
        pa.schema([(f.name, pa.float32() if f.name == "score" else f.type) for f in run_table(ROWS[:1]).schema])
    )
    pq.write_table(table, path)
    assert read_run(path)[0].score == 12.5


def test_unknown_format(tmp_path):
    with pytest.raises(BadInput, match="parquet"):
        write_run(tmp_path / "r", ROWS, fmt="csv")


# trec_eval semantics: a TREC run whose ranks start at 0, are all 1, or disagree
# with the scores is read as it is (rank 0 used to be rejected: "rank must be
# >= 1"), and ordered by score desc, then docno desc; the rank column is output only.
def test_rank_zero_and_all_ones_are_read_and_never_sort(tmp_path):
    path = tmp_path / "ones.run"
    path.write_text("q Q0 a 0 1.0 t\nq Q0 b 1 3.0 t\nq Q0 c 1 3.0 t\nq Q0 d 1 2.0 t\n", encoding="utf-8")
    rows = read_run(path)
    assert [r.rank for r in rows] == [0, 1, 1, 1]
    assert [r.chunk_id for r in trec_order(rows)["q"]] == ["c", "b", "d", "a"]


def test_parquet_rank_zero_is_read(tmp_path):
    path = tmp_path / "r0.parquet"
    table = run_table(ROWS[:1]).set_column(2, "rank", pa.array([0], pa.int32()))
    pq.write_table(table, path)
    assert read_run(path)[0].rank == 0


def test_dedupe_keeps_best_score_and_reports():
    rows = [
        RunRow("q", "", 1, "a#0", "a", 1.0, "s"),
        RunRow("q", "", 2, "b#0", "b", 0.5, "s"),
        RunRow("q", "", 3, "a#0", "a", 2.0, "s"),
        RunRow("q", "", 4, "a#0", "a", 0.1, "s"),
        RunRow("r", "", 1, "a#0", "a", 0.1, "s"),
    ]
    out, dups = dedupe(rows)
    assert out == [rows[2], rows[1], rows[4]]
    assert dups.n == 2 and dups.examples == [["q", "a#0"]]
