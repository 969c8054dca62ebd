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
    paths = sorted((PKG / "cli").rglob("*.py"))
    assert paths
    for path in paths:
        source = path.read_text(encoding="utf-8")
        for word in ("lock(", "FileLock", "with_options", "Config.load", "save(", "rag_cli.stages"):
            assert word not in source, (path.name, word)


def command_bodies(path: Path):
    """(name, lines) of each function of `path` decorated as a command (`@app.command(...)`,
    `@models_app.command(...)`): its body's lines, the docstring left out."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef):
            continue
        names = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
        if any(isinstance(n, ast.Attribute) and n.attr == "command" for n in names):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            yield node.name, body[-1].end_lineno - body[0].lineno + 1


def test_the_cli_files_and_commands_stay_small():
    """No file under rag_cli/cli/ over 400 lines, no command's body over 30."""
    paths = sorted((PKG / "cli").rglob("*.py"))
    lines = {str(p.relative_to(PKG)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    long_files = {name: n for name, n in lines.items() if n > 400}
    assert long_files == {}
    bodies = {f"{p.stem}.{name}": n for p in paths for name, n in command_bodies(p)}
    assert len(bodies) >= 25  # every command was found, the eval subcommands too
    assert {name: n for name, n in bodies.items() if n > 30} == {}


def test_the_project_is_the_pipeline_only():
    """`Project` (rag_cli/project.py) under 600 lines and under 30 methods (every `def`
    of its class body, properties included): evaluation is `rag_cli.lab`."""
    path = PKG / "project.py"
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) < 600
    project = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Project")
    methods = [n.name for n in project.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(methods) < 30, methods
    assert not {"evaluate", "compare", "funnel", "perturb", "tune_fusion", "tune_refusal"} & set(methods)


def test_file_formats_live_in_store():
    """Schemas are defined once, in rag_cli/store (a reader finds a format by the file's name)."""
    for path in PKG.rglob("*.py"):
        if "store" in path.parts:
            continue
        source = path.read_text(encoding="utf-8")
        assert "pa.schema(" not in source, f"{path.relative_to(PKG)} defines an Arrow schema"


def module_graph() -> dict[str, set[str]]:
    """{module: the rag_cli modules it imports} over the whole package (lazy imports included);
    `from rag_cli.x import name` counts as an import of rag_cli.x.name when that is a module."""
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = ("rag_cli", *path.relative_to(PKG).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
                deps.update(n if n in mods else node.module for n in names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in mods} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_circle():
    assert cycles(module_graph()) == []


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_stages_and_store_never_import_the_project():
    """The stages and the file formats take a `ProjectFolder`; only the facade (and the CLI, the lab) know `Project`."""
    graph = module_graph()
    for name, deps in graph.items():
        if name.startswith(("rag_cli.stages", "rag_cli.store", "rag_cli.index")):
            assert "rag_cli.project" not in deps and "rag_cli" not in deps, f"{name} imports the project"


def test_the_version_is_a_leaf():
    assert module_graph()["rag_cli.version"] == set()


#: Layers that pass settings through (the config, the facade, the loaded engines, the CLI, the server's
#: requests); the modules that use a setting for what it means (stages, index, generate, lab) are not counted.
PLUMBING = ("config.py", "project.py", "engines.py", "cli/", "serve/requests.py")
#: Multi-word keys spelled more often in those layers for another thing of the same name.
SAME_NAME = {("ask", "min_score"): "`rag rerank --min-score` is a cross-encoder cut of its own, not a config key"}


def setting_places(key: str) -> list[str]:
    """file:line of every identifier or string literal equal to `key` in the plumbing layers (comments and
    docstrings are not code: a docstring is a string token of more than the key, so it is not counted)."""
    import io
    import tokenize

    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if not rel.startswith(PLUMBING):
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if (tok.type == tokenize.NAME and tok.string == key) or (
                    tok.type == tokenize.STRING and tok.string.strip("'\"") == key):
                out.append(f"{rel}:{tok.start[0]}")
    return out


def test_each_setting_is_spelled_in_at_most_three_places():
    """A setting is declared once (config.py's `setting`), and its flag, help and check derive from that
    (#20): a multi-word key (unambiguous as a word) appears at most 3 times in the layers that pass
    settings through."""
    from rag_cli.config import all_settings

    over = {f"{s.section}.{s.key}": places for s in all_settings() if "_" in s.key
            and (s.section, s.key) not in SAME_NAME and len(places := setting_places(s.key)) > 3}
    assert not over, over
    assert len(setting_places("hnsw_ef_construction")) == 1  # config.py only


def test_nothing_of_ray_is_imported_without_ray():
    """`import rag_cli.cli` (and the pipeline, and embedding) imports neither Ray nor the modules that use it:
    they load when `--ray` is used (#24)."""
    import subprocess
    import sys

    code = ("import sys, rag_cli.cli, rag_cli.project, rag_cli.stages.embed, rag_cli.models.encoder; "
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'rag_cli.models.ray'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PKG.parent).stdout
    assert out.strip() == "[]"


def test_the_cli_imports_no_optional_engine():
    """`import rag_cli.cli` (every command declared) imports neither pymilvus nor ray nor faiss: an
    optional extra is imported only when its backend is used (`rag_cli.index.milvus`)."""
    import subprocess
    import sys

    code = ("import sys, rag_cli.cli, rag_cli.project, rag_cli.index.backends, rag_cli.index.generation; "
            "print(sorted(m for m in ('pymilvus', 'milvus_lite', 'ray', 'faiss') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def backend_name_tests(path: Path) -> list[str]:
    """`line: code` of each place in `path` that tests a dense backend's name (a name of
    `rag_cli.index.registry.REGISTRY` compared with ==, !=, in, or a key of a dict or a `match` case)."""
    from rag_cli.index.registry import REGISTRY

    def names(node) -> set[str]:
        return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in REGISTRY}

    source = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            found = names(node)
        elif isinstance(node, ast.Dict):
            found = set().union(*(names(k) for k in node.keys if k is not None))
        elif isinstance(node, ast.match_case):
            found = names(node.pattern)
        else:
            continue
        if found:
            out.append(f"{node.lineno}: {ast.get_source_segment(source, node) or sorted(found)}")
    return out


def test_no_module_outside_the_index_tests_a_backend_name():
    """The stages, the project, the CLI, the server and the lab call `rag_cli.index.backends`'
    interface (`Backend`, looked up in `REGISTRY`) and never test which backend it is (#33): a backend
    is one module of rag_cli/index/ and one registry line."""
    found = {str(p.relative_to(PKG)): places for p in sorted(PKG.rglob("*.py"))
             if "index" not in p.relative_to(PKG).parts[:1] and (places := backend_name_tests(p))}
    assert found == {}


def test_the_backend_name_finder_finds_one(tmp_path):
    code = tmp_path / "m.py"
    code.write_text("if b == 'milvus':\n    pass\nx = {'faiss': 1}\ny = b in ('exact', 'z')\nok = {'k': 'hnswlib'}\n")
    assert [line.split(":")[0] for line in backend_name_tests(code)] == ["1", "3", "4"]


def test_the_backend_list_is_spelled_once():
    """`index.backend`'s choices, its default and the default of a generation that records none are
    the registry's (`rag_cli.index.registry`), and each registered class carries its name."""
    from rag_cli.config import setting_info
    from rag_cli.index.backends import backend_class, backend_of
    from rag_cli.index.registry import DEFAULT, REGISTRY

    info = setting_info("index", "backend")
    assert info.limits == tuple(REGISTRY) and info.default == DEFAULT == backend_of({})
    assert all(backend_class(name).name == name for name in REGISTRY)
    assert all(name in info.help for name in REGISTRY)


def test_the_server_requests_take_their_fields_from_the_settings():
    """POST /search and /ask (and the MCP tools, which build the same requests) declare no setting by
    hand (#33): each option field is a config key's, with its type, its help and its limits in the
    schema (`rag_cli.serve.requests.setting_field`)."""
    from rag_cli.config import setting_info
    from rag_cli.serve.requests import AskRequest, SearchRequest

    own = {"query", "question", "filter", "stream"}
    for model, sections in ((SearchRequest, ("search",)), (AskRequest, ("ask", "search"))):
        schema = model.model_json_schema()["properties"]
        for name, f in model.model_fields.items():
            if name in own:
                continue
            info = setting_info(next(s for s in sections if name in {k.key for k in all_of(s)}), name)
            assert f.description.startswith(info.help) and f"(config: {info.place}.{name})" in f.description
            assert f.annotation == (type(info.default) | None), name
            limits = info.limits or ()
            if limits and isinstance(limits[0], str):
                assert schema[name]["enum"] == list(limits)
            elif limits and limits[0] is not None:
                assert schema[name]["minimum"] == limits[0], name
    assert {"mode", "k", "rrf_k", "candidates", "fusion", "dense_weight"} == set(SearchRequest.model_fields) - own


def all_of(section: str):
    from rag_cli.config import all_settings

    return [s for s in all_settings() if s.section == section]
