"""Command-line values coerced without pydantic where that is plainly exact.

typer (0.29 and later) coerces every parameter of the invoked command through a pydantic
`TypeAdapter` built on first use (`typer._coercion.build_runtime_param`), so any command, even
`rag search` with a one-word query, imports pydantic and builds a dozen adapters (its cost:
docs/startup.md). `install()` wraps that function: a parameter whose annotation is `str`,
`int`, `float`, `pathlib.Path`, `bool`, one of these or None, or a `list` of one of them, with
no typer option that changes its coercion (a `parser`, `min`/`max`/`clamp`, path checks), gets
a `_Fast` runtime parameter that returns the value typer's own adapter would give for the plain
cases:

- str: a str value, unchanged (the adapter's `_parse_cli_str` returns `str(value)`);
- int: a str of ASCII digits with an optional sign -> `int(value)`; an int (not bool) unchanged;
- float: a str of digits with an optional sign, point and exponent -> `float(value)` when finite;
  a float unchanged;
- Path: a non-empty str -> `typer._param_types.coerce_cli_path(Path(value), ...)`, typer's own
  path checks on a value already a Path (what its adapter calls after pydantic's `Path(value)`);
- bool: a bool unchanged;
- list: a list or tuple whose items all take one of the cases above -> a list of them.

Any other value (a malformed number, an empty path, a value of another type) goes to typer's
own runtime parameter, built then: the same result and the same error message as without
this module, at the cost of importing pydantic only on that path. When typer lacks the private
names this relies on, `install()` changes nothing. `tests/test_cli_coerce.py` compares the two
on many values and checks that `rag search` never imports pydantic.
"""

from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path
from typing import Any

_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_SIMPLE = (str, int, float, bool, Path)
_installed = False


def _leaf(annotation: Any) -> type | None:
    """`annotation` as one of `_SIMPLE`, Optional unwrapped; None for anything else."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            return None
        annotation = args[0]
    return annotation if annotation in _SIMPLE else None


def plain_kind(annotation: Any, info: Any) -> tuple[str, type] | None:
    """("leaf" or "list", the simple type) when the fast path may coerce this parameter, else None."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    if (getattr(info, "min", None) is not None or getattr(info, "max", None) is not None
            or getattr(info, "clamp", False)):
        return None
    if (getattr(info, "exists", False) or getattr(info, "resolve_path", False) or getattr(info, "allow_dash", False)
            or getattr(info, "path_type", None) is not None or getattr(info, "writable", False)
            or not getattr(info, "file_okay", True) or not getattr(info, "dir_okay", True)):
        return None
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and typing.get_origin(args[0]) is list:
            annotation, origin = args[0], list
    if origin is list:
        (item,) = typing.get_args(annotation) or (None,)
        leaf = _leaf(item)
        return ("list", leaf) if leaf is not None else None
    leaf = _leaf(annotation)
    return ("leaf", leaf) if leaf is not None else None


class _NoFast(Exception):
    """The value is not a plain case: typer's own coercion decides."""


def coerce_plain(kind: type, value: Any, info: Any, param: Any = None, ctx: Any = None) -> Any:
    """The plain cases of the module docstring; raises _NoFast for anything else."""
    if kind is str and isinstance(value, str):
        return value
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and _INT.match(value):
            return int(value)
    if kind is float:
        if isinstance(value, float):
            return value
        if isinstance(value, str) and _FLOAT.match(value):
            x = float(value)
            if math.isfinite(x):
                return x
    if kind is Path and isinstance(value, str) and value:
        from typer._param_types import coerce_cli_path

        return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
    raise _NoFast


def install() -> bool:
    """Wrap typer's `build_runtime_param` (once); False when this typer lacks what it needs."""
    global _installed
    if _installed:
        return True
    try:
        import typer.core as core
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path  # noqa: F401  (the Path case needs it)
    except ImportError:
        return False
    real = getattr(core, "build_runtime_param", None)
    if real is None or not isinstance(RuntimeParam, type):
        return False

    class _Fast(RuntimeParam):
        """Coerces the plain cases itself, anything else with typer's own runtime parameter."""

        def _fallback(self):
            box = self.__dict__.get("_real")
            if box is None:
                box = real(self.__dict__["_descriptor"])
                object.__setattr__(self, "_real", box)
            return box

        def _coerce_value(self, value, param, ctx):
            how, leaf = self.__dict__["_how"]
            info = self.parameter_info
            try:
                if how == "list":
                    if not isinstance(value, (list, tuple)):
                        raise _NoFast
                    return [coerce_plain(leaf, v, info, param, ctx) for v in value]
                return coerce_plain(leaf, value, info, param, ctx)
            except _NoFast:
                return self._fallback()._coerce_value(value, param=param, ctx=ctx)

    def build(descriptor):
        how = None
        if getattr(descriptor, "file_annotation", None) is None:
            how = plain_kind(descriptor.annotation, descriptor.parameter_info)
        if how is None:
            return real(descriptor)
        fast = _Fast(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
        object.__setattr__(fast, "_how", how)
        object.__setattr__(fast, "_descriptor", descriptor)
        return fast

    build.__wrapped__ = real
    core.build_runtime_param = build
    _installed = True
    return True
