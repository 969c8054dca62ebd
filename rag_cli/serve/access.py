"""Who may connect: a server bound to loopback answers anyone on this
machine; one bound to another address needs an API key, read from the
environment variable that serve.api_key_env names (never from rag.toml or
the command line, where other users could read it). With a key set, it is
required on loopback too. The key is compared in constant time
(`hmac.compare_digest`, in `rag_cli.serve.app.Guard`)."""

from __future__ import annotations

import hmac
import ipaddress
import os

from rag_cli.errors import BadInput


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_key(config) -> str | None:
    """The API key clients must send: the value of the environment variable
    named by serve.api_key_env, or None when none is named and the host is
    loopback. Raises BadInput for another host without one, or a variable
    that is not set or empty (before anything is loaded or bound)."""
    name = config.api_key_env
    if not name:
        if is_loopback(config.host):
            return None
        raise BadInput(f"--host {config.host} is not a loopback address: anyone who can reach it could query the "
                       "index, so it needs an API key: put one in an environment variable and name it with "
                       "--api-key-env NAME (config serve.api_key_env)")
    key = os.environ.get(name, "")
    if not key.strip():
        raise BadInput(f"--api-key-env {name}: the environment variable {name} is not set or empty; set it to the "
                       "key clients will send")
    return key.strip()


class KeyRing:
    """The keys a server with a key file accepts: the `KeySet` of the key file at `path` (reloaded by
    `reload()`: on SIGHUP, and by `poll()` when its mtime, size or inode changes) or the fixed `keys` of the
    server file, and the --api-key-env key `api_key` (every collection, no scope). A key file that cannot be
    read or is malformed keeps the keys loaded before; `error` says why (also told to `say`), until a
    reload succeeds. `served` (collection names) are the names a key may list."""

    def __init__(self, path=None, keys=None, api_key: str | None = None, served=(), say=None, environ=None):
        from rag_cli.serve.server_file import KeySet

        self.path, self.api_key, self.served = path, api_key, tuple(served)
        self.say = say or (lambda message: None)
        self.environ = environ
        self.keys = keys if keys is not None else KeySet()
        self.error: str | None = None
        self.n_reloads = 0
        self._stamp = None
        if path is not None:
            self.keys = self._read()  # BadInput at start: the server does not start with a bad key file
            self._stamp = self._stat()

    def _stat(self):
        import os

        try:
            st = os.stat(self.path)
            return st.st_mtime_ns, st.st_size, st.st_ino
        except OSError:
            return None

    def _read(self):
        from rag_cli.errors import BadInput
        from rag_cli.serve.server_file import read_key_file

        keys = read_key_file(self.path, self.environ)
        for key in keys.keys:
            unknown = [c for c in (key.access.collections or {}) if c not in self.served]
            if unknown:
                raise BadInput(f"{key.where}: key {key.name!r} names the collection {unknown[0]!r}, which is not "
                               f"served (served: {', '.join(self.served)})")
        return keys

    def reload(self) -> bool:
        """Read the key file again; True when the new keys are in use. On failure the old keys stay, and
        `error` (and `say`) says why."""
        from rag_cli.errors import RagError

        if self.path is None:
            return False
        self._stamp = self._stat()
        try:
            keys = self._read()
        except RagError as exc:
            self.error = f"the key file could not be reloaded, so the keys loaded before stay: {exc}"
            self.say(self.error)
            return False
        self.keys, self.error = keys, None
        self.n_reloads += 1
        self.say(f"keys reloaded from {self.path}: {len(keys)} key{'s' * (len(keys) != 1)}")
        return True

    def poll(self) -> None:
        """`reload()` when the key file changed since it was last read."""
        if self.path is not None and self._stat() != self._stamp:
            self.reload()

    def authenticate(self, given: bytes | None):
        """The `Access` of the key `given` (None: no key sent), or None for a missing or unknown key."""
        if given is None:
            return None
        given = given.strip()
        access = self.keys.match(given)
        if self.api_key is not None and hmac.compare_digest(given, self.api_key.encode()) and access is None:
            from rag_cli.serve.server_file import EVERYTHING

            return EVERYTHING
        return access
