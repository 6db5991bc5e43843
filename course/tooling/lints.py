"""Lints of the course's layout (``tests/course/test_course_layout.py`` runs them; so can you)::

    python -m course.tooling.lints          # prints every problem, exits 1 if there is one

- ``import_graph(root)``: module -> the course modules it imports, counting imports inside functions;
  ``import_cycles(graph)``: its cycles (strongly connected components of more than one module, or a
  module importing itself).
- ``layout_problems(root)``: files over ``MAX_LINES`` lines, modules without a docstring, relative imports,
  a lab importing a panel or another lab, a module-level LLM cache outside ``course.runtime``.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_LINES = 300
PACKAGE_DIR = Path(__file__).resolve().parents[1]       # course/


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package at ``root``: dotted name -> file."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _imports(tree: ast.AST, known: set[str]) -> set[str]:
    """Course modules a module imports anywhere in its body (top level, functions, methods)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:           # "course.labs.lab01.x" -> the module that holds it
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {name: _imports(ast.parse(path.read_text(encoding="utf-8")), known) for name, path in mods.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a self-import), sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
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
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _cache_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names += [t.id for t in targets if isinstance(t, ast.Name) and ("CACHE" in t.id.upper() or "LLMS" in t.id.upper())]
    return names


def layout_problems(root: Path = PACKAGE_DIR) -> list[str]:
    problems = []
    graph = import_graph(root)
    for name, path in modules(root).items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = path.relative_to(root.parent)
        if len(text.splitlines()) > MAX_LINES:
            problems.append(f"{rel}: {len(text.splitlines())} lines (at most {MAX_LINES})")
        if not ast.get_docstring(tree):
            problems.append(f"{rel}: no module docstring saying what it is for")
        if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree)):
            problems.append(f"{rel}: a relative import (use absolute ones: from course.labs.lab01 import ...)")
        if name.startswith("course.labs."):
            for dep in sorted(graph[name]):
                if dep.startswith("course.panels"):
                    problems.append(f"{rel}: a lab imports a panel ({dep})")
                own = name.removesuffix("_plots")
                if dep.startswith("course.labs.") and dep.removesuffix("_plots") != own:
                    problems.append(f"{rel}: a lab imports another lab ({dep}); share it through course.labkit")
        if name != "course.runtime":
            problems += [f"{rel}: a module-level cache {n!r}: use course.runtime.cached_llm" for n in _cache_names(tree)]
    problems += [f"import cycle: {' <-> '.join(c)}" for c in import_cycles(graph)]
    return problems


def main(argv=None) -> int:
    problems = layout_problems(Path(argv[0]) if argv else PACKAGE_DIR)
    print("\n".join(problems) or "course/: layout ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
