"""The dense backends, spelled once: `index.backend` -> where its `Backend` class lives and what it is.

The first is the default. `rag_cli.config` takes `index.backend`'s choices and help from here,
`rag_cli.index.backends` imports a backend's module when it is first used (so a search imports only its
own backend's libraries). Adding a backend is one module and one line here (docs/architecture.md)."""

#: name -> ("module:Class" of its `rag_cli.index.backends.Backend`, its help for `--backend`).
REGISTRY: dict[str, tuple[str, str]] = {
    "hnswlib": ("rag_cli.index.dense:DenseIndex", "HNSW in RAM"),
    "faiss": ("rag_cli.index.faiss_index:FaissIndex", "the faiss extra"),
    "exact": ("rag_cli.index.exact:ExactIndex", "brute force"),
    "milvus": ("rag_cli.index.milvus:MilvusIndex", "the milvus extra"),
}
#: The backend of a generation that records none, and of a new project.
DEFAULT = next(iter(REGISTRY))
