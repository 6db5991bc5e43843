"""Every figure a lesson or lab builds is shown (defect: lesson 5 §5 called ``lab05.plot_run(res)`` as a middle
statement of its cell; the lab kit's charts close their figure from pyplot, so nothing was drawn and the text
asked the learner to read axes that were not there).

Two checks:

- static, over the code of every lesson and lab: a chart helper (``plot_*``) called as a statement is the
  cell's last expression or is passed to ``display()``; a figure closed with ``plt.close(fig)`` is displayed
  later in its cell;
- on the saved lessons: a numbered section (``## 5. ...``) whose Markdown talks about a chart
  (グラフ・図・横軸・縦軸) has an image among the outputs of its code cells.
"""
import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))
NOTEBOOKS = LESSONS + sorted((ROOT / "labs").glob("*.ipynb"))
CHART_WORDS = re.compile(r"グラフ|図|横軸|縦軸")
NUMBERED = re.compile(r"##\s+\d+\.")                          # "## 5. ...": the lesson's own sections
UNDRAWN = re.compile(r"まとめ|用語集|セルフチェック|参考文献")      # sections that only name charts (a summary recalls them)
NOT_A_CHART = re.compile(r"意図|図書|地図|合図|図る|図り|系統図|構成図|CUDA ?グラフ")      # 図 in other words


def _name(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_chart_call(node) -> bool:
    return (isinstance(node, ast.Call) and _name(node.func).startswith("plot_")
            and not any(k.arg == "ax" for k in node.keywords))          # ax=...: draws into a figure shown later


def _displayed_names(stmts) -> set[str]:
    """Names shown by these statements: display(x) anywhere, or x as a bare expression."""
    out = set()
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Call) and _name(node.func) == "display":
                out |= {a.id for a in node.args if isinstance(a, ast.Name)}
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Name):
            out.add(st.value.id)
    return out


def unshown_figures(source: str) -> list[str]:
    """What a cell builds and never shows (empty when every chart is shown)."""
    try:
        tree = ast.parse("\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return []
    body, problems = tree.body, []
    for i, st in enumerate(body):
        later = body[i + 1:]
        for node in ast.walk(st):
            if isinstance(node, ast.Expr) and _is_chart_call(node.value) and not (node is st and not later):
                problems.append(f"line {node.lineno}: {ast.unparse(node.value)[:60]} is not the last expression "
                                f"and not display()ed: its figure is never drawn")
            if isinstance(node, ast.Call) and _name(node.func) == "close" and node.args \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id not in _displayed_names(later):
                problems.append(f"line {node.lineno}: {node.args[0].id} is closed and not displayed afterwards")
    return problems


def test_the_check_catches_the_old_lesson_5_cell():
    old = ('res = lab05.run_batching_lab(**d)\ndisplay(HTML(lab05.readout_html(res)))\nlab05.plot_run(res)\n'
           'print(res["policies"])')
    assert unshown_figures(old)
    assert not unshown_figures(old.replace("lab05.plot_run(res)", "display(lab05.plot_run(res))"))
    assert not unshown_figures("x = 1\nlab05.plot_run(res)")
    assert unshown_figures("for c in (1, 2):\n    lab05.plot_run(c)\nprint(1)")
    assert not unshown_figures("fig, ax = plt.subplots()\nplt.close(fig)\nfig")
    assert unshown_figures("fig, ax = plt.subplots()\nplt.close(fig)\nprint(1)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_chart_a_notebook_builds_is_shown(path):
    nb = nbformat.read(path, as_version=4)
    problems = [f"cell {i}: {p}" for i, c in enumerate(nb.cells) if c.cell_type == "code"
                for p in unshown_figures(c.source)]
    assert not problems, "\n".join(problems)


def sections(nb) -> list[tuple[str, str, bool]]:
    """(heading, Markdown text, has an image output) of each ``## `` section of a notebook."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and re.match(r"##\s", cell.source) or not out:
            out.append([cell.source.splitlines()[0] if cell.source else "", "", False])
        if cell.cell_type == "markdown":
            out[-1][1] += cell.source + "\n"
        else:
            out[-1][2] |= any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
    return [tuple(s) for s in out]


def _talks_about_a_chart(text: str) -> bool:
    text = re.sub(r"<details>.*?</details>", "", text, flags=re.S)      # self-check answers
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)                      # links to other chapters' figures
    return bool(CHART_WORDS.search(NOT_A_CHART.sub("", text)))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_a_section_that_talks_about_a_chart_shows_one(path):
    nb = nbformat.read(path, as_version=4)
    missing = [head for head, text, image in sections(nb) if NUMBERED.match(head) and not UNDRAWN.search(head)
               and _talks_about_a_chart(text) and not image]
    assert not missing, f"sections that mention a chart (グラフ・図・横軸・縦軸) but show no image: {missing}"
