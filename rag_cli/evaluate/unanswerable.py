"""A made-unanswerable variant of a corpus, for measuring refusals: the
gold documents of a sample of questions removed.

Sampling (`sample_unanswerable`), by document: the documents relevant
(grade > 0) to a question of the query file are shuffled (`random.Random(seed)`
over their sorted ids) and removed one at a time; a question becomes
unanswerable once every document relevant to it is removed, and removal
stops as soon as at least `n` questions are. Every question of a removed
passage is thus made unanswerable (CMRC 2018 asks several questions of one
passage), and a claim citing two abstracts only when both are gone.

`write_unanswerable` writes into OUTDIR:

* corpus.jsonl: the corpus (BEIR JSONL, `_id` per line, `.gz` read too)
  without the removed documents, every other line as it was;
* queries.jsonl: the made-unanswerable questions, `{"_id", "text"}` per
  line, in sampling order;
* removed.json: {corpus, queries, qrels, seed, n_requested, n_questions,
  questions: [query ids], removed_docs: [doc ids], n_docs_kept,
  n_removed_not_in_corpus}.

Ask queries.jsonl in a project built from corpus.jsonl (answers with
`rag ask --queries`), and the same questions in the project of the full
corpus: `rag eval answers --answers FULL --gold G --unanswerable CUT` reports the
refusal and false-answer rates; `rag eval tune refusal` tunes the gate on
them.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from rag_cli.errors import BadInput

OUTPUT_FILES = ("corpus.jsonl", "queries.jsonl", "removed.json")


def _relevant(qrels: Mapping[str, Mapping[str, int]],
              query_ids: set[str] | None) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """({query id: its relevant doc ids} of the questions with one, {doc id: the questions it is relevant to})."""
    relevant = {q: {d for d, g in rel.items() if g > 0} for q, rel in qrels.items()
                if query_ids is None or q in query_ids}
    relevant = {q: docs for q, docs in relevant.items() if docs}
    by_doc: dict[str, list[str]] = defaultdict(list)
    for q, docs in relevant.items():
        for d in docs:
            by_doc[d].append(q)
    return relevant, by_doc


def sample_unanswerable(qrels: Mapping[str, Mapping[str, int]], n: int, seed: int,
                        query_ids: set[str] | None = None, keep: str | None = None) -> tuple[list[str], list[str]]:
    """(query ids made unanswerable, in order; doc ids removed, in order) for
    `n` questions at least (fewer when the qrels hold fewer), sampled as the
    module docstring says from `qrels` ({query_id: {doc_id: grade}}),
    restricted to `query_ids` when given; the document `keep` is never
    removed. Raises BadInput when n < 1."""
    if n < 1:
        raise BadInput(f"make-unanswerable N = {n}: the number of questions must be >= 1")
    relevant, by_doc = _relevant(qrels, query_ids)
    order = sorted(by_doc)
    random.Random(seed).shuffle(order)
    if keep is not None:
        order = [d for d in order if d != keep]
    removed: list[str] = []
    gone: set[str] = set()
    picked: list[str] = []
    for d in order:
        if len(picked) >= n:
            break
        removed.append(d)
        gone.add(d)
        picked += [q for q in sorted(by_doc[d]) if q not in picked and relevant[q] <= gone]
    return picked, removed


def _corpus_lines(path: Path):
    """(doc id, raw line) of a BEIR JSONL corpus. Raises BadInput naming the line."""
    from rag_cli.textfiles import text_lines

    for lineno, line in text_lines(path, "--corpus"):
        if not line.strip():
            continue
        try:
            doc_id = json.loads(line)["_id"]
        except (ValueError, KeyError, TypeError):
            raise BadInput(f"{path}:{lineno}: expected a JSON object with an '_id' (BEIR corpus JSONL), "
                           f"got {line[:120]!r}") from None
        yield str(doc_id), line + "\n"


def write_unanswerable(corpus: str | os.PathLike, queries: str | os.PathLike, qrels: str | os.PathLike,
                       n: int, output: str | os.PathLike, *, seed: int = 0) -> dict:
    """Write the made-unanswerable variant of `corpus` for `n` questions of
    `queries` (JSONL or TSV) judged in `qrels` into the folder `output` (see
    the module docstring); the folder is replaced as a whole, and only when
    it holds nothing but those files. Returns the removed.json dict.

    At least one document of `corpus` is kept: when the sample would remove
    them all, it is drawn again (same seed) keeping the document relevant to
    the fewest questions (the first by id among equals).

    Raises BadInput for unreadable inputs, a folder holding other files, no
    question of `queries` with a relevant document in `qrels`, or `n` above
    the questions that can be made unanswerable with a document kept;
    nothing is written then."""
    from rag_cli import atomic
    from rag_cli.evaluate.datasets import queries_with_relevant, read_qrels, read_queries

    out = Path(output)
    if out.exists() and (not out.is_dir() or any(p.name not in OUTPUT_FILES for p in out.iterdir())):
        raise BadInput(f"-o {out}: give a new or empty folder (it would be replaced; it holds other files)")
    asked, judged = read_queries(queries), read_qrels(qrels)
    queries_with_relevant(asked, judged, f"--queries {queries}", f"--qrels {qrels}")
    texts = dict(asked)
    relevant, by_doc = _relevant(judged, set(texts))
    corpus_ids = sorted({doc_id for doc_id, _ in _corpus_lines(Path(corpus))})
    if not corpus_ids:
        raise BadInput(f"--corpus {corpus}: no documents")
    keep = min(corpus_ids, key=lambda d: len(by_doc.get(d, [])))  # the fewest questions lost by keeping it
    possible = len(relevant) - len(by_doc.get(keep, []))
    if n > possible:
        raise BadInput(f"make-unanswerable N = {n}: at most {possible} question(s) of --queries {queries} can be made "
                       f"unanswerable with a document of --corpus kept ({len(relevant)} have a relevant document "
                       f"in --qrels {qrels}); give N <= {possible}")
    picked, removed = sample_unanswerable(judged, n, seed, set(texts))
    if set(corpus_ids) <= set(removed):
        picked, removed = sample_unanswerable(judged, n, seed, set(texts), keep=keep)
    gone = set(removed)
    found: set[str] = set()
    kept = 0
    with atomic.atomic_dir(out) as tmp:
        with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as f:
            for doc_id, line in _corpus_lines(Path(corpus)):
                if doc_id in gone:
                    found.add(doc_id)
                else:
                    f.write(line)
                    kept += 1
        (tmp / "queries.jsonl").write_text(
            "".join(json.dumps({"_id": q, "text": texts[q]}, ensure_ascii=False) + "\n" for q in picked),
            encoding="utf-8")
        summary = {"corpus": str(corpus), "queries": str(queries), "qrels": str(qrels), "seed": seed,
                   "n_requested": n, "n_questions": len(picked), "questions": picked, "removed_docs": removed,
                   "n_docs_kept": kept, "n_removed_not_in_corpus": len(gone - found)}
        (tmp / "removed.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n",
                                          encoding="utf-8")
    return summary
