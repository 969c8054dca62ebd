"""Make questions unanswerable (`rag eval make-unanswerable N`): the
variant of a BEIR corpus with the gold documents of N questions removed,
for measuring refusals (see `rag_cli.evaluate.unanswerable`). Needs no
project."""

from __future__ import annotations

import os
from pathlib import Path

from rag_cli.errors import BadInput
from rag_cli.lab.report import Report, count


def run(n: int, *, corpus: str | os.PathLike, queries: str | os.PathLike, qrels: str | os.PathLike,
        output: str | os.PathLike, seed: int = 0) -> "UnanswerableReport":
    """Write into the folder `output` the variant of `corpus` (BEIR JSONL,
    .gz too) without the gold documents of at least `n` questions of
    `queries` judged in `qrels` (sampled with `seed`): corpus.jsonl,
    queries.jsonl of those questions, removed.json (the report; `path`).
    Raises BadInput when `output` holds an input or other files, for
    unreadable inputs, or for `n` above what can be removed with a
    document kept; nothing is written then."""
    from rag_cli.evaluate.outputs import check_eval_files
    from rag_cli.evaluate.unanswerable import write_unanswerable

    check_eval_files({"--corpus": corpus, "--queries": queries, "--qrels": qrels}, {}, folder=("-o", output))
    data = write_unanswerable(corpus, queries, qrels, n, output, seed=seed)
    return UnanswerableReport(data, Path(output) / "removed.json")


class UnanswerableReport(Report):
    """removed.json: the questions made unanswerable and the documents
    removed; `path` is removed.json inside the output folder. No table, no
    Markdown or plots: `render` says in one note what was written."""

    kind = "unanswerable"

    def written_line(self) -> str:
        r = self.data
        return (f"{count(r['n_questions'], 'question')} made unanswerable: "
                f"{count(len(r['removed_docs']), 'document')} removed, {r['n_docs_kept']} kept -> {self.path.parent}")

    def markdown(self) -> str:
        raise BadInput("a made-unanswerable corpus has no Markdown summary (--md)")

    def write_summaries(self, md=None, plots=None, name=None) -> list[Path]:
        if md is not None or plots is not None:
            raise BadInput("a made-unanswerable corpus has no Markdown summary or plots (--md, --plots)")
        return []
