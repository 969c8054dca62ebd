"""Document loaders: one reader per format, and `load_sources` to read files,
folders and globs into `Document` records.

Public API::

    load_sources(sources, *, fmt="auto", encoding=None) -> LoadResult   # .documents, .skipped, .warnings
    iter_sources(sources, *, fmt="auto", encoding=None)  # Document | Skipped, one at a time
    normalize_text(s) -> str                              # also for queries
    Document, Skipped, LoadResult
"""

from .decode import DecodeFailed, decode_bytes
from .document import Document, LoadResult, Skipped
from .normalize import normalize_text
from .sources import EXTENSIONS, FORMATS, iter_sources, load_file, load_sources
from .beir import read_beir_corpus

__all__ = [
    "Document", "LoadResult", "Skipped", "normalize_text", "decode_bytes", "DecodeFailed",
    "load_sources", "iter_sources", "load_file", "read_beir_corpus", "FORMATS", "EXTENSIONS",
]
