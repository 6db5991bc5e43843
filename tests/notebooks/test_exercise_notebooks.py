"""Every exercise notebook, executed with its stub cell replaced by the model solution, passes its grader.

The saved notebooks show the stub state (nbval compares that); here the cell tagged ``exercise-stub`` gets the
source of ``exercises/solutions/exNN_*.py`` and the report of the grading cell must say passed.
"""
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "exercises").glob("[0-9][0-9]_*_exercise.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_passes_with_the_solution(path, tmp_path, monkeypatch):
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    stubs = [c for c in nb.cells if "exercise-stub" in c.metadata.get("tags", [])]
    assert stubs, f"{path.name}: no cell tagged exercise-stub"
    grading = [c for c in nb.cells if c.cell_type == "code" and "grade(" in c.source]
    assert grading, f"{path.name}: no grading cell"
    exercise_id = grading[0].source.split('grade("', 1)[1].split('"', 1)[0]
    solution = ROOT / "exercises" / "solutions" / f"ex{exercise_id}.py"
    assert solution.exists(), f"{path.name}: no model solution {solution.name}"
    stubs[0].source = solution.read_text(encoding="utf-8")
    grading[0].source += "\nassert report.passed, str(report)\nreport"
    monkeypatch.setenv("COURSE_QUICK", "1")
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(tmp_path / "progress.json"))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    assert "合格" in "".join(o.get("text", "") + str(o.get("data", {})) for o in grading[0].outputs)
