"""The house rules of the tree (../ARCHITECTURE in the issue): sizes, import direction, no import cycles.

Every import counts, also the ones inside functions: a lazy import hides a cycle from Python, not from a reader.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minimal_engine", "course")
MAX_FILE_LINES = 300
AFTERNOON_READ = ("minimal_engine/engine", "minimal_engine/model")   # a request from LLM.generate to a token
AFTERNOON_MAX_LINES = 3000


def module_files(package: str) -> dict[str, Path]:
    """{dotted module name: file} for every .py under the package (a package's __init__ is the package)."""
    out = {}
    for f in sorted((ROOT / package).rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the file imports anywhere (top level, inside functions, inside ifs)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                mod = alias.name
                while mod and mod not in known:
                    mod = mod.rpartition(".")[0]
                if mod:
                    found.add(mod)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    found.add(full)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {}
    for p in PACKAGES:
        files.update(module_files(p))
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    known = {"a", "b"}
    graph = {"a": imports_of("a", tmp_path / "a.py", known), "b": imports_of("b", tmp_path / "b.py", known)}
    assert cycles(graph) == [["a", "b"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_file_is_at_most_300_lines(package):
    long = {str(f.relative_to(ROOT)): n for f in (ROOT / package).rglob("*.py")
            if (n := len(f.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, f"files over {MAX_FILE_LINES} lines: {long}"


def test_the_afternoon_read_is_at_most_3000_lines():
    total = sum(len(f.read_text().splitlines()) for d in AFTERNOON_READ for f in (ROOT / d).rglob("*.py"))
    assert total <= AFTERNOON_MAX_LINES, f"engine/ + model/ have {total} lines"


def test_the_engine_imports_no_feature_server_or_calculator():
    graph = import_graph()
    banned = ("minimal_engine.features", "minimal_engine.serve", "minimal_engine.calculators",
              "minimal_engine.disagg", "minimal_engine.tools", "minimal_engine.bench", "course")
    wrong = {m: sorted(d for d in deps if d.startswith(banned))
             for m, deps in graph.items() if m.startswith(("minimal_engine.engine", "minimal_engine.model"))}
    wrong = {m: d for m, d in wrong.items() if d}
    assert not wrong, f"engine/ and model/ must not import features, serve, calculators, ...: {wrong}"


def test_no_engine_module_imports_a_facade():
    """Modules import the sibling that defines a name, never a package's re-exporting __init__."""
    graph = import_graph()
    facades = {"minimal_engine", "minimal_engine.calculators", "minimal_engine.bench"}
    wrong = {m: sorted(deps & facades) for m, deps in graph.items()
             if m.startswith("minimal_engine") and deps & facades and not m.endswith("__main__")
             and m not in facades}
    assert not wrong, wrong


def test_every_module_says_what_it_is_for():
    missing = [str(f.relative_to(ROOT)) for p in PACKAGES for f in (ROOT / p).rglob("*.py")
               if f.read_text().strip() and ast.get_docstring(ast.parse(f.read_text())) is None]
    assert not missing, f"modules without a docstring: {missing}"


def test_the_engine_readme_names_every_package():
    readme = (ROOT / "minimal_engine" / "README.md").read_text()
    packages = [d.name for d in (ROOT / "minimal_engine").iterdir() if (d / "__init__.py").exists()]
    assert packages
    missing = [p for p in packages if f"{p}/" not in readme]
    assert not missing, f"minimal_engine/README.md does not describe {missing}"
    text = "\n".join(f.read_text() for d in AFTERNOON_READ for f in (ROOT / d).rglob("*.py"))
    assert "ipywidgets" not in text and "import matplotlib" not in text, "the engine imports no course UI"
