"""The house rules of the tree (shared/ARCHITECTURE.md): sizes, import direction, no import cycles.
The cycle finder itself (course.tooling.lints) is tested in tests/course/test_course_layout.py.

The core path reads in an afternoon: the files of minimal_engine/README.md's core reading order
(parsed from the README, so the test and the README cannot disagree) stay within CORE_MAX_LINES
lines and CORE_MAX_BYTES bytes (everything a reader reads: code, comments, docstrings), with no
line over 100 columns.

Every import counts, also the ones inside functions: a lazy import hides a cycle from Python, not from a reader.
"""
from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from course.tooling import lints

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minimal_engine", "course")
MAX_FILE_LINES = 300
ENGINE_DIRS = ("minimal_engine/engine", "minimal_engine/model")
ENGINE_README = ROOT / "minimal_engine" / "README.md"
CORE_HEADING = "## 午後ひとつで読む部分"
CORE_MAX_LINES = 1800
CORE_MAX_BYTES = 80_000           # 80 KB (KB = 1,000 bytes); nano-vllm's whole engine is 51 KB
MAX_COLUMNS = 100


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


def core_section(readme: str) -> str:
    return readme.split(CORE_HEADING, 1)[1].split("\n## ", 1)[0]


def core_reading_order(readme: str) -> list[str]:
    """The files of the core reading order, paths relative to minimal_engine/: every `....py`
    named in the numbered list under CORE_HEADING, in order."""
    files: list[str] = []
    for line in core_section(readme).splitlines():
        if re.match(r"\d+\. ", line):
            files += [f for f in re.findall(r"`([\w/]+\.py)`", line) if f not in files]
    return files


@dataclass
class ReadSize:
    lines: int
    bytes: int
    long_lines: list[str]         # "file:line (N columns)"


def measure(base: Path, files: list[str]) -> ReadSize:
    """Lines, UTF-8 bytes and lines over MAX_COLUMNS characters of `files` under `base`."""
    lines, size, long = 0, 0, []
    for name in files:
        text = (base / name).read_text(encoding="utf-8")
        rows = text.splitlines()
        lines += len(rows)
        size += len(text.encode("utf-8"))
        long += [f"{name}:{i} ({len(r)} columns)" for i, r in enumerate(rows, 1)
                 if len(r) > MAX_COLUMNS]
    return ReadSize(lines, size, long)


def over_budget(size: ReadSize, max_lines: int = CORE_MAX_LINES,
                max_bytes: int = CORE_MAX_BYTES) -> list[str]:
    """What is over the budget, in words (empty: it fits)."""
    out = []
    if size.lines > max_lines:
        out.append(f"{size.lines} lines > {max_lines}")
    if size.bytes > max_bytes:
        out.append(f"{size.bytes:,} bytes > {max_bytes:,}")
    if size.long_lines:
        n = len(size.long_lines)
        out.append(f"{n} lines over {MAX_COLUMNS} columns: {size.long_lines[:5]}")
    return out


def the_order() -> list[str]:
    return core_reading_order(ENGINE_README.read_text(encoding="utf-8"))


def test_the_readme_lists_the_core_reading_order():
    files = the_order()
    assert files[0] == "llm.py" and files[-1] == "engine/sampler.py", files
    assert {"engine/llm_engine.py", "engine/scheduler.py", "engine/block_manager.py",
            "model/llama.py", "model/attention.py"} <= set(files), files
    section = core_section(ENGINE_README.read_text(encoding="utf-8"))
    named = files + re.findall(r"`([\w/]+\.py)`", section)        # the order and what is read after
    missing = [f for f in named if not (ROOT / "minimal_engine" / f).is_file()
               and not (ROOT / f).is_file()]
    assert not missing, f"minimal_engine/README.md's reading order names missing files: {missing}"


def test_the_core_reading_order_has_no_line_over_100_columns():
    size = measure(ROOT / "minimal_engine", the_order())
    assert not size.long_lines, f"lines over {MAX_COLUMNS} columns: {size.long_lines}"


def test_the_core_path_reads_in_an_afternoon():
    size = measure(ROOT / "minimal_engine", the_order())
    assert not over_budget(size), over_budget(size)


def test_the_budget_fails_when_a_file_of_the_order_grows(tmp_path):
    """A copy of the order that fits a budget set to its own size stops fitting when one of its
    files grows by a line, by bytes, or gets a line over 100 columns."""
    files = the_order()
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "minimal_engine" / f, tmp_path / f)
    fits = [f for f in files if not measure(tmp_path, [f]).long_lines]
    size = measure(tmp_path, fits)
    assert over_budget(size, size.lines, size.bytes) == []
    grown = tmp_path / fits[0]
    text = grown.read_text(encoding="utf-8")
    grown.write_text(text + "x = 1\n", encoding="utf-8")
    assert over_budget(measure(tmp_path, fits), size.lines, size.bytes) == [
        f"{size.lines + 1} lines > {size.lines}", f"{size.bytes + 6:,} bytes > {size.bytes:,}"]
    grown.write_text(text[:-1] + " # grown\n", encoding="utf-8")     # as many lines, 8 bytes more
    assert over_budget(measure(tmp_path, fits), size.lines, size.bytes) == [
        f"{size.bytes + 8:,} bytes > {size.bytes:,}"]
    grown.write_text(text + "#" * (MAX_COLUMNS + 1) + "\n", encoding="utf-8")
    problems = over_budget(measure(tmp_path, fits), size.lines + 1, size.bytes + 200)
    where = f"{fits[0]}:{len(text.splitlines()) + 1} (101 columns)"
    assert problems == [f"1 lines over {MAX_COLUMNS} columns: {[where]}"]


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
    text = "\n".join(f.read_text() for d in ENGINE_DIRS for f in (ROOT / d).rglob("*.py"))
    assert "ipywidgets" not in text and "import matplotlib" not in text, "the engine imports no course UI"


def test_one_conftest_for_the_tests():
    """A second conftest.py anywhere under tests/ becomes the module `conftest` for some tests, and
    `from conftest import hf_greedy` then fails at collection (it stopped CI once)."""
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("conftest.py"))
    assert found == ["tests/conftest.py"], f"share fixtures through a named module instead: {found}"
