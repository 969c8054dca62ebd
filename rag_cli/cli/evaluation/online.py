"""`rag eval online`: what the served queries say (`rag serve --log`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rag_cli.cli.evaluation.app import REPORT, eval_app, show
from rag_cli.cli.options import OUTPUT, PROJECT, options

SinceOpt = Annotated[Optional[str], typer.Option(
    "--since", help="Only requests at or after this ISO date or time (UTC unless it says otherwise)")]
UntilOpt = Annotated[Optional[str], typer.Option("--until", help="Only requests before this ISO date or time")]
TopOpt = Annotated[int, typer.Option("--top", help="How many of the most frequent queries without a good hit")]
MinScoreOpt = Annotated[Optional[float], typer.Option(
    "--min-score", help="A good hit's cosine at least this, for every query (default: the refusal gate's "
                        "threshold of the query's language, ask.min_score or ask.min_score_en)")]


@eval_app.command("online")
@options(REPORT, PROJECT, OUTPUT)
def online(since: SinceOpt = None, until: UntilOpt = None, top: TopOpt = 10, min_score: MinScoreOpt = None, *,
           name, output, md, project, json_out, quiet):
    """Online metrics from the server's query log (`rag serve --log`): refusal rate, thumbs-down rate,
    latency P50/P95/P99, and the most frequent queries without a good hit."""
    from rag_cli import lab
    from rag_cli.project import Project

    report = lab.online.run(Project.open(project), since=since, until=until, top=top, min_score=min_score,
                            name=name, output=output, md=md)
    show(report, json_out=json_out, quiet=quiet)
