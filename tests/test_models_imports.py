"""rag_cli.models imports one way: no module of the package imports, even
inside a function, a module that imports it back (directly or through
others)."""

from __future__ import annotations

import ast
from pathlib import Path

import rag_cli.models

PACKAGE = "rag_cli.models"
ROOT = Path(rag_cli.models.__file__).parent


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _imports(source: str, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` (its ``source``)
    imports anywhere: module level, in functions and classes; ``import``,
    ``from ... import``, relative forms."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the submodule pkg.mod when there is one
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            # the deepest module of the package that the name is or lies in
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (the package itself left out:
    importing any submodule runs it first, and its own imports are its own entry)."""
    files = sorted(root.rglob("*.py"))
    modules = {_module_name(p, root) for p in files}
    return {_module_name(p, root): _imports(p.read_text(encoding="utf-8"), _module_name(p, root),
                                            p.name == "__init__.py", modules) - {PACKAGE}
            for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first == last), or None."""
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_models_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) >= 10 and f"{PACKAGE}.convert.e5" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_conversion_is_called_only_by_the_resolver_and_manage():
    graph = import_graph()
    callers = {m for m, deps in graph.items() if not m.startswith(f"{PACKAGE}.convert")
               and any(d.startswith(f"{PACKAGE}.convert") for d in deps)}
    assert callers == {f"{PACKAGE}.defaults", f"{PACKAGE}.manage"}


def test_the_checker_sees_function_level_and_relative_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    source = "import os\n\ndef f():\n    from .folder import ModelFolder\n    from rag_cli.models.convert import e5\n"
    modules = {f"{PACKAGE}.folder", f"{PACKAGE}.convert", f"{PACKAGE}.convert.e5", f"{PACKAGE}.x"}
    assert _imports(source, f"{PACKAGE}.x", False, modules) == {
        f"{PACKAGE}.folder", f"{PACKAGE}.convert", f"{PACKAGE}.convert.e5"}
