"""The keyword arguments of `chunk_with_parents` for a `[chunk]` config, shared
by `rag chunk` and `rag update`."""

from __future__ import annotations

from typing import Any

from rag_cli.chunking.units import validate
from rag_cli.config import ChunkConfig, ModelConfig


def chunk_options(params: ChunkConfig, model: ModelConfig) -> dict[str, Any]:
    """Check the chunk settings (BadInput naming the flag) and return the
    keyword arguments of `chunk_with_parents`: sizes in tokens load the
    configured bi-encoder's tokenizer (no ONNX session), `semantic` loads
    the bi-encoder to embed sentences; sizes in chars load nothing."""
    from rag_cli.models.loading import load_embedder, load_embedder_tokenizer

    options = check_chunk_options(params)
    options.update(strategy=params.strategy, size=params.size, overlap=params.overlap, unit=params.unit,
                   tokenizer=load_embedder_tokenizer(model.__dict__) if params.unit == "tokens" else None)
    if params.strategy == "semantic":
        options["embed"] = load_embedder(model.__dict__).encode_passages
    return options


def check_chunk_options(params: ChunkConfig) -> dict[str, Any]:
    """Check the chunk settings (BadInput naming the flag) without loading
    anything; returns the strategy-specific keyword arguments of `chunk_with_parents`."""
    options = {"context_sentences": params.context_sentences, "parent_size": params.parent_size,
               "breakpoint_percentile": params.breakpoint_percentile}
    validate(params.strategy, params.size, params.overlap, params.unit, tokenizer=True, **options)
    return options


def chunk_settings(params: ChunkConfig, model: ModelConfig, fmt: str, encoding: str | None = None) -> dict[str, Any]:
    """What the chunks depend on, as recorded in manifest.json: the `[chunk]`
    keys, the --format, the --encoding when one was forced, and the embedder
    when sizes are in tokens or the strategy is semantic (its tokenizer or
    vectors decide the cuts)."""
    uses_model = params.unit == "tokens" or params.strategy == "semantic"
    return dict(params.__dict__, format=fmt, **({"encoding": encoding} if encoding else {}),
                model=f"{model.embedder}:{model.precision}" if uses_model else None)
