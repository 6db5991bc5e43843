"""A quiz notebook's saved outputs never give away a numeric answer before the learner answers (defect: the
「答え合わせのあとで」 cell under quiz 5 printed "[10, 100, 20, 50]: 空いた枠 220 トークン分", Q2's answer, and
"25 tok/s/user → TPOT 40 ms", Q7's). A line of output that holds all of a question's inputs and its answer
is a leak; the quiz cell itself (questions only, checked in test_notebooks.py) is left out."""
import re
from pathlib import Path

import nbformat
import pytest

from course.quiz.bank import load_bank

ROOT = Path(__file__).resolve().parents[2]
QUIZZES = sorted((ROOT / "quizzes").glob("*_quiz.ipynb"))


def _number(x) -> re.Pattern:
    forms = {f"{x:g}", f"{x:,.0f}" if float(x) == int(x) else f"{x:.1f}", f"{x:.2f}", f"{x:.1f}"}
    return re.compile(r"(?<![\d.,])(" + "|".join(re.escape(f) for f in forms) + r")(?![\d])")


def _inputs(q) -> list:
    args = (q.answer_from or {}).get("args", {})
    return [v for v in args.values() if isinstance(v, (int, float, list)) and not isinstance(v, bool)]


def leaks(lines: list[str], q) -> list[str]:
    answer = q.answer[0] if isinstance(q.answer, (list, tuple)) else q.answer
    inputs = _inputs(q)
    if not isinstance(answer, (int, float)) or not inputs:
        return []
    found = []
    for line in lines:
        if re.match(r"\s*(問|Q)\d+\.", line):                  # a question's own text (a static list of them)
            continue
        has_inputs = all((str(v) in line) if isinstance(v, list) else bool(_number(v).search(line)) for v in inputs)
        if has_inputs and _number(answer).search(line):
            found.append(line.strip())
    return found


def _output_lines(nb) -> list[str]:
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "show_quiz" in cell.source:
            continue
        for o in cell.get("outputs", []):
            text = o.get("text", "") or o.get("data", {}).get("text/plain", "")
            out += ("".join(text) if isinstance(text, list) else text).splitlines()
    return out


def test_the_answer_cells_run_but_are_saved_without_output():
    from course.tooling.notebooks import HIDE_TAG, clear_hidden_outputs
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(220)", metadata={"tags": [HIDE_TAG, "nbval-ignore-output"]})
    cell.outputs = [nbformat.v4.new_output("stream", text="220\n")]
    nb.cells.append(cell)
    assert clear_hidden_outputs(nb) == 1 and cell.outputs == []


def test_the_check_catches_the_old_quiz_5_output():
    q = {x.id: x for x in load_bank("05_batching")}
    assert leaks(["出力長 [30, 120, 60, 90]   : 空いた枠   180 トークン分（37.5 %）"], q["idle_slots"])   # ch05 #11 numbers
    assert leaks(["25 tok/s/user → TPOT 40 ms 以内"], q["tok_s_user_to_tpot"])
    assert not leaks(["20 tok/s/user → TPOT 50 ms 以内"], q["tok_s_user_to_tpot"])


@pytest.mark.parametrize("path", QUIZZES, ids=lambda p: p.name)
def test_saved_outputs_hold_no_numeric_answer(path):
    lines = _output_lines(nbformat.read(path, as_version=4))
    found = {q.id: leaks(lines, q) for q in load_bank(path.stem.removesuffix("_quiz")) if q.kind == "numeric"}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"{path.name}: saved outputs give away answers: {found}"
