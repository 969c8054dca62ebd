"""Document loaders: one reader per format, and `load_sources` to read files,
folders and globs into `Document` records.

Public API::

    load_sources(sources, *, fmt="auto", encoding=None) -> LoadResult   # .documents, .skipped, .warnings
    iter_sources(sources, *, fmt="auto", encoding=None)  # Document | Skipped, one at a time
    normalize_text(s) -> str                              # also for queries
    Document, Skipped, LoadResult
"""

import importlib

#: Public name -> the submodule that defines it, imported on first use (PEP 562), so that
#: `rag_cli.loaders.normalize` (which a search needs for queries) does not import every
#: reader (docs/startup.md).
_WHERE = {
    "DecodeFailed": "decode", "decode_bytes": "decode",
    "Document": "document", "LoadResult": "document", "Skipped": "document",
    "normalize_text": "normalize",
    "EXTENSIONS": "sources", "FORMATS": "sources", "iter_sources": "sources", "load_file": "sources",
    "load_sources": "sources",
    "read_beir_corpus": "beir",
}


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "Document", "LoadResult", "Skipped", "normalize_text", "decode_bytes", "DecodeFailed",
    "load_sources", "iter_sources", "load_file", "read_beir_corpus", "FORMATS", "EXTENSIONS",
]
