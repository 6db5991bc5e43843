"""The saved runs a reader learns from were not crowded by other programs: no tracked notebook's outputs carry
the disturbed-run warning of ``course.labkit.load.LoadWatch``, and the saving tool finds such cells
(course/tooling/notebooks.py re-executes a notebook until none is left)."""
from pathlib import Path

import nbformat
import pytest

from course.labkit.load import DURING_MARK, during_warning
from course.labkit.predictions import Disturbed
from course.tooling.notebooks import disturbed_cells

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for d in ("lessons", "labs", "exercises") for p in (ROOT / d).glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_saved_runs_were_quiet(path):
    assert disturbed_cells(nbformat.read(path, as_version=4)) == [], (
        "a saved run was measured while other programs ran: re-save it on a quiet machine "
        "(python -m course.tooling.notebooks PATH)")


def test_disturbed_cells_are_found():
    nb = nbformat.v4.new_notebook()
    quiet = nbformat.v4.new_code_cell("print(1)")
    quiet.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    loud = nbformat.v4.new_code_cell("run()")
    loud.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x\n" + during_warning(1.0, 0.0, 2, 1))]
    html = nbformat.v4.new_code_cell("show()")
    html.outputs = [nbformat.v4.new_output("display_data", data={"text/html": f"<p>{DURING_MARK}…</p>"})]
    verdict = nbformat.v4.new_code_cell("print(verdicts(p, load))")
    verdict.outputs = [nbformat.v4.new_output("stream", name="stdout", text=Disturbed("A", None, "1 ms").verdict())]
    nb.cells = [nbformat.v4.new_markdown_cell(DURING_MARK), quiet, loud, html, verdict]
    assert disturbed_cells(nb) == [2, 3, 4]
