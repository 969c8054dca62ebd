"""rag-cli: retrieval-augmented generation in the shell.

The Python API is `Project` (see `rag_cli.project`)::

    from rag_cli import Project
    p = Project.open("my.rag")
    p.chunk(["docs/"]); p.embed(); p.index()
    hits = p.search("how does RRF work?", mode="hybrid", k=5)
"""

from rag_cli.version import __version__

__all__ = ["Project", "Config", "__version__"]


def __getattr__(name: str):
    # imported on first use, so `rag --help` and `import rag_cli` stay instant
    if name == "Project":
        from rag_cli.project import Project

        return Project
    if name == "Config":
        from rag_cli.config import Config

        return Config
    raise AttributeError(f"module 'rag_cli' has no attribute {name!r}")
