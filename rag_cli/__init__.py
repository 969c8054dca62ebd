"""rag-cli: retrieval-augmented generation in the shell."""

__version__ = "0.1.0"
