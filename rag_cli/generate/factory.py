"""The configured generator of `rag ask`."""

from __future__ import annotations

from rag_cli.errors import BadInput

GENERATORS = ("extractive",)


def load_generator(ask_cfg, embedder, sparse):
    """The generator named by the `[ask]` config (`AskConfig`). Only
    `extractive` exists so far.

    `embedder` is the index's `BiEncoder`, `sparse` its `SparseIndex`.
    Raises BadInput for an unknown generator.
    """
    from rag_cli.generate.extractive import ExtractiveGenerator

    if ask_cfg.generator not in GENERATORS:
        raise BadInput(f"generator {ask_cfg.generator!r} is unknown; use one of {', '.join(GENERATORS)}")
    # the sentences are compared with the question's vector: both from the query graph when the
    # model has one (already loaded for the question, and float32-close; `BiEncoder.query_encoder`)
    return ExtractiveGenerator(
        lambda q: embedder.encode_queries([q])[0],
        lambda ps: embedder.query_encoder.encode_passages(ps),
        sparse.coverage,
        max_sentences=ask_cfg.max_sentences,
    )
