"""Content hashes of files and texts (hex sha256)."""

from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_size):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of `text`."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
