"""The project folder: its paths, `rag.toml`, manifest.json and the writer lock.

Layout (docs/layout.md)::

    .rag/
      rag.toml  manifest.json  docs.parquet  chunks.parquet
      parents.parquet (parent-child only)
      embeddings.parquet  index/  runs/  answers/  eval/  cache/vectors/

A `ProjectFolder` is what every stage receives: it knows where each file
lives, which stage writes it (`require`), how to record a stage in
manifest.json, and how to hold the lock while writing. It loads no model
and runs no stage (`rag_cli.project.Project` does).

Writers hold the project lock (a file lock on `.lock`; the holder's pid,
command and start time in `.lock.json`) from start to end; another writer
waits up to `wait` seconds (the operation's `wait`, else `lock_timeout`,
else config `lock.wait`, default 0), then gets WorkFailed (exit 1) naming
the holder. Readers never take the lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rag_cli.config import Config, check_flag
from rag_cli.errors import BadInput, WorkFailed

DEFAULT_PROJECT = ".rag"

#: Outputs written only under the project lock: the temporary files a killed
#: writer leaves beside them (`.NAME.<random>.tmp`, see `rag_cli.atomic`) are
#: removed by the next writer. (manifest.json, runs/, answers/ and eval/ are
#: also written by readers, which take no lock: their temporary files are left.)
WRITER_OUTPUTS = ("docs.parquet", "chunks.parquet", "parents.parquet", "embeddings.parquet")

#: What a multi-stage writer (`build`, `update`) puts back when it fails (`ProjectFolder.all_or_nothing`):
#: these files as they were before it started (every writer replaces them atomically, so a hard link
#: keeps the old content), besides removing the index generations it wrote.
SAVEPOINT_FILES = ("rag.toml", "manifest.json", *WRITER_OUTPUTS, "index/CURRENT")
SAVEPOINT = ".savepoint"


def project_dir(option: str | os.PathLike | None = None) -> Path:
    """The project folder: `option`, else `$RAG_PROJECT`, else `./.rag`."""
    return Path(option or os.environ.get("RAG_PROJECT") or DEFAULT_PROJECT)


def check_name(name: str | None, flag: str = "--name") -> None:
    """Raise BadInput unless `name` (None = not given) is a plain file name
    stem: not empty, not `.` or `..`, no path separator, no NUL; output names
    stay inside the project's runs/, answers/ and eval/ folders."""
    if name is None:
        return
    seps = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if not name.strip() or name in (".", "..") or any(c in name for c in seps | {"\0"}):
        raise BadInput(f"{flag} {name!r}: give a plain name without path separators (not '.' or '..'), "
                       "e.g. --name bm25-test; use -o/--output to write elsewhere")


def file_stem(path: str | os.PathLike) -> str:
    """A file's name up to its first dot (`queries.jsonl.gz` -> `queries`), for default output names."""
    return Path(path).name.split(".")[0]


