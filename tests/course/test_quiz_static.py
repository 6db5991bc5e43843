"""Quiz notebooks readable without a kernel: the quiz cell's bundle carries every question as static
text/html + text/plain (no answers), saving keeps it, and a graded answer records the score."""
import json

import nbformat
import pytest

from course.quiz.bank import load_bank
from course.quiz.widget import QuizWidget
from course.tooling.notebooks import WIDGET_MIME, strip_widget_views

BANK = "05_batching"


def _secrets(q):
    out = [c.explanation for c in q.choices if c.explanation] + ([q.explanation] if q.explanation else [])
    return [s for s in out if len(s) > 15]


def test_bundle_shows_every_question_and_no_answer():
    quiz = QuizWidget.from_bank(BANK)
    data = quiz._repr_mimebundle_()
    assert WIDGET_MIME in data
    for q in load_bank(BANK):
        first = q.prompt.splitlines()[0][:30]
        assert first in data["text/plain"] and first.replace("&", "&amp;").replace("<", "&lt;")[:20] in data["text/html"]
        for c in q.choices:
            assert c.text.splitlines()[0][:20] in data["text/plain"]
        for secret in _secrets(q):
            assert secret[:40] not in data["text/plain"] and secret[:40] not in data["text/html"]
    assert "○ 正しい" not in data["text/html"] and "あなたの選択" not in data["text/html"]


def test_saving_keeps_the_static_questions():
    quiz = QuizWidget.from_bank(BANK)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("quiz")
    cell.outputs = [nbformat.v4.new_output("display_data", data=quiz._repr_mimebundle_())]
    nb.cells.append(cell)
    assert strip_widget_views(nb) == 1
    data = nb.cells[0].outputs[0]["data"]
    assert WIDGET_MIME not in data
    assert load_bank(BANK)[0].prompt.splitlines()[0][:30] in data["text/plain"]


def test_a_graded_answer_records_the_score(tmp_path, monkeypatch):
    pytest.importorskip("course.exercises.progress")
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(path))
    quiz = QuizWidget.from_bank(BANK)
    i, q = next((i, q) for i, q in enumerate(quiz.questions) if q.kind == "single")
    right = next(j for j, c in enumerate(q.choices) if c.correct)
    quiz.submit(i, right)
    saved = json.loads(path.read_text(encoding="utf-8"))["quizzes"][BANK]
    total = sum(x.graded for x in quiz.questions)
    assert saved == {"score": 1, "total": total}
