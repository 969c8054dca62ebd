"""The configured generator of `rag ask`."""

from __future__ import annotations

from rag_cli.errors import BadInput

GENERATORS = ("extractive", "openai", "llama-cpp")


def load_generator(ask_cfg, embedder, sparse, gen_cfg=None, threads: int = 0, model_flag: str = "--llm-model"):
    """The generator named by the `[ask]` config (`AskConfig`): `extractive`
    (offline, quotes the evidence), `openai` (an OpenAI-compatible server) or
    `llama-cpp` (a local GGUF), the last two set up by the `[generator]`
    config `gen_cfg` (`GeneratorConfig`; None = the defaults).

    `embedder` is the index's `BiEncoder`, `sparse` its `SparseIndex`;
    `threads` the CPU cores for llama-cpp (0 = its choice); `model_flag` the
    flag that gave `gen_cfg.model` (named when its GGUF file is missing).
    Raises BadInput for an unknown generator or a missing optional package.
    """
    from rag_cli.config import GeneratorConfig

    gen_cfg = gen_cfg or GeneratorConfig()
    if ask_cfg.generator not in GENERATORS:
        raise BadInput(f"generator {ask_cfg.generator!r} is unknown; use one of {', '.join(GENERATORS)}")
    if ask_cfg.generator in ("openai", "llama-cpp"):
        from rag_cli.generate.prompt import load_template

        template = load_template(ask_cfg.prompt)
    if ask_cfg.generator == "openai":
        from rag_cli.generate.openai_server import OpenAIGenerator

        return OpenAIGenerator(gen_cfg.base_url, gen_cfg.model, api=gen_cfg.api, api_key_env=gen_cfg.api_key_env,
                               timeout=gen_cfg.timeout, max_retries=gen_cfg.max_retries,
                               temperature=gen_cfg.temperature, max_tokens=gen_cfg.max_tokens,
                               context_tokens=gen_cfg.context_tokens, template=template)
    if ask_cfg.generator == "llama-cpp":
        from rag_cli.generate.llama_cpp import LlamaCppGenerator

        return LlamaCppGenerator(gen_cfg.model, temperature=gen_cfg.temperature, max_tokens=gen_cfg.max_tokens,
                                 context_tokens=gen_cfg.context_tokens, threads=threads, model_flag=model_flag,
                                 template=template)
    from rag_cli.generate.extractive import ExtractiveGenerator
    from rag_cli.index.sparse import analyze

    # the sentences are compared with the question's vector: both from the query graph when the
    # model has one (already loaded for the question, and float32-close; `BiEncoder.query_encoder`)
    return ExtractiveGenerator(
        lambda q: embedder.encode_queries([q])[0],
        lambda ps: embedder.query_encoder.encode_passages(ps),
        analyze, sparse.idf,
        max_sentences=ask_cfg.max_sentences,
    )


def describe_generator(gen) -> dict:
    """Which model a generator is, for reports: {"generator": name, "model":
    ...}, with "base_url", "api" and "server_model" (the model id the server
    reported in its first answer, None before one) for `openai` ("model" is
    the name sent, else that id), and the GGUF "file" name and the first 12
    hex digits of its "sha256" for `llama-cpp`."""
    if gen.name == "openai":
        server_model = getattr(gen, "server_model", None)
        return {"generator": "openai", "base_url": gen.base_url,
                "model": gen.model or server_model or "(the server's)", "api": gen.api, "server_model": server_model}
    if gen.name == "llama-cpp":
        import hashlib

        h = hashlib.sha256()
        with open(gen.path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return {"generator": "llama-cpp", "model": gen.path.name, "file": str(gen.path),
                "sha256": h.hexdigest()[:12]}
    return {"generator": gen.name}
