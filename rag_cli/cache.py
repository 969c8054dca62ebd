"""Where rag-cli keeps what it can rebuild: converted models, the query vocabularies of
`rag_cli.models.query_tokens`, the file-hash cache. A leaf module (it imports nothing of rag_cli)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``$RAG_CACHE`` if set and non-empty, else ``~/.cache/rag-cli``.

    Models live under ``cache_dir() / "models"``. The folder is not created.
    """
    env = os.environ.get("RAG_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rag-cli"
