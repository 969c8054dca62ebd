"""Option groups, declared once and stacked on commands by `options` (as
sqlite-utils stacks its `output_options` and `import_options` decorators).

A config setting's option is derived from what `rag_cli.config.setting`
declared: its flag, its help plus " (config: section.key)", its type
(`Optional[int | float | str]`, None meaning "not given": the library then
uses rag.toml or the default). Its limits are checked by the library
(exit 2 naming the flag and the key), not here; a setting with a fixed set
of lower-case choices (`--precision int8|fp32`) is case-insensitive.

A command declares the keyword-only parameters its groups provide, without
annotations, and `options` supplies them::

    @app.command()
    @options(Settings("chunk"), LOCK, PROJECT, OUTPUT)
    def chunk(sources: SourcesArg, *, opts, project, json_out, quiet): ...

`opts` receives the settings, keyed as the library takes them
(`Project.chunk(src, size=200, model=...)`): the key itself, `model` for a
`--model` flag (the embedder; the cross-encoder for `rerank`), and a
section given `into` as one dict (`llm={...}` for [generator]). A keyword
(or a flag) goes to the first group that has it: `-k` of ask.k shadows
search.k, and [model]'s embedder shadows its reranker.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from rag_cli.cli.common import RagCommand

from rag_cli.config import SettingInfo, all_settings


class Settings:
    """The command-line settings (`cli=True`) of config `section`, or only
    `keys` of it, less the keys `without`, as options whose values reach the
    command's `opts` (under `into` as one dict when given)."""

    def __init__(self, section: str, *keys: str, into: str | None = None, without: tuple[str, ...] = ()):
        self.section, self.keys, self.into, self.without = section, keys, into, without

    def settings(self) -> list[SettingInfo]:
        found = [s for s in all_settings() if s.section == self.section and s.cli
                 and (not self.keys or s.key in self.keys) and s.key not in self.without]
        missing = set(self.keys) - {s.key for s in found}
        if missing:
            raise KeyError(f"no command-line setting {self.section}.{', '.join(sorted(missing))}")
        return found


@dataclass(frozen=True)
class Plain:
    """Options passed to the command under their own parameter names (`project`, `json_out`, `quiet`)."""

    params: tuple[inspect.Parameter, ...]


def _lower(value: str | None) -> str | None:
    return value.lower() if value else value


def setting_option(info: SettingInfo) -> Any:
    """The `Annotated[Optional[T], typer.Option(...)]` of a config setting."""
    choices = bool(info.limits) and isinstance(info.limits[0], str) and all(c == c.lower() for c in info.limits)
    # `--embedder` spells the bi-encoder's `--model` as model.embedder is spelled (issue 33)
    aliases = ("--embedder",) if (info.section, info.key) == ("model", "embedder") else ()
    option = typer.Option(info.flag, *aliases, help=f"{info.help} (config: {info.place}.{info.key})",
                          callback=_lower if choices else None)
    return Annotated[Optional[type(info.default)], option]


def _keyword(info: SettingInfo) -> str:
    """The library's keyword for a setting: `model` for the models (flag `--model`), else the key."""
    return "model" if info.flag == "--model" else info.key


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def options(*groups: Settings | Plain):
    """Decorate a command with option groups (see the module docstring)."""

    def decorate(fn):
        sig = inspect.signature(fn, eval_str=True)
        added: list[inspect.Parameter] = []
        routes: dict[str, tuple[str | None, str]] = {}  # parameter -> (into, keyword)
        taken: set[tuple[str | None, str]] = set()
        flags: set[str] = set()
        for group in groups:
            if isinstance(group, Plain):
                added += group.params
                continue
            for info in group.settings():
                route = (group.into, _keyword(info))
                if route in taken or info.flag in flags:
                    continue
                taken.add(route)
                flags.add(info.flag)
                name = f"{info.section}_{info.key}"
                routes[name] = route
                added.append(_param(name, setting_option(info), None))
        provided = {p.name for p in added} - set(routes) | ({"opts"} if routes else set())
        missing = provided - set(sig.parameters)
        if missing:
            raise TypeError(f"{fn.__name__} does not take {', '.join(sorted(missing))}")
        own = [p for p in sig.parameters.values() if p.name not in provided]

        @functools.wraps(fn)
        def command(**kwargs):
            if routes:
                opts: dict[str, Any] = {}
                for name, (into, keyword) in routes.items():
                    (opts.setdefault(into, {}) if into else opts)[keyword] = kwargs.pop(name)
                kwargs["opts"] = opts
            return fn(**kwargs)

        command.__signature__ = sig.replace(parameters=own + added)
        return command

    return decorate


