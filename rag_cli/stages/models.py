"""Load the configured models: bi-encoder, cross-encoder, generator."""

from __future__ import annotations

from rag_cli.errors import BadInput


def load_embedder(model_cfg: dict):
    """The `[model]` config's bi-encoder as a `BiEncoder` (a default is converted on first use),
    on the config's execution provider (`provider`: cpu, cuda, coreml).

    Raises BadInput for a bad precision or provider, or a missing model.
    """
    from rag_cli.models.defaults import resolve_model
    from rag_cli.models.encoder import BiEncoder
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.onnx_runtime import execution_providers

    providers = execution_providers(model_cfg.get("provider") or "cpu")
    if model_cfg.get("precision") not in ("int8", "fp32"):
        raise BadInput(f"--precision {model_cfg.get('precision')!r}: use int8 or fp32")
    ref = resolve_model(str(model_cfg["embedder"]), precision=model_cfg["precision"])
    folder = ModelFolder.load(ref.folder, onnx_file=ref.onnx_file)
    return BiEncoder(folder, threads=model_cfg.get("threads") or None, providers=providers)


def load_cross_encoder(name_or_dir: str, threads: int = 0, provider: str = "cpu"):
    """A cross-encoder model folder, or the Hugging Face id of one fetched by
    `rag models pull`, as a `CrossEncoder` on `provider` (cpu, cuda, coreml).

    Raises BadInput for a missing folder or a provider onnxruntime lacks.
    """
    from pathlib import Path

    from rag_cli.models.cross_encoder import CrossEncoder
    from rag_cli.models.defaults import pulled_model_dir
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.onnx_runtime import execution_providers

    providers = execution_providers(provider)
    pulled = None if Path(name_or_dir).expanduser().is_dir() else pulled_model_dir(str(name_or_dir))
    folder = ModelFolder.load(pulled or name_or_dir)
    return CrossEncoder(folder, threads=threads or None, providers=providers)


def load_generator(ask_cfg: dict, embedder, sparse):
    """The `[ask]` config's generator. Only `extractive` exists so far.

    `embedder` is the index's `BiEncoder`, `sparse` its `SparseIndex`.
    """
    from rag_cli.generate.extractive import ExtractiveGenerator

    if ask_cfg["generator"] != "extractive":
        raise BadInput(f"generator {ask_cfg['generator']!r} is unknown; use extractive")
    # the sentences are compared with the question's vector: both from the query graph when the
    # model has one (already loaded for the question, and float32-close; `BiEncoder.query_encoder`)
    return ExtractiveGenerator(
        lambda q: embedder.encode_queries([q])[0],
        lambda ps: embedder.query_encoder.encode_passages(ps),
        sparse.coverage,
        max_sentences=ask_cfg["max_sentences"],
    )
