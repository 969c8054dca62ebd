"""Where the gold goes missing (`rag eval funnel`): per query, the first
layer of the pipeline that loses every relevant document (sparse and dense
candidates, fusion, rerank when a cross-encoder is set, the evidence and the
citations of `ask`), and ANN recall (HNSW against exact search); see
`rag_cli.evaluate.funnel`."""

from __future__ import annotations

import os

from rag_cli.lab.common import file_stem, prepare, read_judged
from rag_cli.lab.report import Report
from rag_cli.progress import Progress


def _reranker(p, config):
    """(query text, hits) -> the hits rescored by project `p`'s
    cross-encoder (model.reranker of `config`), or None when none is set."""
    if not config.model.reranker:
        return None
    from rag_cli.stages.rerank import rerank_rows

    ce = p.engines.cross_encoder(config)

    def rerank(text, hits):
        rows = [h._replace(query_id="q", query=text) for h in hits]
        return rerank_rows(rows, {h.chunk_id: h.text for h in hits}, ce, top_in=len(rows),
                           top_out=max(len(rows), 1))[0]
    return rerank


def _answerer(p):
    """question -> (evidence chunk ids given to the generator, chunk ids
    cited) of `ask` with project `p`'s [ask] settings: the evidence at or
    above the question's threshold (`AskResult.min_score_used`: ask.min_score
    or min_score_en), none when the gate refused."""
    from rag_cli.stages.ask import ask

    acfg, scfg, s, mask, gen = p.engines.ask_setup()
    ask_reranker = p.engines.ask_reranker()

    def answer(text):
        res = ask(s, gen, text, acfg, scfg, mask, ask_reranker)
        gate_refused = res.refused and res.reason != "the generator found no sentence to quote"
        given = [] if gate_refused else [e.chunk_id for e in res.evidence if e.score >= res.min_score_used]
        return given, list(res.answer.citations)
    return answer


def run(p, qrels: str | os.PathLike, queries: str | os.PathLike, *, k: int | None = None,
        candidates: int | None = None, rrf_k: int | None = None, answers: bool = True, name: str | None = None,
        output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
        plots: str | os.PathLike | None = None, progress: Progress | None = None) -> "FunnelReport":
    """The funnel of project `p` for `queries` judged in `qrels`: hybrid
    search with `k`, `candidates`, `rrf_k` (None: the config's), the
    cross-encoder when model.reranker is set, `ask`'s evidence and
    citations when `answers`; ANN recall at 10, k and candidates. Writes
    `output`, else eval/NAME.json (NAME: `name`, else funnel-QUERIES).
    Raises BadInput for a missing project, qrels that judge nothing here,
    or a bad file."""
    from rag_cli.evaluate.funnel import funnel

    path = prepare(p, {"--queries": queries, "--qrels": qrels}, name=name, default=f"funnel-{file_stem(queries)}",
                   output=output, md=md, plots=plots)
    asked, gold = read_judged(p, queries, qrels)
    config = p.folder.with_options("search", {"k": k, "candidates": candidates, "rrf_k": rrf_k, "mode": "hybrid"})
    s = p.engines.searcher(config, with_embedder=True)
    search = config.search
    data = funnel(s, asked, gold, k=search.k, candidates=search.candidates, rrf_k=search.rrf_k, fusion=search.fusion,
                  dense_weight=search.dense_weight, reranker=_reranker(p, config),
                  answerer=_answerer(p) if answers else None, ann_ks=sorted({10, search.k, search.candidates}),
                  progress=progress)
    report = FunnelReport({"queries": str(queries), "qrels": str(qrels), **data}, path)
    report.save()
    return report


class FunnelReport(Report):
    """Counts of the layer where the gold first goes missing, and ANN recall."""

    kind = "funnel"

    def print_tables(self, console) -> None:
        """(where the gold is missing) x (queries, share), then ANN recall on one line."""
        from rich.table import Table

        r = self.data
        n = r["n_queries"]
        c = r["counts"]
        table = Table(title=f"funnel: {n} queries with a relevant document (k {r['params']['k']}, "
                            f"candidates {r['params']['candidates']})")
        table.add_column("where the gold is missing")
        table.add_column("queries", justify="right")
        table.add_column("share", justify="right")
        rows = [("not in sparse candidates", c["not_in_sparse"]), ("not in dense candidates", c["not_in_dense"])]
        labels = {"retrieval": "first lost: in neither candidate list", "fusion": "first lost: in fusion",
                  "rerank": "first lost: dropped by rerank", "evidence": "first lost: cut from the evidence",
                  "citation": "first lost: not cited", "none": "reached the last layer measured"}
        measured = set(r["layers_measured"]) | {"retrieval", "none"}
        rows += [(labels[s], v) for s, v in c["first_missing"].items()
                 if s in measured or (s == "citation" and "cited" in measured)]
        for label, v in rows:
            table.add_row(label, str(v), f"{v / n:.1%}" if n else "")
        console.print(table)
        from rag_cli.index.backends import ann_label

        console.print(f"ANN recall ({ann_label(r.get('ann_backend'))} vs exact): " + ", ".join(
            f"{k} {'n/a' if v is None else f'{v:.4f}'}" for k, v in r["ann"].items()), highlight=False)
