"""The server file (serve.toml: the collections one `rag serve` serves) and
the key file (keys.toml: which key may read which collection, and through
which fixed filter). Parsed with tomllib; every problem is BadInput naming
the file and the line (`path:LINE: ...`, exit 2).

Server file::

    [server]                       # optional: server-wide [serve] keys
    port = 8765                    #   host, port, api_key_env, max_body, max_concurrent
    keys = "keys.toml"             #   optional: the key file (relative to this file)

    [collections.finance]          # one table per collection; the name: letters, digits, _ . -
    folder = "/srv/rag/finance"    # its project folder (relative to this file)
    max_k = 50                     # optional per-collection [serve] keys: max_k, log,
    log = true                     #   query_graph, reload_poll

    [keys.contractor]              # optional: the keys here instead of a key file
    ...

Key file (or the `[keys.*]` tables of the server file)::

    [keys.alice]                   # a name, for the messages and the notes (never the key)
    sha256 = "9f86d08..."          # the key's sha256 (hex) ...
    collections = ["finance", "eng"]

    [keys.contractor]
    env = "RAG_KEY_CONTRACTOR"     # ... or the environment variable holding it (hashed when read)
    collections = ["eng"]
    filter = { eng = "path=public/*" }   # per collection: one expression or a list (AND)

A key is never kept in plain text: a key read from the environment is
hashed at once, and a request's key is hashed and compared with every key's
sha256 in constant time (`hmac.compare_digest`, all of them, whichever
matches). `collections = ["*"]` is every collection served.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rag_cli.errors import BadInput

#: [serve] keys a collection's table may set (the others are the server's).
PER_COLLECTION = ("max_k", "log", "query_graph", "reload_poll")
#: [serve] keys of the [server] table.
SERVER_WIDE = ("host", "port", "api_key_env", "max_body", "max_concurrent")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class CollectionSpec:
    """One served collection: `name`, project `folder`, its [serve] `options` (PER_COLLECTION keys),
    and where it was declared (`where`: "serve.toml:12" or "--collection")."""

    name: str
    folder: Path
    options: dict = field(default_factory=dict)
    where: str = "--collection"


@dataclass(frozen=True)
class Access:
    """What a request may read: `collections` {name: scope expressions (a tuple, () = no scope)}, or
    None for every collection without a scope (no key file, or the --api-key-env key). `name`: the key's."""

    name: str | None = None
    collections: dict | None = None

    def may_read(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    def scope(self, collection: str) -> tuple[str, ...]:
        """The fixed filter expressions of `collection` (AND; () = none)."""
        return () if self.collections is None else tuple(self.collections.get(collection, ()))


#: Every collection, no scope.
EVERYTHING = Access()


@dataclass(frozen=True)
class KeySpec:
    """One key: `name`, `sha256` (hex of the key), `access` (its `Access`), `where` ("keys.toml:4"), and
    `filter_where` (the line of its filter, or `where`)."""

    name: str
    sha256: str
    access: Access
    where: str
    filter_where: str | None = None


class KeySet:
    """The keys a server accepts. `match(key)` -> the key's `Access`, or None for an unknown key."""

    def __init__(self, keys: Iterable[KeySpec] = ()):
        self.keys = list(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def match(self, given: bytes | str) -> Access | None:
        """The `Access` of the key `given` (as the client sent it, stripped), compared in constant time with
        every key's sha256; None when none matches (or it is empty)."""
        if isinstance(given, str):
            given = given.encode("utf-8", "surrogateescape")
        given = given.strip()
        digest = hashlib.sha256(given).hexdigest().encode()
        found = None
        for key in self.keys:  # every key is compared: the time does not depend on which one matched
            if hmac.compare_digest(digest, key.sha256.encode()) and found is None:
                found = key.access
        return found if given else None


# ------------------------------------------------------------------------------------- lines
def line_of(text: str, table: str, key: str | None = None) -> int | None:
    """The 1-based line of `[table]` (dotted, e.g. "keys.alice") in TOML `text`, or of `key = ` inside
    it when `key` is given (the table's line when the key is not found); None when the table is not
    written as a header (an inline table)."""
    parts = table.split(".")
    header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(
        rf"(?:{re.escape(p)}|\"{re.escape(p)}\"|'{re.escape(p)}')" for p in parts) + r"\s*\]\s*(#.*)?$")
    prefix = re.compile(header.pattern.replace(r"\s*\]\s*(#.*)?$", r"\s*\."))  # [table.sub] of a table never written
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if header.match(line):
            if key is None:
                return i + 1
            keyline = re.compile(rf"^\s*(?:{re.escape(key)}|\"{re.escape(key)}\")\s*[=.]")
            for j in range(i + 1, len(lines)):
                if re.match(r"^\s*\[", lines[j]):
                    break
                if keyline.match(lines[j]):
                    return j + 1
            return i + 1
    if key is None:
        found = next((i + 1 for i, line in enumerate(lines) if prefix.match(line)), None)
        if found is not None:
            return found
    if len(parts) > 1:  # a table inline in its parent: the parent's key line
        return line_of(text, ".".join(parts[:-2]), parts[-1]) if len(parts) > 2 else \
            next((i + 1 for i, line in enumerate(lines) if re.match(rf"^\s*{re.escape(parts[-1])}\s*=", line)), None)
    return None


def _where(path: Path, text: str, table: str, key: str | None = None) -> str:
    line = line_of(text, table, key)
    return f"{path}:{line}" if line is not None else str(path)


def read_toml(path: str | os.PathLike) -> tuple[dict, str]:
    """(parsed, text) of a TOML file. BadInput naming the file (and the line, for a syntax error)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot be read ({exc})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise BadInput(f"{path}{':' + m.group(1) if m else ''}: not valid TOML ({exc})") from None


# ------------------------------------------------------------------------------------- collections
def collection_options(values: Iterable[str]) -> list[CollectionSpec]:
    """`--collection NAME=DIR` values -> specs. BadInput naming the value (no `=`, a bad or repeated name)."""
    specs: list[CollectionSpec] = []
    for value in values:
        name, eq, folder = value.partition("=")
        name, folder = name.strip(), folder.strip()
        if not eq or not folder:
            raise BadInput(f"--collection {value!r}: give NAME=DIR (e.g. --collection finance=/srv/rag/finance)")
        _check_name(name, f"--collection {value!r}")
        if any(s.name == name for s in specs):
            raise BadInput(f"--collection {value!r}: the collection {name!r} is given twice")
        specs.append(CollectionSpec(name, Path(folder).expanduser()))
    return specs


def _check_name(name: str, where: str) -> None:
    if not NAME.match(name):
        raise BadInput(f"{where}: the collection name {name!r} must be 1 to 64 letters, digits, _ . - "
                       "(not starting with . or -)")


@dataclass
class ServerFile:
    """A parsed server file: `collections` (specs), `server` ({[serve] key: value}), `keys_path` (the key
    file it names, or None), `keys` (its own [keys] tables as a KeySet, or None), `path`."""

    path: Path
    collections: list[CollectionSpec]
    server: dict
    keys_path: Path | None
    keys: KeySet | None


def read_server_file(path: str | os.PathLike, environ: dict | None = None) -> ServerFile:
    """Parse a server file (module docstring). BadInput `path:LINE: ...` for a syntax error, an unknown
    table or key, a collection without a folder, a bad name or a bad [serve] value, and as `parse_keys`
    for its [keys] tables. Folders are not opened here (`check_collections`)."""
    from rag_cli.config import ServeConfig, check_setting

    path = Path(path)
    data, text = read_toml(path)
    base = path.parent
    unknown = sorted(set(data) - {"server", "collections", "keys"})
    if unknown:
        raise BadInput(f"{_where(path, text, unknown[0])}: unknown table [{unknown[0]}]; a server file has "
                       "[server], [collections.NAME] and [keys.NAME]")
    server = data.get("server", {})
    if not isinstance(server, dict):
        raise BadInput(f"{path}: server must be a table ([server])")
    keys_path = None
    for key, value in server.items():
        where = _where(path, text, "server", key)
        if key == "keys":
            if not isinstance(value, str) or not value.strip():
                raise BadInput(f"{where}: server.keys must be the path of a key file")
            keys_path = (base / Path(value).expanduser())
            continue
        if key not in SERVER_WIDE:
            raise BadInput(f"{where}: unknown key server.{key}; the [server] keys are "
                           f"{', '.join(SERVER_WIDE)}, keys")
        _checked(where, check_setting, "serve", key, value)
    collections = data.get("collections", {})
    if not isinstance(collections, dict) or not collections:
        raise BadInput(f"{path}: no collection; add a table [collections.NAME] with folder = \"DIR\"")
    specs = []
    for name, table in collections.items():
        where = _where(path, text, f"collections.{name}")
        _check_name(name, where)
        if not isinstance(table, dict):
            raise BadInput(f"{where}: collections.{name} must be a table with folder = \"DIR\"")
        folder = table.get("folder")
        if not isinstance(folder, str) or not folder.strip():
            raise BadInput(f"{where}: collection {name!r} has no folder; add folder = \"DIR\" (its project folder)")
        options = {}
        for key, value in table.items():
            if key == "folder":
                continue
            kwhere = _where(path, text, f"collections.{name}", key)
            if key not in PER_COLLECTION:
                known = ", ".join(("folder",) + PER_COLLECTION)
                raise BadInput(f"{kwhere}: unknown key {key!r} of collection {name!r}; its keys are {known}"
                               + (" (that one is the server's: put it in [server])" if key in SERVER_WIDE else ""))
            _checked(kwhere, check_setting, "serve", key, value)
            options[key] = value
        specs.append(CollectionSpec(name, (base / Path(folder).expanduser()), options, where))
    assert ServeConfig  # the keys checked are ServeConfig's
    keys = parse_keys(data["keys"], path, text, environ) if "keys" in data else None
    if keys is not None and keys_path is not None:
        raise BadInput(f"{_where(path, text, 'server', 'keys')}: give the keys either in [keys.NAME] tables "
                       "of the server file or in the key file that server.keys names, not both")
    return ServerFile(path, specs, {k: v for k, v in server.items() if k != "keys"}, keys_path, keys)


def _checked(where: str, check, *args) -> None:
    try:
        check(*args)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc}") from None


# ------------------------------------------------------------------------------------- keys
def read_key_file(path: str | os.PathLike, environ: dict | None = None) -> KeySet:
    """Parse a key file (module docstring). BadInput `path:LINE: ...` as `parse_keys`."""
    path = Path(path)
    data, text = read_toml(path)
    unknown = sorted(set(data) - {"keys"})
    if unknown:
        raise BadInput(f"{_where(path, text, unknown[0])}: unknown table or key {unknown[0]!r}; a key file has "
                       "[keys.NAME] tables")
    return parse_keys(data.get("keys", {}), path, text, environ)


def parse_keys(tables: Any, path: Path, text: str, environ: dict | None = None) -> KeySet:
    """The [keys.NAME] tables -> KeySet. BadInput `path:LINE: ...` for a key with neither or both of sha256
    and env, a sha256 that is not 64 lower-case hex digits, an env variable unset or empty, no collections,
    a filter for a collection the key may not read, a filter that does not parse, and a key given twice
    (the same sha256 under two names)."""
    from rag_cli.index.filters import parse

    environ = os.environ if environ is None else environ
    if not isinstance(tables, dict):
        raise BadInput(f"{path}: keys must be tables [keys.NAME]")
    keys: list[KeySpec] = []
    seen: dict[str, str] = {}
    for name, table in tables.items():
        where = _where(path, text, f"keys.{name}")
        if not isinstance(table, dict):
            raise BadInput(f"{where}: keys.{name} must be a table with sha256 or env, and collections")
        unknown = sorted(set(table) - {"sha256", "env", "collections", "filter"})
        if unknown:
            raise BadInput(f"{_where(path, text, f'keys.{name}', unknown[0])}: unknown key {unknown[0]!r} of key "
                           f"{name!r}; its keys are sha256 or env, collections, filter")
        if ("sha256" in table) == ("env" in table):
            raise BadInput(f"{where}: key {name!r} needs exactly one of sha256 = \"HEX\" (the key's sha256) or "
                           "env = \"NAME\" (the environment variable holding it); the key itself is never "
                           "written here")
        if "sha256" in table:
            digest = table["sha256"]
            if not isinstance(digest, str) or not SHA256.match(digest.strip().lower()):
                raise BadInput(f"{_where(path, text, f'keys.{name}', 'sha256')}: sha256 of key {name!r} must be 64 "
                               "hex digits (printf %s KEY | sha256sum)")
            digest = digest.strip().lower()
        else:
            var = table["env"]
            ewhere = _where(path, text, f"keys.{name}", "env")
            if not isinstance(var, str) or not ENV.match(var):
                raise BadInput(f"{ewhere}: env of key {name!r} must be the name of an environment variable")
            value = environ.get(var, "").strip()
            if not value:
                raise BadInput(f"{ewhere}: the environment variable {var} (key {name!r}) is not set or empty")
            digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()
        if digest in seen:
            raise BadInput(f"{where}: key {name!r} is the same key as {seen[digest]!r}; give each key once")
        seen[digest] = name
        cols = table.get("collections")
        cwhere = _where(path, text, f"keys.{name}", "collections")
        if isinstance(cols, str):
            cols = [cols]
        if not isinstance(cols, list) or not cols or not all(isinstance(c, str) and c for c in cols):
            raise BadInput(f"{cwhere}: key {name!r} needs collections = [\"NAME\", ...] (the collections it may "
                           "read; [\"*\"] for every one)")
        filters = table.get("filter", {})
        fwhere = _where(path, text, f"keys.{name}", "filter")
        if not isinstance(filters, dict):
            raise BadInput(f"{fwhere}: filter of key {name!r} must be a table {{COLLECTION = \"EXPR\" or "
                           "[\"EXPR\", ...]}")
        access: dict[str, tuple[str, ...]] | None = {c: () for c in cols}
        if "*" in cols:
            if len(cols) > 1 or filters:
                raise BadInput(f"{cwhere}: key {name!r}: collections = [\"*\"] is every collection, without a "
                               "filter; list the collections to give them filters")
            access = None
        for coll, exprs in filters.items():
            if coll not in cols:
                raise BadInput(f"{fwhere}: key {name!r} has a filter for {coll!r}, which is not one of its "
                               f"collections ({', '.join(cols)})")
            exprs = [exprs] if isinstance(exprs, str) else exprs
            if not isinstance(exprs, list) or not exprs or not all(isinstance(e, str) for e in exprs):
                raise BadInput(f"{fwhere}: filter {coll} of key {name!r} must be an expression or a list of them")
            for e in exprs:
                try:
                    parse(e)
                except BadInput as exc:
                    raise BadInput(f"{fwhere}: key {name!r}, collection {coll!r}: {exc}") from None
            access[coll] = tuple(exprs)
        keys.append(KeySpec(name, digest, Access(name, access), where, fwhere if filters else where))
    return KeySet(keys)


# ------------------------------------------------------------------------------------- checks
def check_collections(specs: list[CollectionSpec], keys: KeySet | None) -> list[str]:
    """What `rag serve --check` reports, beyond what parsing found: each collection's folder is a project
    with a current index generation, no two collections share a folder, each key's collections are served,
    and each scope filter names fields of its collection's index. Returns the notes for a valid set;
    raises BadInput naming the place (`where` of the collection or the key) of the first problem."""
    from rag_cli.index.filters import chunk_mask
    from rag_cli.index.generation import IndexFolder
    from rag_cli.store.folder import ProjectFolder

    notes, opened, folders = [], {}, {}
    for spec in specs:
        resolved = spec.folder.resolve()
        if resolved in folders:
            raise BadInput(f"{spec.where}: collection {spec.name!r} has the folder of {folders[resolved]!r} "
                           f"({spec.folder}); serve a folder once")
        folders[resolved] = spec.name
        try:
            folder = ProjectFolder.at(spec.folder)
            folder.require_exists()
            index = IndexFolder.open(folder.index_dir, folder.root, ())
        except BadInput as exc:
            raise BadInput(f"{spec.where}: collection {spec.name!r}: {exc}") from None
        opened[spec.name] = index
        notes.append(f"collection {spec.name}: {spec.folder} ({index.path.name}, {index.chunks.num_rows} chunks)")
    for key in (keys.keys if keys is not None else []):
        for coll in (key.access.collections or {}):
            if coll not in opened:
                raise BadInput(f"{key.where}: key {key.name!r} names the collection {coll!r}, which is not served "
                               f"(served: {', '.join(opened)})")
            scope = key.access.scope(coll)
            if scope:
                index = opened[coll]
                try:
                    chunk_mask(list(scope), index.chunks, index.docs)
                except BadInput as exc:
                    raise BadInput(f"{key.filter_where or key.where}: key {key.name!r}, collection {coll!r}: "
                                   f"{exc}") from None
        notes.append(f"key {key.name}: " + ("every collection" if key.access.collections is None else
                     ", ".join(f"{c}" + (f" ({' AND '.join(key.access.scope(c))})" if key.access.scope(c) else "")
                               for c in key.access.collections)))
    return notes
