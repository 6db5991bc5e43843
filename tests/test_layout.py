"""The house rules of the tree (shared/ARCHITECTURE.md): sizes, import direction, no import cycles.
The cycle finder itself (course.tooling.lints) is tested in tests/course/test_course_layout.py.

Every import counts, also the ones inside functions: a lazy import hides a cycle from Python, not from a reader.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from course.tooling import lints

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minimal_engine", "course")
MAX_FILE_LINES = 300
AFTERNOON_READ = ("minimal_engine/engine", "minimal_engine/model")   # a request from LLM.generate to a token
AFTERNOON_MAX_LINES = 3000


def import_graph() -> dict[str, set[str]]:
    """Both packages' graphs (course.tooling.lints counts imports inside functions too); minimal_engine never
    imports course (test_the_engine_imports_no_feature_server_or_calculator), so no cycle can cross them."""
    graph = {}
    for package in PACKAGES:
        graph.update(lints.import_graph(ROOT / package))
    return graph


def test_no_import_cycles():
    found = lints.import_cycles(import_graph())
    assert not found, "import cycles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_engine_uses_absolute_imports_and_never_the_course():
    for f in (ROOT / "minimal_engine").rglob("*.py"):
        tree = ast.parse(f.read_text())
        assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree)), f"{f}: relative import"
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m and m.split(".")[0] == "course"}, f"{f} imports the course"


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
