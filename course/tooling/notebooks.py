"""What a notebook shows before it runs, and how the course's notebooks are executed and saved.

A widget lives in a running kernel. A notebook read on GitHub, or opened in JupyterLab before its cells
run, has no kernel behind its widgets, and by default shows their text repr
(``HBox(children=(IntSlider(value=3, ...``) where the lesson says "move the slider below". So:

- every panel of the course (a lab, a quiz, the guide's slider) is displayed through
  :func:`widget_bundle`, whose ``text/plain`` is a Japanese placeholder, never the raw repr;
- the course's notebooks are executed and saved with ``python -m course.tooling.notebooks PATH ...``, which runs
  them (nbclient, in the notebook's folder, as nbval does) and then replaces each widget output with that
  placeholder (``text/plain`` + ``text/html``) and drops the saved widget state. Static outputs (tables,
  plots, printed numbers) stay, so the notebook is worth reading on GitHub.

``tests/notebooks/test_notebooks.py`` checks that no tracked notebook holds a widget view or a raw widget repr.

A saved run is the one a reader of the notebook on GitHub learns from, so it must not be one that other programs
crowded: when any output carries the disturbed-run warning (``course.labkit.load.DURING_MARK``) or a verdict
withheld for it (``course.labkit.predictions.DISTURBED``), the notebook is
executed again, up to ``RETRIES`` times, and the save fails if it is still disturbed
(``tests/notebooks/test_quiet_saves.py`` checks every tracked notebook).
"""
from __future__ import annotations

import argparse
import html
import sys
import time
from pathlib import Path

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PANEL_PLACEHOLDER = "（このセルを実行すると、ここに操作パネルが表示されます）"
QUIZ_PLACEHOLDER = "（このセルを実行すると、ここにクイズが表示されます）"
WIDGET_PLACEHOLDER = "（このセルを実行すると、ここにウィジェットが表示されます）"


def placeholder_html(text: str) -> str:
    return (f"<div style='padding:0.6em 1em;border:1px dashed #999;color:#555;background:#fafafa'>"
            f"{html.escape(text)}</div>")


def widget_bundle(widget, text: str = PANEL_PLACEHOLDER, **kwargs) -> dict:
    """The mime bundle of ``widget`` with a Japanese placeholder as its ``text/plain`` (not the raw repr).

    Use it in ``_repr_mimebundle_`` of any object that shows a panel::

        def _repr_mimebundle_(self, **kwargs):
            return widget_bundle(self.ui, PANEL_PLACEHOLDER)
    """
    bundle = widget._repr_mimebundle_(**kwargs)
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    data = dict(data)
    data["text/plain"] = text
    return data


def show_widget(widget, text: str = WIDGET_PLACEHOLDER):
    """Wrap a plain ipywidget so that its cell shows ``text`` (not the widget's repr) where no kernel runs."""
    return _Shown(widget, text)


class _Shown:
    def __init__(self, widget, text):
        self.widget, self.text = widget, text

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self.widget, self.text, **kwargs)


def _placeholder_text(output: dict) -> str:
    text = output.get("data", {}).get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else text
    return text if text.startswith("（このセルを実行すると") else WIDGET_PLACEHOLDER


def strip_widget_views(nb) -> int:
    """Replace every widget output of ``nb`` (an nbformat notebook) by its placeholder; drop saved widget
    state. Returns how many outputs were replaced."""
    replaced = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_MIME in data:
                if "text/html" in data:                   # a static fallback (a quiz's questions): keep it
                    out["data"] = {k: data[k] for k in ("text/html", "text/plain") if k in data}
                else:
                    text = _placeholder_text(out)
                    out["data"] = {"text/html": placeholder_html(text), "text/plain": text}
                replaced += 1
    nb.metadata.pop("widgets", None)
    return replaced


HIDE_TAG = "hide-saved-output"     # a cell whose output gives answers away (under a quiz): saved without output


def clear_hidden_outputs(nb) -> int:
    """Drop the outputs of cells tagged ``HIDE_TAG`` (they also carry ``nbval-ignore-output``): the learner sees
    them only after running the cell. Returns how many cells were cleared."""
    cleared = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and HIDE_TAG in cell.get("metadata", {}).get("tags", []) and cell.outputs:
            cell.outputs, cell.execution_count = [], None
            cleared += 1
    return cleared


RETRIES = 2


def disturbed_cells(nb) -> list[int]:
    """Indices of the code cells whose outputs say that other programs crowded the run (the warning, or a
    verdict withheld for it)."""
    from course.labkit.load import DURING_MARK
    from course.labkit.predictions import DISTURBED
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = out.get("text", "") or "".join(str(v) for v in out.get("data", {}).values())
            text = "".join(text) if isinstance(text, list) else text
            if DURING_MARK in text or DISTURBED in text:
                found.append(i)
                break
    return found


def execute(path: str | Path, timeout: int = 1800, quick: bool = False, retries: int = RETRIES) -> float:
    """Execute the notebook at ``path`` in its own folder until no run in it was disturbed (at most
    ``1 + retries`` times), strip widget views, save it. Returns seconds; RuntimeError if every try was disturbed."""
    import nbformat

    path = Path(path)
    t0 = time.perf_counter()
    for attempt in range(1 + retries):
        nb = _run(path, timeout, quick)
        bad = disturbed_cells(nb)
        if not bad:
            break
        print(f"{path}: cells {bad} were measured while other programs ran (try {attempt + 1})", file=sys.stderr)
    else:
        raise RuntimeError(f"{path}: still disturbed after {1 + retries} tries (cells {bad}); not saved")
    strip_widget_views(nb)
    clear_hidden_outputs(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def _run(path: Path, timeout: int, quick: bool):
    """The notebook at ``path`` executed in its own folder (nbclient, as nbval does)."""
    import os

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    old = os.environ.get("COURSE_QUICK")
    if quick:
        os.environ["COURSE_QUICK"] = "1"
    else:
        os.environ.pop("COURSE_QUICK", None)      # saved notebooks show the full experiments
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        if old is None:
            os.environ.pop("COURSE_QUICK", None)
        else:
            os.environ["COURSE_QUICK"] = old
    return nb


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Execute course notebooks and save them with widget placeholders.")
    p.add_argument("paths", nargs="+", help="notebooks to execute and save")
    p.add_argument("--quick", action="store_true", help="run with COURSE_QUICK=1 (small sweeps)")
    p.add_argument("--strip-only", action="store_true", help="only replace widget views, do not execute")
    args = p.parse_args(argv)
    for path in args.paths:
        if args.strip_only:
            import nbformat
            nb = nbformat.read(path, as_version=4)
            n = strip_widget_views(nb)
            clear_hidden_outputs(nb)
            nbformat.write(nb, path)
            print(f"{path}: {n} widget outputs replaced")
        else:
            print(f"{path}: executed in {execute(path, quick=args.quick):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
