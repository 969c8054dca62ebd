"""The evaluation lab: one module per experiment, each a function
`run(...) -> Report` (`rag_cli.lab.report.Report`: `to_dict()`, `path`,
`warnings()`, `render(console)`, `markdown()`, `save()`,
`write_summaries()`), in the manner of ranx's `Report`::

    from rag_cli import Project, lab
    p = Project.open("my.rag")
    report = lab.score.run(p, "qrels.tsv", queries="queries.jsonl", ks="1,10")
    report.render()
    report.write_summaries(md="eval.md")

Experiments (first argument: the project, or the inputs where none is needed):

    score          score a run against qrels, or search a query file first   rag eval [run] --qrels Q --run R|--queries F
    compare        compare runs with the first: paired tests, Holm           rag eval compare RUNS
    answers        score answers against gold answers                        rag eval answers --answers A --gold G
    judge          RAGAS faithfulness and answer relevancy by an LLM         rag eval answers --answers A --judge
    funnel         the layer where the gold first goes missing; ANN recall   rag eval funnel
    perturb        the loss of changed queries (case, typo, punct)           rag eval perturb --perturb KIND
    tune_fusion    grid-search the hybrid fusion, write the winner           rag eval tune fusion
    tune_refusal   grid-search the refusal gate, write the winner            rag eval tune refusal
    unanswerable   a corpus with the gold of N questions removed             rag eval make-unanswerable N
    online         refusal, thumbs-down, latency of the served queries       rag eval online (`rag serve --log`)

The shared preamble (cutoffs, name and file checks, the default
eval/NAME.json, qrels that judge this project) is `rag_cli.lab.common`; the
metrics, statistics and tuning themselves are the library
`rag_cli.evaluate`, which knows nothing of projects.
"""

from rag_cli.lab import (answers, common, compare, funnel, judge, online, perturb, score, tune_fusion,
                         tune_refusal, unanswerable)
from rag_cli.lab.common import DEFAULT_KS, cutoffs
from rag_cli.lab.report import Report

__all__ = ["Report", "DEFAULT_KS", "cutoffs", "answers", "common", "compare", "funnel", "judge", "online", "perturb",
           "score", "tune_fusion", "tune_refusal", "unanswerable"]
