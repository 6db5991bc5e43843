"""A static rendering of a quiz bank (questions and choices, never answers or explanations).

It is the ``text/html`` and ``text/plain`` of the quiz cell's output next to the live widget's view: a notebook
read without a kernel (GitHub, a JupyterLab that has not run the cell) shows every question; a running kernel
shows the widget instead (the widget view's mime type wins over text/html).
"""
from __future__ import annotations

from course.quiz.bank import Question
from course.quiz.check import _html, choice_label

KIND_JA = {"single": "単一選択", "multiple": "複数選択（当てはまるものをすべて）", "numeric": "数値", "open": "記述"}
NOTE = "（このセルを実行すると、ここで回答できるクイズが表示されます。下は問題の一覧です。答えと解説は回答すると表示されます）"


def _kind(q: Question) -> str:
    return f"数値（単位: {q.unit}）" if q.kind == "numeric" and q.unit else KIND_JA[q.kind]


def static_text(questions: list[Question], title: str = "") -> str:
    lines = [NOTE, ""] + ([title, ""] if title else [])
    for i, q in enumerate(questions):
        lines.append(f"Q{i + 1}. [{_kind(q)}] {q.prompt}")
        if q.figure is not None:
            lines.append(f"  （図: {q.figure.get('caption', '')}）")
        lines += [f"  {choice_label(j, c)}" for j, c in enumerate(q.choices)]
        lines.append("")
    return "\n".join(lines)


def static_html(questions: list[Question], title: str = "", intro: str = "") -> str:
    parts = [f"<div class='quiz-static'><p style='color:#555'><i>{_html(NOTE)}</i></p>"]
    if title:
        parts.append(f"<h3>{_html(title)}</h3><p>{_html(intro)}</p>")
    for i, q in enumerate(questions):
        parts.append(f"<p><b>Q{i + 1}.</b> <i>[{_html(_kind(q))}]</i><br>{_html(q.prompt)}</p>")
        if q.figure is not None:
            parts.append(f"<p><small>（図: {_html(q.figure.get('caption', ''))}）</small></p>")
        if q.choices:
            items = "".join(f"<li>{_html(choice_label(j, c))}</li>" for j, c in enumerate(q.choices))
            parts.append(f"<ul style='list-style:none'>{items}</ul>")
    return "".join(parts) + "</div>"