@dataclass
class ProjectFolder:
    """A project folder. Paths are properties; nothing is created until written.

    Attributes:
        root: the folder.
        lock_timeout: seconds a writer waits for another writer's lock when
            an operation gets no `wait`; None = config `lock.wait`.
    """

    root: Path
    lock_timeout: float | None = None
    _lock_depth: int = field(default=0, repr=False, init=False)
    _config_cache: tuple | None = field(default=None, repr=False, init=False, compare=False)

    @classmethod
    def at(cls, path: str | os.PathLike | None = None) -> "ProjectFolder":
        """The folder at `path` (else `$RAG_PROJECT`, else `./.rag`); it need not exist yet.
        Raises BadInput when `path` is a file."""
        root = project_dir(path)
        if root.exists() and not root.is_dir():
            raise BadInput(f"project folder {root} is a file, not a folder: give -p/--project (or RAG_PROJECT) "
                           "a folder, new or made by `rag chunk` or `rag build`")
        return cls(root)

    # -- paths ---------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "rag.toml"

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def docs_path(self) -> Path:
        return self.root / "docs.parquet"

    @property
    def chunks_path(self) -> Path:
        return self.root / "chunks.parquet"

    @property
    def parents_path(self) -> Path:
        return self.root / "parents.parquet"

    @property
    def embeddings_path(self) -> Path:
        return self.root / "embeddings.parquet"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    def run_path(self, name: str, fmt: str = "parquet") -> Path:
        """runs/NAME.parquet (or .trec); BadInput if NAME is not a plain name (`check_name`)."""
        check_name(name)
        return self.root / "runs" / (f"{name}.parquet" if fmt == "parquet" else f"{name}.trec")

    def answers_path(self, name: str) -> Path:
        """answers/NAME.parquet; BadInput if NAME is not a plain name (`check_name`)."""
        check_name(name)
        return self.root / "answers" / f"{name}.parquet"

    def eval_path(self, name: str) -> Path:
        """eval/NAME.json; BadInput if NAME is not a plain name (`check_name`)."""
        check_name(name)
        return self.root / "eval" / f"{name}.json"

    def require(self, path: Path, stage: str) -> Path:
        """Return `path` or raise BadInput saying which stage writes it."""
        if not path.exists():
            raise BadInput(
                f"{path} does not exist: run `rag {stage}` first "
                f"(project folder {self.root}; choose another with -p/--project or RAG_PROJECT)"
            )
        return path

    def require_exists(self) -> None:
        """Raise BadInput unless the project folder exists (for operations that read a project)."""
        if not self.root.is_dir():
            raise BadInput(f"project folder {self.root} does not exist: run `rag chunk` first, "
                           "or choose another with -p/--project or RAG_PROJECT")

    # -- config --------------------------------------------------------------
    @property
    def config(self) -> Config:
        """rag.toml over the defaults, read again whenever the file has changed
        (another process may have changed it: its inode, size, mtime or ctime
        differ; a file changed in the last 2 s is read every time, as a change
        within one tick of the file system's clock would not show). A warm
        server reads it for every request, so it is parsed only when it changed.
        Raises BadInput for a bad rag.toml, naming the file and the key."""
        path = self.config_path
        try:
            st = path.stat()
        except FileNotFoundError:
            return Config.load(path)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._config_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        config = Config.load(path)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > 2_000_000_000:
            self._config_cache = (key, config)
        return config

    def with_options(self, section: str, options: dict[str, Any] | None) -> Config:
        """The config with `options` ({key: value}, None = not given) applied
        to `section`, each checked (`Config.with_options`); nothing is written."""
        return self.config.with_options(section, options)[0]

    def save(self, *updates: tuple[str, dict[str, Any]]) -> None:
        """Write the given (section, options) back to rag.toml (call under the
        lock, after success) if one changed a value or there is no rag.toml yet."""
        config, changed = self.config, False
        for section, options in updates:
            config, c = config.with_options(section, options)
            changed = changed or c
        if changed or not self.config_path.exists():
            config.save(self.config_path)

    # -- manifest ------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        """manifest.json ({} when there is none). Raises BadInput if it is not JSON."""
        from rag_cli.store.manifest import read_manifest

        return read_manifest(self.manifest_path)

    def record(self, stage: str, **entry: Any) -> None:
        """Write one stage's entry (params, inputs, outputs, rows, ...) into
        manifest.json, with `tool_version` and `time` (ISO 8601, UTC)."""
        from rag_cli.store.manifest import record

        record(self.manifest_path, stage, entry)

    # -- lock ----------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, command: str = "write", wait: float | None = None) -> Iterator[None]:
        """Hold the project lock while writing (reentrant within this object).

        Waits up to `wait` seconds (None: `lock_timeout`, else config
        `lock.wait`) for another writer, then raises WorkFailed naming the
        holder (pid, command, start time from `.lock.json`). A project folder
        this call created is removed again if the work fails and left it
        empty, so a bad flag or source creates nothing. Raises BadInput first
        if manifest.json cannot be read (the stage would record into it after
        writing)."""
        from filelock import FileLock, Timeout

        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        if wait is None:
            wait = self.lock_timeout if self.lock_timeout is not None else self.config.lock.wait
        check_flag("--wait", wait, (0, None))
        created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        lock_file = self.root / ".lock"
        try:
            try:
                lock = FileLock(str(lock_file), timeout=wait)
                lock.acquire()
            except Timeout as exc:
                raise WorkFailed(f"another rag process is writing to {self.root}{self._holder()}; "
                                 f"wait for it to finish and try again, or give --wait SECONDS "
                                 f"(config lock.wait; waited {wait:g} s)") from exc
            try:
                self.manifest()  # a damaged manifest.json fails now, before any output is written
                self._write_holder(command)
                self.remove_leftovers()
                self._lock_depth = 1
                yield
            finally:
                self._lock_depth = 0
                (self.root / ".lock.json").unlink(missing_ok=True)
                lock.release()
        except BaseException:
            if created:
                for name in (".lock", ".manifest.json.lock"):  # the locks of this folder and of manifest.json
                    (self.root / name).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    self.root.rmdir()
            raise

    @contextlib.contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Commit the writes of the block all or none (call under the lock):
        when the block raises anything (Ctrl-C included), every file of
        `SAVEPOINT_FILES` is put back as it was before (a file that did not
        exist is removed), the index generations, vector cache parts and the
        index/ and cache/ folders created in the block are removed, and the
        exception goes on.
        The old files are kept as hard links in `.savepoint/` (copies where
        the file system has no hard links) while the block runs."""
        import shutil

        save = self.root / SAVEPOINT
        shutil.rmtree(save, ignore_errors=True)  # a killed writer's
        save.mkdir(parents=True)
        kept: dict[str, Path | None] = {}
        for name in SAVEPOINT_FILES:
            src, dst = self.root / name, save / name.replace("/", "_")
            if src.is_file():
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copy2(src, dst)
                kept[name] = dst
            else:
                kept[name] = None
        folders = {d: (self.root / d).exists() for d in ("index", "cache")}
        gens = {p.name for p in self.index_dir.glob("gen-*")}
        parts = set(self.root.glob("cache/vectors/*/*"))
        try:
            yield
        except BaseException:
            for name, saved in kept.items():
                if saved is None:
                    (self.root / name).unlink(missing_ok=True)
                else:
                    os.replace(saved, self.root / name)
            for p in self.index_dir.glob("gen-*"):
                if p.name not in gens:
                    shutil.rmtree(p, ignore_errors=True)
            for p in set(self.root.glob("cache/vectors/*/*")) - parts:  # vector cache parts written in the block
                with contextlib.suppress(OSError):
                    p.unlink()
            for d, existed in folders.items():
                if not existed:
                    shutil.rmtree(self.root / d, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(save, ignore_errors=True)

    def remove_leftovers(self) -> list[Path]:
        """Remove the temporary files a killed writer left: those of
        `WRITER_OUTPUTS` and of `.lock.json` (written by the lock holder
        only, so an old one is a killed writer's) in the project folder and the unfinished part files
        of the vector cache (`cache/vectors/*/.part-*.tmp`). Call under the
        lock (`writing` does). Unfinished index generations are removed by
        the index writer (`clean_index_dir`). Returns the files removed."""
        found = [p for name in (*WRITER_OUTPUTS, ".lock.json") for p in self.root.glob(f".{name}.*.tmp")]
        found += self.root.glob("cache/vectors/*/.part-*.tmp")
        removed = []
        for p in found:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                p.unlink()
                removed.append(p)
        return removed

    def _write_holder(self, command: str) -> None:
        from rag_cli import atomic

        atomic.write_text(self.root / ".lock.json", json.dumps(
            {"pid": os.getpid(), "command": command,
             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))

    def _holder(self) -> str:
        """` (pid P, `rag COMMAND`, since TIME)` from .lock.json, or "" if unknown."""
        try:
            h = json.loads((self.root / ".lock.json").read_text(encoding="utf-8"))
            return f" (pid {h['pid']}, `rag {h['command']}`, since {h['started']})"
        except (OSError, ValueError, KeyError, TypeError):
            return ""
