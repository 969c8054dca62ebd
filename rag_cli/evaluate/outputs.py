"""The checks of `rag eval`'s outputs made before any work (every subcommand):
no output is an input or another output, each can be written, and --plots
can draw. Nothing is left half-done by an output found unwritable after the
search, the tuning or the JSON report."""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any, Mapping

from rag_cli.errors import BadInput


def _paths(value: Any) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [Path(v) for v in value]
    return [Path(value)]


def _same(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name the same file: `os.path.samefile` when both
    exist (hard and symbolic links too), else their resolved paths."""
    if a.exists() and b.exists():
        with suppress(OSError):
            return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def _writable_folder(folder: Path, flag: str, given: Path) -> None:
    """BadInput naming `flag` unless `folder` exists or can be created and a
    file can be written into it. Folders made to try it are removed again."""
    missing, f = [], folder
    while not f.exists() and f != f.parent:
        missing.append(f)
        f = f.parent
    if not f.is_dir():
        raise BadInput(f"{flag} {given}: {f} is a file, not a folder; give a path in a folder")
    made: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise BadInput(f"{flag} {given}: cannot write into the folder {folder} "
                       f"({exc.strerror or exc}); give a writable place") from None
    finally:
        for d in reversed(made):
            with suppress(OSError):
                d.rmdir()


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _not_in_project(flag: str, out: Path, project: Path | None, under: str = "eval") -> None:
    """BadInput when `out` is inside `project` but not under its `under`
    folder: there it could replace a file of the project (chunks.parquet, rag.toml, a run, ...)."""
    if project is not None and _inside(out, project) and not _inside(out, project / under):
        raise BadInput(f"{flag} {out} is inside the project folder {project}, whose files rag keeps (chunks, index, "
                       f"runs, answers); write it under {project / under} or outside the project")


def check_eval_files(inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, plots: Any = None,
                     folder: tuple[str, Any] | None = None, project: Path | None = None,
                     under: str = "eval") -> None:
    """The output checks of every `rag eval` subcommand, made before any work.

    Args:
        inputs: {flag: a path, a list of paths or None} of the files read,
            e.g. {"--run": "a.trec", "RUNS": [...], "--qrels": ...}.
        outputs: {flag: path or None} of the files written (the JSON report,
            "--md"); each must not be an existing folder, its folder must
            exist or be creatable (atomic writes create it) and writable.
        plots: the --plots folder (created when missing), or None; matplotlib
            must import.
        folder: (flag, path) of an output folder replaced as a whole
            (`rag eval make-unanswerable`'s -o DIR), or None.
        project: the project folder, or None; an output inside it must be
            under its `under` folder (eval/; runs/ for `rag search --queries -o`).

    Raises:
        BadInput naming both flags when an output is an input or another
        output (same resolved path, or the same file by `os.path.samefile`),
        when make-unanswerable's folder or the --plots folder holds an
        input, or naming the flag of an output that is empty, inside the
        project folder outside eval/, or cannot be written.
    """
    read = [(flag, p) for flag, v in inputs.items() for p in _paths(v)]
    for flag, v in [*outputs.items(), ("--plots", plots), *([folder] if folder else [])]:
        if v is not None and not str(v).strip():
            raise BadInput(f"{flag} is empty; give a path")
    files = [(flag, Path(v)) for flag, v in outputs.items() if v is not None]
    written: list[tuple[str, Path]] = []
    for flag, out in files:
        _not_in_project(flag, out, project, under)
        for other, path in read + written:
            if _same(out, path):
                raise BadInput(f"{flag} {out} is also {other} {path}: it would be overwritten; "
                               f"write {flag} to another file")
        if out.is_dir():
            raise BadInput(f"{flag} {out}: is a folder; give a file path")
        _writable_folder(out.parent, flag, out)
        written.append((flag, out))
    if plots is not None:
        plots = Path(plots)
        for other, path in read + written:
            if _same(plots, path):
                raise BadInput(f"--plots {plots} is also {other} {path}: give --plots a folder of its own")
        if plots.exists() and not plots.is_dir():
            raise BadInput(f"--plots {plots}: is a file; give a folder (created if missing)")
        for other, path in read:
            if _inside(path, plots):
                raise BadInput(f"--plots {plots} holds {other} {path}: a plot could replace it; "
                               f"give --plots a folder of its own")
        _not_in_project("--plots", plots, project)
        _writable_folder(plots, "--plots", plots)
        from rag_cli.evaluate.plots import check_matplotlib

        check_matplotlib()
    if folder is not None:
        flag, out = folder[0], Path(folder[1])
        for other, path in read:
            if _same(out, path):
                raise BadInput(f"{flag} {out} is {other} {path}: -o names the folder to write; give a new folder")
            if _same(out, path.parent):
                raise BadInput(f"{flag} {out} is the folder of {other} {path}: its files would be replaced; "
                               f"give {flag} a new folder")
        _writable_folder(out.parent, flag, out)
