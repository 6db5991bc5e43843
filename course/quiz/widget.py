"""The ipywidgets view of a quiz bank (``course.quiz.bank``, graded by ``course.quiz.check``): labelled
choices, figures, per-choice feedback; ``show_quiz(name)`` builds it for a notebook.

Displayed through ``course.tooling.notebooks.widget_bundle`` so that a notebook opened before it runs shows a
Japanese placeholder, never the raw widget repr. DOM classes kept stable for the browser test:
``quiz-feedback`` (each feedback), ``quiz-score`` (the score), ``quiz-choices`` (the choice lists);
every submit button says 「回答する」 (open questions 「回答を見る」).
"""
from __future__ import annotations

from pathlib import Path

from course.quiz.bank import Question, load_bank, load_bank_data
from course.quiz.check import (_choices_verdict, _example, _html, _selected, check_answer, choice_label, reveal_answer,
                               score)
from course.quiz.figures import render_png

GREEN, RED, GREY, AMBER = "#1a7f37", "#b3261e", "#666666", "#8a5a00"
# RadioButtons / Checkbox labels have a fixed height and no wrapping by default: long Japanese choices
# would overlap or be cut. This style (one <style> element in the quiz's first HTML) lets them wrap.
QUIZ_CSS = """<style>
.quiz-choices, .quiz-choices .widget-radio-box { width: 100%; }
.quiz-choices .widget-checkbox, .quiz-choices .widget-inline-hbox { height: auto !important; }
.quiz-choices .widget-radio-box label, .quiz-choices label.widget-label-basic { display: flex !important; align-items: flex-start !important; height: auto !important;
  line-height: 1.5 !important; white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; margin: 2px 0 !important; }
.quiz-choices label span { white-space: normal !important; overflow: visible !important; }
.quiz-choices input { margin-top: 0.35em !important; flex: none; order: -1; float: none !important;
  align-self: flex-start !important; }
.quiz-feedback ul { list-style: none; padding-left: 0.5em; margin: 0.3em 0; }
.quiz-feedback li { margin: 0.25em 0; }
</style>"""


def choices_feedback_html(q: Question, response) -> str:
    """Per-choice feedback: green ○ for correct choices, red × for a wrong choice the learner chose,
    grey × for the other wrong ones; the learner's choices are marked."""
    selected = _selected(q, response)
    correct, head = _choices_verdict(q, selected)
    items = []
    for i, c in enumerate(q.choices):
        color = GREEN if c.correct else (RED if i in selected else GREY)
        mark = "○ 正しい" if c.correct else "× 誤り"
        chosen = " <b>（あなたの選択）</b>" if i in selected else ""
        items.append(f"<li style='color:{color}'>{mark} — <b>{_html(choice_label(i, c))}</b>{chosen}"
                     f"<br>{_html(c.explanation)}</li>")
    return (f"<div style='color:{GREEN if correct else RED}'><b>{_html(head)}</b></div>"
            f"<ul>{''.join(items)}</ul>")


