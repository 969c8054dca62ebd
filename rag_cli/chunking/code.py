"""The `code` strategy: source code split at definitions, with exact offsets.

Python (`.py`, `.pyi`; parsed with the standard library's `ast`): one chunk
per top-level function or class, counting its decorators and the comment
lines directly above it (its docstring is inside it anyway); the module-level
code between two definitions (imports, constants, the module docstring, a
`__main__` block) forms its own chunk. A unit longer than `size` falls back to
the recursive splitter on that span (blank lines, then lines, ...), with
`overlap`. A file that does not parse is treated like other languages.

Other languages: blocks separated by blank lines, merged greedily up to
`size` units without overlap (a block is cut only when it alone exceeds
`size`) — the recursive splitter, whose first separator is the blank line.
"""

from __future__ import annotations

import ast
import re

from .recursive import recursive_spans
from .units import SpanCounter

__all__ = ["code_spans", "python_units", "PYTHON_SUFFIXES"]

PYTHON_SUFFIXES = (".py", ".pyi")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def python_units(text: str) -> list[tuple[int, int]] | None:
    """Top-level units of a Python module as `(start, end)` character spans
    covering `text` in order: each definition (from its first decorator or
    leading comment line to the end of its last line) and each stretch of
    module-level code between them. None when `text` is not valid Python."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    line_start = [0] + [m.end() for m in re.finditer("\n", text)]
    lines = text.split("\n")

    def offset(line: int) -> int:  # 1-based line -> offset of its first character
        return line_start[line - 1] if line - 1 < len(line_start) else len(text)

    units: list[tuple[int, int]] = []
    pos, prev_end_line = 0, 0
    for node in tree.body:
        if isinstance(node, _DEFS):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            while first - 1 > prev_end_line and lines[first - 2].lstrip().startswith("#"):
                first -= 1
            a, b = offset(first), offset(node.end_lineno + 1)
            if pos < a:
                units.append((pos, a))
            units.append((a, b))
            pos = b
        prev_end_line = node.end_lineno
    if pos < len(text):
        units.append((pos, len(text)))
    return units


def code_spans(text: str, path: str, count: SpanCounter, size: int, overlap: int) -> list[tuple[int, int]]:
    """Chunk a source file (see the module docstring); `path` picks the
    language by its suffix. Returns trimmed, non-empty `(start, end)` spans
    in order; units are whatever `count` measures."""
    units = python_units(text) if path.lower().endswith(PYTHON_SUFFIXES) else None
    if units is None:
        return recursive_spans(text, 0, len(text), count, size, 0)
    out: list[tuple[int, int]] = []
    for a, b in units:
        out.extend(recursive_spans(text, a, b, count, size, overlap))
    return out
