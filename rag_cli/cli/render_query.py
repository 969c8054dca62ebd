"""How hits (search, rerank) and answers (ask) are printed and put in JSON.
Every text from a document or the user is printed plain (`rag_cli.safe_text`)."""

from __future__ import annotations

import sys

from rag_cli.cli.common import note, stdout, warn
from rag_cli.json_shapes import answer_json, hit_json, source_json  # noqa: F401 (the --json shapes)


def score_digits(scores: list[float], least: int = 4, most: int = 17) -> int:
    """Decimals (from `least` up to `most`) that print distinct scores distinctly."""
    distinct = set(scores)
    for digits in range(least, most + 1):
        if len({f"{x:.{digits}f}" for x in distinct}) == len(distinct):
            return digits
    return most


def hits_table(query: str, mode: str, rows: list[dict], score_scale: str | None = None) -> None:
    """The hits as a table; every text from a document or the user is plain (`rag_cli.safe_text`)."""
    from rich.table import Table

    from rag_cli.safe_text import plain, plain_text

    digits = score_digits([r["score"] for r in rows])
    scale = f" (scores: {score_scale})" if score_scale else ""
    table = Table(title=plain_text(f"{mode} results for: {query}{scale}"), show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("chunk")
    table.add_column("text", overflow="fold")
    for r in rows:
        text = " ".join(plain(r["text"]).split())
        table.add_row(str(r["rank"]), f"{r['score']:.{digits}f}", plain_text(r["chunk_id"]),
                      plain_text(text[:200] + ("…" if len(text) > 200 else "")))
    stdout().print(table)
    if not rows:
        note("no results")


def escaped(ids, quiet: bool, limit: int = 5) -> None:
    """Say on stderr which ids a TREC run holds percent-encoded (they contain whitespace)."""
    if ids and not quiet:
        from rag_cli.store.runs import trec_field

        shown = ", ".join(f"{i!r} -> {trec_field(i)!r}" for i in ids[:limit])
        more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
        warn(f"{len(ids)} id(s) contain whitespace and are written percent-encoded in the TREC run "
             f"(urllib.parse.unquote gives them back): {shown}{more}")


def queries_truncated(n: int, max_length: int | None, quiet: bool) -> None:
    """Say on stderr how many queries the bi-encoder cut to its max_length (never cut silently)."""
    if n and not quiet:
        warn(f"{n} quer{'y was' if n == 1 else 'ies were'} longer than the bi-encoder's max_length "
             f"({max_length} tokens) and cut before encoding; only the first tokens were searched")


def pairs_truncated(res) -> None:
    """Say on stderr how many (query, passage) pairs the cross-encoder cut."""
    if res.n_pairs_truncated:
        warn(f"{res.n_pairs_truncated} (query, passage) pair(s) were longer than the cross-encoder's "
             f"max_length ({res.reranker_max_length} tokens); their passages were cut")


# --------------------------------------------------------------------------- answers
class AnswerStream:
    """`on_text` of `rag ask --stream`: "Q: question" and "A: " before the
    first piece, then each piece (already plain) as it comes."""

    def __init__(self, question: str):
        self.question, self.started = question, False

    def __call__(self, piece: str) -> None:
        from rich.text import Text

        from rag_cli.safe_text import plain

        if not self.started:
            self.started = True
            stdout().print(Text.assemble(("Q:", "bold"), " ", plain(self.question), "\n", ("A:", "bold"), " "),
                           end="")
        sys.stdout.write(piece)
        sys.stdout.flush()

    def end_line(self) -> None:
        """End a partial answer's line (before an error or interrupt message)."""
        if self.started:
            sys.stdout.write("\n")
            sys.stdout.flush()


def answer(res, streamed: bool = False) -> None:
    """Question, answer, the supporting sentences (cited) when the answer is a phrase of them, and cited
    sources; all document text is plain (`rag_cli.safe_text`).
    `streamed`: the question and answer were printed already (`AnswerStream`), only end the line."""
    from rich.text import Text

    from rag_cli.safe_text import plain

    out = stdout()
    if streamed:
        out.print()
    else:
        out.print(Text.assemble(("Q:", "bold"), " ", plain(res.question)))
        out.print(Text.assemble(("A:", "bold"), " ", plain(res.answer.text)))
    support = res.answer.support  # under the answer, streamed or not: the output is the same
    if support and not res.answer.refused and support.strip() != res.answer.text.strip():
        out.print(Text.assemble(("Support:", "bold"), " ", plain(support)))
    cited = set(res.answer.citations)
    if cited:
        out.print(Text("Sources:", style="bold"))
        for e in res.evidence:
            if e.chunk_id in cited:
                src = source_json(e)
                out.print(Text(plain(f"  [{e.number}] {src['title']}  {e.chunk_id}  (cosine {e.score:.3f})")))
    elif res.answer.refused:
        out.print(Text(plain(f"({res.reason})")))


def answer_checks(res, quiet: bool) -> None:
    """Say on stderr what the citation check removed and what the token budget cut."""
    if quiet:
        return
    if res.answer.n_citations_removed:
        warn(f"{res.answer.n_citations_removed} citation(s) of numbers that were not among the sources "
             "were removed from the answer")
    if res.answer.n_evidence_cut:
        note(f"{res.answer.n_evidence_cut} lowest-ranked evidence chunk(s) left out of the prompt to fit "
             "generator.context_tokens")
