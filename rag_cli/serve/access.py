"""Who may connect: a server bound to loopback answers anyone on this
machine; one bound to another address needs an API key, read from the
environment variable that serve.api_key_env names (never from rag.toml or
the command line, where other users could read it). With a key set, it is
required on loopback too. The key is compared in constant time
(`hmac.compare_digest`, in `rag_cli.serve.app.Guard`)."""

from __future__ import annotations

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
