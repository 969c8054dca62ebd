"""What every experiment of the lab does first, written once: the cutoffs
(`--ks`), the name and input/output checks and the report's default path
(`prepare`), and the check that qrels judge this project's documents
(`read_judged`). Every check runs before any model is loaded or any file
written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from rag_cli.errors import BadInput, one_of
from rag_cli.evaluate.report import DEFAULT_KS, parse_cutoffs
from rag_cli.store.folder import check_name, file_stem

__all__ = ["DEFAULT_KS", "cutoffs", "one_of", "prepare", "judged_here", "read_judged", "file_stem"]

def cutoffs(ks: str | Iterable[int] | None = None) -> list[int]:
    """The cutoffs of `--ks`, sorted, each once: None gives `DEFAULT_KS`
    (1, 5, 10, 20, 100); a string "1,5,10" or a sequence of ints is parsed
    by `rag_cli.evaluate.report.parse_cutoffs` (so 5.0 or True is no
    cutoff). Raises BadInput naming
    --ks for an empty list or item, a non-integer or a cutoff below 1."""
    if ks is None:
        return list(DEFAULT_KS)
    if isinstance(ks, str):
        return parse_cutoffs(ks)
    if isinstance(ks, (bytes, Mapping)) or not isinstance(ks, Iterable):
        raise BadInput(f"--ks {ks!r}: give comma-separated integers >= 1, e.g. 1,5,10")
    return parse_cutoffs(",".join(str(k) for k in ks))


def prepare(p, inputs: Mapping[str, Any], *, name: str | None, default: str | Callable[[], str] | None,
            output: str | os.PathLike | None, md: str | os.PathLike | None = None,
            plots: str | os.PathLike | None = None, project: bool = True,
            needs: Sequence[tuple[Path, str]] = ()) -> Path | None:
    """The preamble of an experiment on project `p`; returns the report's path.

    In order: `name` checked (`check_name`: a file name without a folder);
    when `project`, the project folder must exist and hold each (path,
    stage) of `needs`; the path: `output` when given, else
    eval/NAME.json of the project (NAME: `name`, else `default`, a string
    or a function called only now, after the project checks), or None when
    `default` is None or the project folder does not exist; then every
    file is checked (`rag_cli.evaluate.outputs.check_eval_files`): the
    `inputs` ({flag: path, list of paths or None}), the report (named -o
    when given, else "the report"), `md` and `plots`; outputs inside the
    project folder must be under its eval/.

    Raises BadInput naming the flag of the first check that fails.
    """
    from rag_cli.evaluate.outputs import check_eval_files

    check_name(name)
    if project:
        p.folder.require_exists()
        for path, stage in needs:
            p.folder.require(path, stage)
    if output is not None:
        path = Path(output)
    elif default is None or not p.root.is_dir():
        path = None
    else:
        path = p.folder.eval_path(name or (default() if callable(default) else default))
    outputs = {"-o" if output is not None else "the report": output if output is not None else path, "--md": md}
    check_eval_files(inputs, outputs, plots=plots, project=p.root if p.root.is_dir() else None)
    return path


def judged_here(p, queries: list, qrels: dict, queries_flag: str, qrels_flag: str) -> list:
    """The queries with a relevant document in `qrels`
    (`queries_with_relevant`), after checking that some of their relevant
    documents (or chunks: qrels may judge chunk ids) are in the chunks.parquet
    of project `p` (`relevant_in_corpus`; skipped when it has none).
    Raises BadInput otherwise: the scores would all be 0."""
    from rag_cli.evaluate.datasets import queries_with_relevant, relevant_in_corpus
    from rag_cli.store.chunks import read_chunks

    kept = queries_with_relevant(queries, qrels, queries_flag, qrels_flag)
    if p.chunks_path.exists():
        table = read_chunks(p.chunks_path, columns=["doc_id", "chunk_id"], required=["doc_id", "chunk_id"])
        relevant_in_corpus({q: qrels[q] for q, _ in kept},
                           table.column("doc_id").to_pylist() + table.column("chunk_id").to_pylist(),
                           qrels_flag, f"project {p.root}")
    return kept


def read_judged(p, queries: str | os.PathLike, qrels: str | os.PathLike, queries_flag: str = "--queries",
                qrels_flag: str = "--qrels") -> tuple[list[tuple[str, str]], dict[str, dict[str, int]]]:
    """([(query id, text)] of the file `queries`, {query id: {doc id: grade}}
    of `qrels`), after `judged_here` (the flags name the files in errors).
    Raises BadInput for unreadable files or qrels that judge nothing here."""
    from rag_cli.evaluate.datasets import read_qrels, read_queries

    asked, gold = read_queries(queries), read_qrels(qrels)
    judged_here(p, asked, gold, f"{queries_flag} {queries}", f"{qrels_flag} {qrels}")
    return asked, gold
