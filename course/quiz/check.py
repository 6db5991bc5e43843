"""Grading a quiz answer: ``check_answer(question, response) -> (correct, feedback)``, ``reveal_answer``,
``score``. ``correct`` is None (not graded) for a numeric response that cannot be read (``course.quiz.numbers``).
"""
from __future__ import annotations

import html

from course.quiz.bank import Choice, Question
from course.quiz.numbers import NotUnderstood, convert, find_unit, parse_numeric


# ----------------------------------------------------------------- checking
def format_number(x: float) -> str:
    """Readable number: 131,072 / 16.67 / 287.8 / 1.687e+13."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 1e6:
        return f"{x:.4g}"
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.4g}"


def _example(q: Question) -> str:
    return "12" if q.rel_tol == 0 and q.answer == int(q.answer) else "12.5"


def _check_numeric(q: Question, response) -> tuple[bool | None, str]:
    try:
        value, written = parse_numeric(response, unit=q.unit, example=_example(q))
        value_in_unit = convert(value, written, find_unit(q.unit))
    except NotUnderstood as err:
        return None, f"{err}\nこの回答は採点していません。もう一度入力してください。"
    note = ""
    if written and find_unit(written) != find_unit(q.unit):
        note = f"（{format_number(value)} {written} = {format_number(value_in_unit)} {q.unit} として採点しました）"
    tol = max(q.abs_tol, q.rel_tol * abs(q.answer))
    correct = abs(value_in_unit - q.answer) <= tol
    head = "正解です。" if correct else f"不正解です（あなたの答え: {format_number(value_in_unit)} {q.unit}）。"
    body = f"答え: {format_number(q.answer)} {q.unit}（許容誤差 ±{format_number(tol)}）"
    return correct, f"{head}{note}{body}\n{q.explanation}".strip()


def _selected(q: Question, response) -> set[int]:
    selected = {response} if isinstance(response, int) else set(response or ())
    if not all(isinstance(i, int) and 0 <= i < len(q.choices) for i in selected):
        raise ValueError(f"{q.id}: choice indices must be in 0..{len(q.choices) - 1}, got {sorted(selected)}")
    return selected


def choice_label(j: int, choice: Choice) -> str:
    """``"A. <text>"``: how a choice is labelled in the widget and the feedback."""
    return f"{chr(65 + j)}. {choice.text}"


def _choices_verdict(q: Question, selected: set[int]) -> tuple[bool, str]:
    right = {i for i, c in enumerate(q.choices) if c.correct}
    letters = ", ".join(chr(65 + i) for i in sorted(right))
    return selected == right, ("正解です。" if selected == right else f"不正解です。正しい選択肢: {letters}")


def _check_choices(q: Question, response) -> tuple[bool, str]:
    selected = _selected(q, response)
    correct, head = _choices_verdict(q, selected)
    lines = [head]
    for i, c in enumerate(q.choices):
        mark = "○ 正しい" if c.correct else "× 誤り"
        chosen = "（あなたの選択）" if i in selected else ""
        lines.append(f"{choice_label(i, c)}{chosen} — {mark}: {c.explanation}")
    return correct, "\n".join(lines)


def check_answer(question: Question, response) -> tuple[bool | None, str]:
    """Grade a response: an index (single), indices (multiple), a number or "number unit" (numeric).

    Returns ``(correct, feedback)``: ``correct`` is True/False, or None when a numeric response was not
    understood (not graded; the feedback says why). Open questions are not graded: use :func:`reveal_answer`.
    """
    if question.kind in ("single", "multiple"):
        return _check_choices(question, response)
    if question.kind == "numeric":
        return _check_numeric(question, response)
    raise ValueError(f"{question.id}: open questions are not graded; use reveal_answer()")


def reveal_answer(question: Question) -> str:
    """The model answer (open) or the explanation with the answer (other kinds)."""
    if question.kind == "numeric":
        return f"答え: {format_number(question.answer)} {question.unit}\n{question.explanation}".strip()
    if question.kind == "open":
        return question.explanation
    return _check_choices(question, [i for i, c in enumerate(question.choices) if c.correct])[1]


def score(questions: list[Question], results: dict[str, bool | None]) -> tuple[int, int]:
    """(correct answers, graded questions); ``results`` maps question id -> last graded result (None: ignored)."""
    graded = [q for q in questions if q.graded]
    return sum(results.get(q.id) is True for q in graded), len(graded)


def _html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")
