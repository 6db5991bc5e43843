"""Every tracked notebook reads well before it runs: no widget views, no raw widget reprs (course/tooling/notebooks.py)."""
import re
from pathlib import Path

import nbformat
import pytest

from course.tooling.notebooks import (PANEL_PLACEHOLDER, WIDGET_MIME, placeholder_html, show_widget, strip_widget_views,
                              widget_bundle)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for d in ("lessons", "labs", "quizzes") for p in (ROOT / d).glob("*.ipynb"))
RAW_REPRS = ("HBox(children", "VBox(children", "IntSlider(value", "Button(description", "Tab(children")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_saved_notebook_has_no_widget_views_or_raw_reprs(path):
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata, "saved widget state: run `python -m course.tooling.notebooks --strip-only`"
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert WIDGET_MIME not in data, f"cell {i} saves a widget view (no kernel behind it on GitHub)"
            text = data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            assert not any(r in text for r in RAW_REPRS), f"cell {i} shows a raw widget repr: {text[:80]!r}"


def test_widget_bundle_replaces_the_raw_repr():
    import ipywidgets as w
    box = w.VBox([w.IntSlider(value=3)])
    bundle = widget_bundle(box)
    assert WIDGET_MIME in bundle and bundle["text/plain"] == PANEL_PLACEHOLDER
    shown = show_widget(w.IntSlider(), "X を実行")._repr_mimebundle_()
    assert shown["text/plain"] == "X を実行" and WIDGET_MIME in shown


def test_strip_widget_views_keeps_static_outputs():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"state": {}}
    cell = nbformat.v4.new_code_cell("app")
    cell.outputs = [nbformat.v4.new_output("display_data", data={WIDGET_MIME: {"model_id": "x"},
                                                                  "text/plain": PANEL_PLACEHOLDER}),
                    nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})]
    nb.cells.append(cell)
    assert strip_widget_views(nb) == 1
    assert "widgets" not in nb.metadata
    assert cell.outputs[0]["data"] == {"text/html": placeholder_html(PANEL_PLACEHOLDER), "text/plain": PANEL_PLACEHOLDER}
    assert cell.outputs[1]["data"]["image/png"] == "iVBOR"


CURRENCY_DOLLAR = re.compile(r"(?<![\\$])\$(?=[/\d])")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_currency_dollars_are_escaped_in_markdown(path):
    """JupyterLab reads `$...$` in Markdown as math: "$1.48 ... $2.62" would be typeset as one formula.
    Currency is written `\\$` (shown as $ in JupyterLab and on GitHub); `$n$` and `$$...$$` stay math."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if not line.strip().startswith("$$"):
                assert not CURRENCY_DOLLAR.search(line), f"cell {i}: write currency as \\$: {line[:80]!r}"
