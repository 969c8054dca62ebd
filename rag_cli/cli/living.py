r"""`rag update`, `rag watch`, `rag rollback` and `rag status`: keeping a
built project current (docs/living-index.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli import render
from rag_cli.cli.common import as_dict, emit_json, error, given, line, note, progress
from rag_cli.cli.options import (CHUNK, LOCK, MODEL, OUTPUT, PROJECT, RAY, FormatOpt, RayCommand, Settings, options,
                                 output)
from rag_cli.cli.root import app
from rag_cli.safe_text import one_line

#: How many old index generations to keep (`--keep`).
KEEP = Settings("index", "keep")

WatchArg = Annotated[Optional[list[str]], typer.Argument(
    help="Files, folders or globs to keep indexed (default: those remembered by `rag build`)")]
DebounceOpt = Annotated[float, typer.Option(
    "--debounce", help="Seconds without changes before a batch of changes is applied as one update")]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Also hash every file of every index generation against its files.json; exit 2 if one is "
                     "damaged (docs/living-index.md)")]


@app.command(cls=RayCommand)
@options(KEEP, RAY, LOCK, PROJECT, OUTPUT)
def update(*, opts, ray, project, json_out, quiet):
    r"""Rescan the sources of `rag build`: rechunk new and changed documents, embed new texts, update the index.

    A change of the chunk settings rechunks everything; another embedder or
    HNSW M / ef_construction rebuilds the index (the summary says why).
    Details: docs/living-index.md.
    """
    from rag_cli.project import Project

    p = Project.open(project)
    with progress(quiet or json_out) as bar:
        out = as_dict(p.update(ray=ray, progress=bar, **given(opts)))
    if json_out:
        return emit_json(out)
    if not quiet:
        render.updated({stage: as_dict(s) for stage, s in out.items()})


@app.command()
@options(CHUNK, MODEL, KEEP, LOCK, PROJECT, output(json=False))
def watch(sources: WatchArg = None, debounce: DebounceOpt = 2.0, fmt: FormatOpt = "auto", *, opts, project, quiet):
    r"""Build (or update) the index, then apply each batch of file changes as one `rag update` until Ctrl-C or SIGTERM.

    First brings the project up to date: a `rag build` when sources or
    chunk or model flags are given that differ from the remembered ones (or
    nothing is built yet), else a `rag update`. Then each batch of file
    changes, once `--debounce` seconds have passed without another, is
    applied as one update. Details: docs/living-index.md.
    """
    from rag_cli.project import Project

    p = Project.open(project)
    say = (lambda m: None) if quiet else (lambda m: note(f"{time.strftime('%H:%M:%S')} {m}"))

    def started(out) -> None:
        out = {stage: as_dict(s) for stage, s in as_dict(out).items()}
        if "chunk" in out and "docs_added" not in out["chunk"]:  # a build
            say(f"built: {out['chunk']['n_docs']} documents, index {out['index']['generation']}")
        else:
            say(f"up to date: {render.update_line(out)}")
        say(f"watching {', '.join(p.config.sources.paths)} (debounce {debounce:g} s); Ctrl-C stops")

    def updated(out) -> None:
        out = {stage: as_dict(s) for stage, s in as_dict(out).items()}
        out["index"]["unchanged"] or say(render.update_line(out))

    try:
        n = p.watch(sources or [], debounce=debounce, format=fmt, on_start=started, on_update=updated,
                    on_batch=lambda b: say(f"{len(b)} change(s): "
                                           f"{', '.join(f'{c} {one_line(Path(f).name)}' for c, f in b[:5])}"
                                           + (" ..." if len(b) > 5 else "")),
                    on_error=lambda exc: error(f"{exc} (still watching)"), **given(opts))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the normal way to stop watching
        say("stopped; the current index generation is complete")
        return
    say(f"stopped after {n} update(s)")


@app.command()
@options(LOCK, PROJECT, OUTPUT)
def rollback(*, opts, project, json_out, quiet):
    """Make the previous index generation current again.

    The chunk and embedding files are not changed (`rag status` then shows
    them as newer than the index).
    """
    from rag_cli.project import Project

    rolled_back(Project.open(project).rollback(**given(opts)), json_out, quiet)


def rolled_back(out, json_out: bool, quiet: bool) -> None:
    """Print what `rollback` did (or its JSON)."""
    if json_out:
        return emit_json(as_dict(out))
    if not quiet:
        render.rolled_back(as_dict(out))


@app.command()
@options(PROJECT, output(quiet="Only the stale and damaged lines (nothing when up to date)."))
def status(verify: VerifyOpt = False, *, project, json_out, quiet):
    """Documents, chunks, vectors, index generations, disk use, stale stages (with the command to refresh each) and damaged files.

    Exit 2 when a file is damaged; with `--verify`, also when a generation's
    files do not match the hashes of its files.json.
    """
    from rag_cli.project import Project

    st = as_dict(Project.open(project).status(verify=verify))
    failed = render.status_failures(st)
    if json_out:
        emit_json(st)
    else:
        for text in render.status_lines(st, verify=verify, quiet=quiet):
            line(one_line(text))  # a file name with a line feed or an escape sequence prints escaped
        for problem in failed if verify else ():
            error(problem)
    if failed:
        raise typer.Exit(2)
