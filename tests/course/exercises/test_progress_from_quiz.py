"""A quiz answered through its widget shows up in the guide's progress table (defect: the quiz saved its
score under "05_batching" and the table looked up "05", so a 9/9 quiz still showed 「—」)."""
import json
from pathlib import Path

import nbformat
import pytest

from course.quiz.widget import show_quiz

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "lessons" / "00_course_guide.ipynb"


@pytest.fixture(autouse=True)
def _progress_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(tmp_path / "progress.json"))


def _answer_right(quiz, i):
    """Put the right answer into question i's input widget and press its button, as a learner does."""
    q, field_ = quiz.questions[i], quiz.inputs[i]
    if q.kind == "single":
        field_.value = next(j for j, c in enumerate(q.choices) if c.correct)
    elif q.kind == "multiple":
        for box, c in zip(field_.children, q.choices):
            box.value = bool(c.correct)
    elif q.kind == "numeric":
        answer = q.answer[0] if isinstance(q.answer, (list, tuple)) else q.answer
        field_.children[0].value = repr(float(answer))
    quiz.buttons[i].click()


def _guide_table():
    """Run the guide's own progress cell (the code the learner runs) and return the table it shows."""
    nb = nbformat.read(GUIDE, as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and "show_progress()" in c.source)
    *body, last = source.strip().splitlines()
    scope = {}
    exec("\n".join(body), scope)
    return eval(last, scope)


@pytest.mark.parametrize("bank, row", [("05_batching", "第5章"), ("11_review", "総復習")])
def test_a_quiz_answered_in_its_widget_reaches_the_guides_table(bank, row):
    quiz = show_quiz(bank)                     # what the quiz notebook's cell calls
    graded = [i for i, q in enumerate(quiz.questions) if q.graded]
    for i in graded:
        _answer_right(quiz, i)
    assert quiz.score_text().startswith(f"得点: {len(graded)} / {len(graded)}")
    table = _guide_table()
    assert table.loc[row, "クイズの得点"] == f"{len(graded)}/{len(graded)}"
    others = table.drop(index=row)["クイズの得点"]
    assert (others == "—").all(), others


def test_a_wrong_answer_is_recorded_too():
    quiz = show_quiz("05_batching")
    i, q = next((i, q) for i, q in enumerate(quiz.questions) if q.kind == "single")
    quiz.inputs[i].value = next(j for j, c in enumerate(q.choices) if not c.correct)
    quiz.buttons[i].click()
    total = sum(x.graded for x in quiz.questions)
    assert _guide_table().loc["第5章", "クイズの得点"] == f"0/{total}"


def test_older_keys_still_count(tmp_path):
    from course.exercises import progress
    path = Path(progress.progress_file())
    path.write_text(json.dumps({"exercises": {}, "quizzes": {"3": {"score": 2, "total": 4},
                                                             "07": {"score": 1, "total": 2}}}), encoding="utf-8")
    table = {r["章"]: r["クイズの得点"] for r in progress.rows([])}
    assert table["第3章"] == "2/4" and table["第7章"] == "1/2" and table["総復習"] == "—"
