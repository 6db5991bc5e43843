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


QUIZ_NOTEBOOKS = sorted(Path(__file__).resolve().parents[2].glob("quizzes/*_quiz.ipynb"))


def _saved_text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            for key in ("text/plain", "text/html"):
                v = o.get("data", {}).get(key, "")
                out.append("".join(v) if isinstance(v, list) else v)
            out.append("".join(o.get("text", "")))
    return "\n".join(out)


@pytest.mark.parametrize("path", QUIZ_NOTEBOOKS, ids=lambda p: p.name)
def test_saved_quiz_notebook_shows_every_question_and_no_answer(path):
    """Readable without a kernel: every question's text from the YAML is in the saved outputs, and no
    explanation (which holds the answer). Passes once the quiz notebooks are re-saved by course.tooling.notebooks."""
    from course.quiz.bank import load_bank
    text = _saved_text(nbformat.read(path, as_version=4))
    for q in load_bank(path.stem.removesuffix("_quiz")):
        first = q.prompt.strip().splitlines()[0][:30]
        assert first in text, f"{path.name}: question {q.id} not in the saved outputs"
        secrets = [c.explanation for c in q.choices] + [q.explanation]
        for s in (s.strip() for s in secrets if s and len(s.strip()) > 15):
            assert s[:40] not in text, f"{path.name}: {q.id}'s explanation is in the saved outputs"
