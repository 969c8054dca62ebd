"""Load the configured models: the bi-encoder and the cross-encoder of a `[model]` config."""

from __future__ import annotations

from pathlib import Path

from rag_cli.errors import BadInput
from rag_cli.models.api_embedder import is_api_embedder


def _tokenizer_folder(model_cfg: dict) -> dict:
    """`model_cfg` with the default model as the embedder when it names a server (its tokenizer counts
    the tokens of an `openai:` embedder)."""
    from rag_cli.models.defaults import DEFAULT_MODEL

    return {**model_cfg, "embedder": DEFAULT_MODEL} if is_api_embedder(model_cfg["embedder"]) else model_cfg


def load_api_embedder(model_cfg: dict):
    """The `ApiEmbedder` of an `openai:MODEL` embedder (settings: see `ModelConfig`). Nothing is sent
    to the server until its first use. Raises BadInput for an empty model name or an unset key variable."""
    from rag_cli.models.api_embedder import PREFIX, ApiEmbedder
    from rag_cli.models.defaults import ensure_default_model

    name = str(model_cfg["embedder"])[len(PREFIX):]
    if not name:
        raise BadInput(f"--model {model_cfg['embedder']!r}: name the server's model after {PREFIX}, "
                       f"e.g. {PREFIX}text-embedding-3-small (config model.embedder)")
    c = model_cfg
    return ApiEmbedder(name, c["base_url"], api_key_env=c["api_key_env"], query_model=c["query_model"],
                       query_prefix=c["query_prefix"], passage_prefix=c["passage_prefix"], batch=c["api_batch"],
                       batch_tokens=c["api_batch_tokens"], timeout=c["api_timeout"], max_retries=c["api_retries"],
                       max_length=c["api_max_length"],
                       tokenizer_path=str(ensure_default_model() / "tokenizer.json"))


def load_embedder(model_cfg: dict, on_ray: bool = False):
    """The `[model]` config's bi-encoder as a `BiEncoder` (a default is converted on first use),
    on the config's execution provider (`provider`: cpu, cuda, coreml).

    `model_cfg` is a mapping with embedder, precision, threads, provider.
    `on_ray`: the passages are embedded by Ray's actors, which check the
    provider on their nodes (`rag_cli.models.ray_encoder`); this process
    only checks that the provider is a known name, and its own session (the
    output size, the query graph check) runs on the CPU.
    Raises BadInput for a bad precision or provider, or a missing model.
    An `openai:MODEL` embedder is an `ApiEmbedder` over the server at
    `base_url` (`rag_cli.models.api_embedder`; `on_ray` does not apply to it).
    """
    if is_api_embedder(model_cfg["embedder"]):
        return load_api_embedder(model_cfg)
    from rag_cli.models.defaults import resolve_model
    from rag_cli.models.encoder import BiEncoder
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.onnx_runtime import PROVIDERS, execution_providers

    providers = execution_providers(model_cfg.get("provider") or "cpu", here=not on_ray)
    if on_ray:
        providers = [PROVIDERS["cpu"]]
    if model_cfg.get("precision") not in ("int8", "fp32"):
        raise BadInput(f"--precision {model_cfg.get('precision')!r}: use int8 or fp32")
    ref = resolve_model(str(model_cfg["embedder"]), precision=model_cfg["precision"])
    folder = ModelFolder.load(ref.folder, onnx_file=ref.onnx_file)
    return BiEncoder(folder, threads=model_cfg.get("threads") or None, providers=providers)


def check_embedder(model_cfg: dict) -> None:
    """Check the `[model]` config's bi-encoder without loading an ONNX session: the
    precision, the folder (or default name) and its files (`ModelFolder.load`), so a
    multi-stage command fails before it writes anything. Raises BadInput as `load_embedder`.
    An `openai:MODEL` embedder is checked as `load_api_embedder` checks it (its name, its key variable);
    the server is first reached by the embedding itself."""
    if is_api_embedder(model_cfg["embedder"]):
        load_api_embedder(model_cfg)
        return
    from rag_cli.models.defaults import resolve_model
    from rag_cli.models.folder import ModelFolder

    if model_cfg.get("precision") not in ("int8", "fp32"):
        raise BadInput(f"--precision {model_cfg.get('precision')!r}: use int8 or fp32")
    ref = resolve_model(str(model_cfg["embedder"]), precision=model_cfg["precision"])
    ModelFolder.load(ref.folder, onnx_file=ref.onnx_file)


def load_cross_encoder(name_or_dir: str, threads: int = 0, provider: str = "cpu"):
    """A cross-encoder model folder, or the Hugging Face id of one fetched by
    `rag models pull`, as a `CrossEncoder` on `provider` (cpu, cuda, coreml).

    Raises BadInput for a missing folder or a provider onnxruntime lacks.
    """
    from rag_cli.models.cross_encoder import CrossEncoder
    from rag_cli.models.defaults import pulled_model_dir
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.onnx_runtime import execution_providers

    providers = execution_providers(provider)
    pulled = None if Path(name_or_dir).expanduser().is_dir() else pulled_model_dir(str(name_or_dir))
    folder = ModelFolder.load(pulled or name_or_dir)
    return CrossEncoder(folder, threads=threads or None, providers=providers)


def load_embedder_tokenizer(model_cfg: dict):
    """The `tokenizers.Tokenizer` of the configured bi-encoder (chunk sizes in
    tokens are in its tokens), without loading any ONNX session."""
    from rag_cli.models.defaults import resolve_model
    from rag_cli.models.tokens import load_tokenizer

    ref = resolve_model(str(_tokenizer_folder(model_cfg)["embedder"]), precision=model_cfg["precision"])
    return load_tokenizer(Path(ref.folder) / "tokenizer.json")


def embedder_token_room(model_cfg: dict) -> tuple[int, int] | None:
    """(max_length, room) of the configured bi-encoder, in tokens: room is
    max_length less the tokens the model adds to every passage (special
    tokens and `passage_prefix`), i.e. the longest chunk text it embeds
    whole. None when the folder cannot say (it is then refused by `rag embed`,
    not here). Loads the folder's JSON files and tokenizer, no ONNX session."""
    from rag_cli.models.defaults import resolve_model
    from rag_cli.models.folder import ModelFolder
    from rag_cli.models.tokens import count_tokens

    if is_api_embedder(model_cfg["embedder"]):
        from rag_cli.models.defaults import ensure_default_model

        added = int(count_tokens(ensure_default_model() / "tokenizer.json", [""], model_cfg["passage_prefix"])[0])
        return model_cfg["api_max_length"], model_cfg["api_max_length"] - added
    try:
        ref = resolve_model(str(model_cfg["embedder"]), precision=model_cfg["precision"])
        folder = ModelFolder.load(ref.folder, onnx_file=ref.onnx_file)
    except BadInput:
        return None
    added = int(count_tokens(folder, [""], folder.passage_prefix)[0])
    return folder.max_length, folder.max_length - added