class QuizWidget:
    """An ipywidgets view of a bank. Buttons call ``submit(i, response)`` / ``reveal(i)``."""

    def __init__(self, questions: list[Question], title: str = "", intro: str = "", chapter: str = ""):
        import ipywidgets as w

        self.questions, self.results = questions, {}
        self.title, self.intro, self.chapter = title, intro, chapter
        self.inputs, self.feedback, self.buttons, self.images = [], [], [], {}
        self.score_label = w.HTML()
        self.score_label.add_class("quiz-score")
        top = f"<h3>{_html(title)}</h3><p>{_html(intro)}</p>" if title else ""
        boxes = [w.HTML(QUIZ_CSS + top)]
        for i, q in enumerate(questions):
            label = {"single": "単一選択", "multiple": "複数選択（当てはまるものをすべて）",
                     "numeric": f"数値（単位: {q.unit}）", "open": "記述"}[q.kind]
            parts = [w.HTML(f"<b>Q{i + 1}.</b> <i>[{label}]</i><br>{_html(q.prompt)}")]
            if q.figure is not None:
                self.images[i] = w.Image(value=render_png(q.figure), format="png",
                                         layout=w.Layout(max_width="720px", width="100%"))
                parts += [self.images[i], w.HTML(f"<small style='color:{GREY}'>{_html(q.figure['caption'])}</small>")]
            labels = [choice_label(j, c) for j, c in enumerate(q.choices)]
            if q.kind == "single":
                field_ = w.RadioButtons(options=[(x, j) for j, x in enumerate(labels)], value=None,
                                        layout=w.Layout(width="100%"))
                field_.add_class("quiz-choices")
            elif q.kind == "multiple":
                field_ = w.VBox([w.Checkbox(description=x, indent=False, layout=w.Layout(width="100%"))
                                 for x in labels], layout=w.Layout(width="100%"))
                field_.add_class("quiz-choices")
            elif q.kind == "numeric":
                field_ = w.HBox([w.Text(placeholder=f"数値を入力（例: {_example(q)} または {_example(q)} {q.unit}）",
                                        layout=w.Layout(width="320px")), w.Label(q.unit)])
            else:
                field_ = w.Textarea(placeholder="自分の答えを書いてから「回答を見る」を押す",
                                    layout=w.Layout(width="90%"))
            button = w.Button(description="回答を見る" if q.kind == "open" else "回答する")
            button.on_click(lambda _b, i=i: self._on_click(i))
            feedback = w.HTML()
            feedback.add_class("quiz-feedback")
            self.inputs.append(field_)
            self.buttons.append(button)
            self.feedback.append(feedback)
            boxes.append(w.VBox(parts + [field_, button, feedback], layout=w.Layout(margin="0 0 16px 0")))
        self._update_score()
        self.widget = w.VBox(boxes + [self.score_label])

    @classmethod
    def from_bank(cls, name: str | Path) -> QuizWidget:
        data = load_bank_data(name)
        return cls(load_bank(name), data.get("title", ""), data.get("intro", ""), chapter=Path(str(name)).stem)

    def _read(self, i: int):
        q, field_ = self.questions[i], self.inputs[i]
        if q.kind == "single":
            return field_.value
        if q.kind == "multiple":
            return [j for j, box in enumerate(field_.children) if box.value]
        return field_.children[0].value

    def _on_click(self, i: int) -> None:
        if self.questions[i].kind == "open":
            self.reveal(i)
        elif self.questions[i].kind == "single" and self.inputs[i].value is None:
            self.feedback[i].value = f"<div style='color:{AMBER}'>選択肢を1つ選んでください。</div>"
        else:
            self.submit(i, self._read(i))

    def submit(self, i: int, response) -> tuple[bool | None, str]:
        """Grade question ``i``, show the feedback and update the score (a not-understood answer is not scored)."""
        q = self.questions[i]
        correct, text = check_answer(q, response)
        if correct is None:
            self.feedback[i].value = f"<div style='color:{AMBER}'>⚠ {_html(text)}</div>"
            return correct, text
        self.results[q.id] = correct
        if q.kind in ("single", "multiple"):
            self.feedback[i].value = choices_feedback_html(q, response)
        else:
            self.feedback[i].value = f"<div style='color:{GREEN if correct else RED}'>{_html(text)}</div>"
        self._update_score()
        self._record()
        return correct, text

    def _record(self) -> None:
        """Save the score for the guide's progress table (course.exercises.progress), if that module exists."""
        if not self.chapter:
            return
        try:
            from course.exercises.progress import record_quiz
        except ImportError:
            return
        right, total = score(self.questions, self.results)
        if total > 0:
            record_quiz(self.chapter, int(right), int(total))

    def reveal(self, i: int) -> str:
        text = reveal_answer(self.questions[i])
        self.feedback[i].value = f"<div>{_html(text)}</div>"
        return text

    def score_text(self) -> str:
        right, total = score(self.questions, self.results)
        return f"得点: {right} / {total}（選択・数値問題のみ採点。回答済み {len(self.results)} 問）"

    def _update_score(self) -> None:
        self.score_label.value = f"<b>{_html(self.score_text())}</b>"

    def _repr_mimebundle_(self, **kwargs):
        """The widget view, with every question as static text/html and text/plain (no answers) for a reader
        without a kernel; ``course.tooling.notebooks.strip_widget_views`` keeps those when saving."""
        from course.quiz.static import static_html, static_text
        from course.tooling.notebooks import widget_bundle
        data = widget_bundle(self.widget, static_text(self.questions, self.title), **kwargs)
        data["text/html"] = static_html(self.questions, self.title, self.intro)
        return data


def show_quiz(name: str):
    """Build the :class:`QuizWidget` for a bank in ``quizzes/`` (a cell's last expression)."""
    return QuizWidget.from_bank(name)