# --------------------------------------------------------------------------- the groups
CHUNK = Settings("chunk")
MODEL = Settings("model", without=("reader",))  # the bi-encoder and how models run (reranker: rerank's, reader: ask's)
INDEX = Settings("index")
SEARCH = Settings("search")
ASK = Settings("ask")
LLM = Settings("generator", into="llm")
LOCK = Settings("lock")

PROJECT = Plain((_param("project", Annotated[Optional[Path], typer.Option(
    "-p", "--project", help="Project folder (env RAG_PROJECT; default ./.rag)")], None),))

JSON_HELP = "Machine-readable JSON on stdout, nothing else."
QUIET_HELP = "No progress or summaries on stderr."


def output(quiet: str | None = QUIET_HELP, json: bool = True) -> Plain:
    """`--json` (unless `json` is False) and `-q/--quiet` with the help `quiet` (none if None)."""
    params = []
    if json:
        params.append(_param("json_out", Annotated[bool, typer.Option("--json", help=JSON_HELP)], False))
    if quiet:
        params.append(_param("quiet", Annotated[bool, typer.Option("-q", "--quiet", help=quiet)], False))
    return Plain(tuple(params))


OUTPUT = output()

# --------------------------------------------------------------------------- --ray [ADDRESS]
RAY = Plain((_param("ray", Annotated[Optional[str], typer.Option(
    "--ray", metavar="[ADDRESS]",
    help="Embed on Ray (the ray extra): alone, a local instance on 127.0.0.1; auto, ray://HOST:PORT or HOST:PORT: "
         "a running cluster (docs/scale-out.md)")], None),))


class RayCommand(RagCommand):
    """A command whose `--ray` takes an optional value: the word after
    `--ray` is its ADDRESS when it is one (`local`, `auto`, `ray://HOST:PORT`,
    `HOST:PORT`), or, for a command without arguments, when it is not a
    flag (then checked, exit 2 naming --ray); else `--ray` means `--ray local`
    (so `rag build --ray docs/` reads docs/ as a source)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        from rag_cli.models.ray_cluster import LOCAL, is_address

        takes_arguments = any(p.param_type_name == "argument" for p in self.params)
        out: list[str] = []
        for i, arg in enumerate(args):
            out.append(arg)
            if arg == "--":
                out += args[i + 1:]
                break
            if arg == "--ray":
                nxt = args[i + 1] if i + 1 < len(args) else None
                if nxt is None or not (is_address(nxt) or (not takes_arguments and not nxt.startswith("-"))):
                    out.append(LOCAL)
        return super().parse_args(ctx, out)


# --------------------------------------------------------------------------- options shared by a few commands
FormatOpt = Annotated[str, typer.Option(
    "--format", help="auto (by extension) | markdown | text | html | pdf | docx | code | beir")]
FilterOpt = Annotated[Optional[list[str]], typer.Option(
    "--filter", help="Only chunks whose fields match, repeat to AND: path='*.md', 'date>=2025-01-01', "
    "'tags in \\[api,cli]' (fields and syntax: docs/living-index.md)")]
NameArg = Annotated[str, typer.Argument(
    help="A model folder, a default name, or a Hugging Face id fetched by `rag models pull`")]
