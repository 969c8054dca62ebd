"""The shape of the package: a thin CLI over the library, stages that do not
import each other, and file formats that live in rag_cli.store."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "rag_cli"


def imported_modules(path: Path) -> set[str]:
    """Every rag_cli module a file imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("rag_cli")}


def test_no_stage_imports_another_stage():
    stages = {p.stem for p in (PKG / "stages").glob("*.py") if p.stem != "__init__"}
    for path in (PKG / "stages").glob("*.py"):
        others = {m for m in imported_modules(path) if m.startswith("rag_cli.stages.")} - {f"rag_cli.stages.{path.stem}"}
        assert not others, f"{path.name} imports {sorted(others)}"
    assert stages >= {"chunk", "embed", "index", "search", "rerank", "ask"}


def test_the_cli_holds_no_lock_and_merges_no_config():
    source = (PKG / "cli.py").read_text(encoding="utf-8")
    for word in ("lock(", "FileLock", "with_options", "Config.load", "save(", "rag_cli.stages"):
        assert word not in source, word


def test_file_formats_live_in_store():
    """Schemas are defined once, in rag_cli/store (a reader finds a format by the file's name)."""
    for path in PKG.rglob("*.py"):
        if "store" in path.parts:
            continue
        source = path.read_text(encoding="utf-8")
        assert "pa.schema(" not in source, f"{path.relative_to(PKG)} defines an Arrow schema"
