"""`rag watch`: keep the index current as files change, with `watchfiles`.

The folders that hold the sources (a folder source itself; the folder of a
file source; the fixed part of a glob) are watched recursively with
`watchfiles.watch` (inotify on Linux, FSEvents on macOS, polling elsewhere).
Changes are grouped: a batch is handed over once no change has come for
`debounce` seconds (or, under a stream of changes, after at most
`MAX_BATCH_FACTOR * debounce` seconds), and each batch is applied as one
`update` (one new index generation at most).

Editors that save through a temporary file and a rename (vim, VS Code,
JetBrains, `sed -i`) show up as added / deleted temporary files plus the
renamed target; `update` rescans the remembered sources, so only the final
files count, and temporary files that are hidden (`.name.swp`) are never
loaded. Changes that `watchfiles.DefaultFilter` ignores (`.git/`, `*.swp`,
`*~`, `__pycache__/` ...) do not start an update, nor do changes inside the
folders `ignore` names: the project folder itself when it lies inside a
watched source (each update writes manifest.json, the lock and a generation
there, which would otherwise start the next update, and so on forever).

An update that fails is reported through `on_error` and does not stop the
watcher: after BadInput (e.g. the last document was deleted) the next change
tries again; after WorkFailed (e.g. another writer holds the project lock)
the next quiet period does. Stopping:
`stop` (a `threading.Event`) set, or KeyboardInterrupt (Ctrl-C; SIGTERM
under the `rag` command) raised in the caller's thread, which an update in
progress unwinds like a killed one: its unfinished generation is removed and
the current one stays as it was.
"""

from __future__ import annotations

import glob
import os
import threading
from pathlib import Path
from typing import Callable

#: A batch is handed over at the latest after this many debounce periods of continuous changes.
MAX_BATCH_FACTOR = 10


def watch_roots(sources: list[str]) -> list[Path]:
    """The folders to watch for `sources` (absolute paths or globs): each
    folder source, the parent of each file source, and for a glob the folder
    before its first wildcard. Nested folders are dropped (the outer one is
    watched recursively). Returns sorted absolute paths."""
    roots = set()
    for s in sources:
        p = Path(s)
        if glob.has_magic(s):
            fixed = []
            for part in p.parts:
                if glob.has_magic(part):
                    break
                fixed.append(part)
            p = Path(*fixed) if fixed else Path.cwd()
        elif not p.is_dir():
            p = p.parent
        roots.add(p.resolve())
    out = sorted(roots)
    return [r for r in out if not any(r != o and r.is_relative_to(o) for o in out)]


def change_filter(ignore: list[Path] = ()):
    """`watchfiles.DefaultFilter` that also drops every change inside the
    folders `ignore` (compared as given and with symlinks resolved)."""
    import watchfiles

    prefixes = tuple(dict.fromkeys(os.path.join(str(q), "") for p in ignore
                                   for q in (Path(os.path.abspath(p)), Path(p).resolve())))

    class Filter(watchfiles.DefaultFilter):
        def __call__(self, change, path: str) -> bool:
            if prefixes and os.path.join(path, "").startswith(prefixes):
                return False
            return super().__call__(change, path)

    return Filter()


def watch_changes(roots: list[Path], apply: Callable[[], dict], *, debounce: float = 2.0,
                  stop: threading.Event | None = None,
                  on_batch: Callable[[list[tuple[str, str]]], None] | None = None,
                  on_update: Callable[[dict], None] | None = None,
                  on_error: Callable[[Exception], None] | None = None, ignore: list[Path] = ()) -> int:
    """Watch `roots` and call `apply()` (an update) once per debounced batch
    of changes; `debounce` in seconds (> 0). `on_batch` gets the batch as
    [(change: "added" | "modified" | "deleted", path)], `on_update` what
    `apply` returned, `on_error` a RagError it raised (tried again at the
    next change after BadInput, after the next quiet period after WorkFailed).
    One update runs as soon as the watcher has started, for changes made
    before it started (usually it finds none and writes nothing). Changes
    inside the folders `ignore` (the project folder) are not changes.
    Returns the number of updates applied when `stop` is set.
    KeyboardInterrupt propagates."""
    import watchfiles

    from rag_cli.errors import BadInput, RagError

    step_ms = max(int(debounce * 1000), 1)
    pending = True  # once the watcher runs: catch changes made before it started
    n = 0
    for changes in watchfiles.watch(*roots, watch_filter=change_filter(ignore), debounce=step_ms * MAX_BATCH_FACTOR,
                                    step=step_ms, stop_event=stop, rust_timeout=step_ms, yield_on_timeout=True,
                                    raise_interrupt=True):
        if changes:
            pending = True
            if on_batch:
                on_batch(sorted((c.name, os.fspath(p)) for c, p in changes))
        if not pending or (stop is not None and stop.is_set()):
            continue
        try:
            result = apply()
        except RagError as exc:
            pending = not isinstance(exc, BadInput)
            if on_error:
                on_error(exc)
            continue
        pending = False
        n += 1
        if on_update:
            on_update(result)
    return n
