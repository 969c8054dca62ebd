"""The `rag eval` group: one subcommand per experiment of the lab
(`rag_cli.lab`), `run` the default (`DefaultGroup`), so the old spelling
`rag eval --qrels Q --run R` is `rag eval run --qrels Q --run R`; the
options its subcommands share, declared once; and `show`, the one function
that prints a report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from rag_cli.cli.common import RagTyper, emit_json, note, stderr, stdout
from rag_cli.cli.options import Plain, _param
from rag_cli.cli.root import app


class DefaultGroup(TyperGroup):
    """A group that runs its `default` subcommand when the first argument is
    an option (not --help): `rag eval --qrels Q --run R` is `rag eval run
    --qrels Q --run R`. An option that the subcommand does not take is
    click's "No such option" (exit 2), told which subcommands take it; an
    unknown subcommand (of this group or a nested one) is told the choices."""

    default = "run"

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in ctx.help_option_names:
            named = next((i for i, a in enumerate(args) if a in self.commands), None)
            # `rag eval -p DIR compare R1 R2`: the subcommand named after its options goes first
            args = [args[named], *args[:named], *args[named + 1:]] if named else [self.default, *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:  # click's usage errors (vendored by typer >= 0.29, click's own before)
            if type(exc).__name__ == "NoSuchOption":
                exc.message += self.hint(exc.option_name, ctx.command_path)
            elif type(exc).__name__ == "UsageError" and exc.message.startswith("No such command") and exc.ctx:
                names = [repr(name) for name in getattr(exc.ctx.command, "commands", {})]
                exc.message += f" Choose {', '.join(names[:-1])} or {names[-1]}." if len(names) > 1 else ""
            raise

    def hint(self, flag: str, path: str) -> str:
        """What "No such option: FLAG" adds: " (an option of `rag eval answers`)", naming every subcommand
        that takes `flag`; else " (now a subcommand: `rag eval compare`)" for an old mode flag; else ""."""
        owners = [f"`{path} {name}`" for name, cmd in _commands(self) if any(flag in p.opts for p in cmd.params)]
        if owners:
            return f" (an option of {', '.join(owners)})"
        return f" (now a subcommand: `{path} {flag.lstrip('-')}`)" if flag.lstrip("-") in self.commands else ""


def _commands(group, prefix: str = ""):
    """(name, command) of every subcommand of `group`, those of nested groups as "tune fusion"."""
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, f"{prefix}{name} ")
        else:
            yield prefix + name, cmd


eval_app = RagTyper(name="eval", cls=DefaultGroup, help=r"""Evaluate: score runs and answers, compare, tune, stress.

One subcommand per experiment (`rag_cli.lab`); `run` is the default, so
`rag eval --qrels Q --run R` is `rag eval run --qrels Q --run R`. Each
writes its JSON report to `eval/NAME.json` of the project (or `-o FILE`),
prints a table (or `--json`) and says on stderr what looks wrong with the
inputs; most take `--md FILE` (a Markdown summary) and `--plots DIR` (PNG
plots; `pip install 'rag-cli\[plot]'`). A flag that a subcommand does not
take is an error (exit 2) naming the subcommands that take it.

Before any work every subcommand checks its outputs (exit 2 naming the
flags): `-o`, `--md` and the `--plots` folder must not be an input file
(`--run`, the runs compared, `--qrels`, `--queries`, `--answers`, `--gold`,
`--corpus`, ...) or one another, `-o`/`--md` must not be a folder and their
folder must exist or be creatable and writable, `--plots` must be a folder
that can be created and written, must not hold an input, and needs
matplotlib; inside the project folder, outputs go under `eval/` only (the
project's own files are never overwritten); and the `-o DIR` of `rag eval
make-unanswerable` must not be the folder of an input. The subcommands that
search the project (`run --queries`, `funnel`, `perturb`, `tune fusion`)
also refuse, before searching, qrels that judge none of the queries
(another query set) or whose relevant documents (or chunks) are none of
the project's (another collection). Definitions, sources and measured
tables: docs/evaluation.md.""")
app.add_typer(eval_app, name="eval")

tune_app = RagTyper(name="tune", help="""Grid-search a setting on a train split and write the winner to rag.toml.

`rag eval tune fusion` tunes the hybrid fusion on queries and qrels;
`rag eval tune refusal` tunes the refusal gate on answers recorded with
`rag ask --gate off`.""")
eval_app.add_typer(tune_app, name="tune")

# --------------------------------------------------------------------------- options shared by the subcommands
QrelsOpt = Annotated[Path, typer.Option("--qrels", help="Qrels: BEIR TSV (query-id corpus-id score) or TREC 4-column")]
QueriesOpt = Annotated[Path, typer.Option("--queries", help="Query file (JSONL _id/text or query_id/query, or TSV)")]
ModeOpt = Annotated[Optional[str], typer.Option("--mode", help="Retrieval mode (config: search.mode)")]

def not_a_flag(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """A path option's value, refused (exit 2) when it starts with `--`: `--md --plots` would otherwise write a
    file named `--plots`."""
    if value is not None and str(value).startswith("--"):
        raise typer.BadParameter(f"{str(value)!r} looks like a flag, not a path: give {param.opts[-1]} a path "
                                 f"(e.g. {param.opts[-1]} report.md)")
    return value


#: -o, --name and --md: where the report goes (every subcommand that writes eval/NAME.json).
REPORT = Plain((
    _param("name", Annotated[Optional[str], typer.Option(
        "--name", help="Report name: eval/NAME.json (default: named after the inputs, see above)")], None),
    _param("output", Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="Write the JSON report here instead of eval/NAME.json", callback=not_a_flag)], None),
    _param("md", Annotated[Optional[Path], typer.Option(
        "--md", help="Also write a Markdown summary of the report to this file", callback=not_a_flag)], None),
))
PLOTS = Plain((_param("plots", Annotated[Optional[Path], typer.Option(
    "--plots", help="Also draw PNG plots of the report into this folder (needs matplotlib: the plot extra)",
    callback=not_a_flag)], None),))
KS = Plain((_param("ks", Annotated[Optional[str], typer.Option(
    "--ks", help="Cutoffs, comma-separated (default 1,5,10,20,100)")], None),))
PERMUTATIONS = Plain((_param("permutations", Annotated[Optional[int], typer.Option(
    "--permutations", help="Random sign flips of the paired randomisation test (default 10000)")], None),))
METRICS = Plain((_param("metrics", Annotated[Optional[str], typer.Option(
    "--metrics", help="Compare only these metrics, comma-separated (e.g. ndcg@10,recall@100); Holm's correction "
                      "runs across them (default: every metric)")], None),))
SEED = Plain((_param("seed", Annotated[Optional[int], typer.Option(
    "--seed", help="Random seed (default 0)")], None),))


def show(report, *, json_out: bool, quiet: bool, md: Path | None = None, plots: Path | None = None) -> None:
    """Print a lab report: with `json_out` its messages on stderr (unless
    `quiet`) and its dict as JSON on stdout, else `report.render` (tables,
    then unless `quiet` messages and the written line); then write its
    Markdown summary and plots when asked for, each said unless `quiet`."""
    if json_out:
        if not quiet:
            report.print_messages(stderr())
        emit_json(report.to_dict())
    else:
        report.render(stdout(), quiet, err=stderr())
    for path in report.write_summaries(md, plots):
        if not quiet:
            note(f"written: {path}")
