"""Self-check quizzes: YAML question banks, answer checking, and a JupyterLab widget.

A bank is one YAML file per lesson, ``quizzes/NN_topic.yaml`` (its notebook: ``NN_topic_quiz.ipynb``)::

    title: ...            # shown above the quiz
    intro: ...            # optional
    questions:
      - id: q1            # unique in the bank
        type: single      # single | multiple | numeric | open
        prompt: ...
        choices:          # single / multiple: every choice explains itself
          - {text: ..., correct: true, explanation: ...}
      - id: q2
        type: numeric
        prompt: ...
        answer_from: {func: tpot_ms_from_tok_s_user, args: {tok_s_user: 60}}
        unit: ms          # a unit of course.quiz_numbers.UNITS; B/KB/MB/GB/TB: the calculator's bytes are converted
        tolerance: {rel: 0.01}   # or {abs: 0.1}; default rel 1%
        depends_on: [q1]  # optional: questions this one builds on; they must come earlier
        explanation: ...
      - id: q3
        type: open
        prompt: ...
        model_answer: ...

An argument in ``args`` may itself be ``{func, args}`` (a nested calculator call). Numeric answers are
never typed into the YAML: ``answer_from`` names a function of ``minimal_engine.calculators`` and the
loader computes the answer, so quizzes and lessons share one source of numbers.

Figure questions (``course.quiz_figures``): a ``figure: {kind: sweep|timeline, caption, slo, data}`` block
holds a small example data set; the widget draws it, and ``answer_from`` names a figure function
(``max_concurrency_meeting_slo``, ``requests_over_slo``) called on the same data. In a single or
multiple question with a figure, each choice has a ``value`` (a concurrency, a request number): the
loader marks the choices correct from the computed answer (a ``correct:`` written in the YAML must
agree) and adds what the data says about each value to its explanation.

Checking. ``check_answer(question, response) -> (correct, feedback)`` where ``correct`` is

- ``True`` / ``False``: graded;
- ``None``: **not graded**. A numeric response that cannot be read as a number ("たくさん", empty) or
  that carries a unit the question cannot use ("16.7 GB" for a question in ms) is not a wrong answer:
  ``feedback`` says what was not understood and what is expected, and :func:`score` ignores it.

Numeric responses are read by ``course.quiz_numbers.parse_numeric``: full-width digits ("１６．７"),
thousands separators ("131,072"), Japanese unit words (ミリ秒, 秒, バイト, ギガバイト, トークン, 人, ドル)
and conversion between compatible units (s <-> ms, B/KB/MB/GB/TB/KiB ..., J <-> pJ per token)::

    questions = load_bank(bank_path("01_inference_basics"))
    correct, feedback = check_answer(questions[0], 1)
    n_correct, n_graded = score(questions, {"q1": True})

``QuizWidget`` (``course.quiz_widget``) only wires ipywidgets (no JupyterLab extension) to these functions; its
``submit(i, response)`` and ``reveal(i)`` are what the buttons (「回答する」, open questions 「回答を見る」)
call. Stable DOM classes for browser tests: ``quiz-feedback`` (each feedback), ``quiz-score`` (the score),
``quiz-choices`` (the choice lists).
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from course.quiz_figures import (FIGURE_FUNCS, choice_fact, figure_answer, max_concurrency_meeting_slo,  # noqa: F401
                                 render_png, requests_over_slo, validate_figure)
from course.quiz_numbers import NotUnderstood, convert, find_unit, parse_numeric  # noqa: F401
from minimal_engine import calculators

QUIZ_DIR = Path(__file__).resolve().parent.parent / "quizzes"
KINDS = ("single", "multiple", "numeric", "open")
BYTE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}   # calculators return bytes
FLOP_UNITS = {"FLOPs": 1, "MFLOPs": 1e6, "GFLOPs": 1e9, "TFLOPs": 1e12}   # calculators return FLOPs
SCALED_UNITS = {**BYTE_UNITS, **FLOP_UNITS}   # a question in one of these: the calculator's value is divided
DEFAULT_REL_TOLERANCE = 0.01


@dataclass
class Choice:
    text: str
    correct: bool
    explanation: str
    value: object = None       # figure questions: what the choice stands for (a request number, ...)


@dataclass
class Question:
    """One question. ``answer`` is computed from ``answer_from`` at load time (numeric, figure questions)."""

    id: str
    kind: str
    prompt: str
    choices: list[Choice] = field(default_factory=list)
    answer_from: dict | None = None
    answer: float | list | None = None
    unit: str = ""
    rel_tol: float = DEFAULT_REL_TOLERANCE
    abs_tol: float = 0.0
    explanation: str = ""      # shown after a numeric answer; the model answer of an open one
    figure: dict | None = None
    depends_on: list[str] = field(default_factory=list)

    @property
    def graded(self) -> bool:
        return self.kind != "open"


# ------------------------------------------------------------------ loading
def bank_path(name: str) -> Path:
    """Path of a bank: an existing file path, or a name such as ``"01_inference_basics"`` in ``quizzes/``."""
    path = Path(name)
    if path.is_file():
        return path
    filename = name if name.endswith(".yaml") else f"{name}.yaml"
    for folder in (QUIZ_DIR, Path.cwd(), Path.cwd() / "quizzes"):   # repo checkout, or a notebook's folder
        if (folder / filename).is_file():
            return folder / filename
    known = ", ".join(p.stem for p in sorted(QUIZ_DIR.glob("*.yaml")))
    raise ValueError(f"no quiz bank {name!r}; known banks: {known}")


def compute_answer(answer_from: dict) -> float:
    """Call ``calculators.<func>(**args)``; an argument may itself be a ``{func, args}`` mapping."""
    if not isinstance(answer_from, dict) or "func" not in answer_from:
        raise ValueError(f"answer_from must be a mapping with 'func' and 'args', got {answer_from!r}")
    name = answer_from["func"]
    if name not in calculators.__all__ or not callable(getattr(calculators, name)):
        known = ", ".join(n for n in calculators.__all__ if callable(getattr(calculators, n)))
        raise ValueError(f"unknown calculator {name!r}; known: {known}")
    args = {key: compute_answer(value) if isinstance(value, dict) and "func" in value else value
            for key, value in (answer_from.get("args") or {}).items()}
    return getattr(calculators, name)(**args)


_CJK = r"\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef"
_JP_PUNCT = "、。，：（）「」『』"
_FOLD_SPACE = re.compile(f"(?<=[{_CJK}])[ \\n]+(?=[{_CJK}])|(?<=[{_JP_PUNCT}])[ \\n]+|[ \\n]+(?=[{_JP_PUNCT}])")


def _text(value) -> str:
    """Strip, and drop the space that YAML folding (``>-``) leaves between Japanese characters."""
    return _FOLD_SPACE.sub("", str(value or "").strip())


def _answer(raw: dict, q: Question):
    q.answer_from = raw.get("answer_from")
    try:
        if q.figure is not None:
            return figure_answer(q.answer_from or {}, q.figure)
        return compute_answer(q.answer_from)
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"{q.id}: {err}") from err


def _parse_choices(raw: dict, q: Question) -> None:
    computed = _answer(raw, q) if "answer_from" in raw else None
    for c in raw.get("choices") or []:
        explanation = _text(c.get("explanation"))
        correct = bool(c.get("correct", False))
        if computed is not None:
            if "value" not in c:
                raise ValueError(f"{q.id}: each choice of a computed question needs a value ({c.get('text')!r})")
            is_right = c["value"] in computed if q.kind == "multiple" else c["value"] == computed
            if "correct" in c and bool(c["correct"]) != is_right:
                raise ValueError(f"{q.id}: choice {c.get('text')!r} is marked correct={c['correct']}, "
                                 f"but the data give {computed!r}")
            correct = is_right
            if q.figure is not None:
                explanation = f"{choice_fact(q.figure, c['value'])}{explanation}"
        if not explanation:
            raise ValueError(f"{q.id}: every choice needs an explanation (missing for {c.get('text')!r})")
        q.choices.append(Choice(_text(c["text"]), correct, explanation, c.get("value")))
    q.answer = computed
    n_correct = sum(c.correct for c in q.choices)
    if len(q.choices) < 2 or n_correct == 0:
        raise ValueError(f"{q.id}: needs at least 2 choices and at least one correct one")
    if q.kind == "single" and n_correct != 1:
        raise ValueError(f"{q.id}: a single-choice question needs exactly one correct choice, has {n_correct}")


def _parse_question(raw: dict, where: str) -> Question:
    qid = raw.get("id") or where
    kind = raw.get("type")
    if kind not in KINDS:
        raise ValueError(f"{qid}: type must be one of {KINDS}, got {kind!r}")
    if not raw.get("prompt"):
        raise ValueError(f"{qid}: missing prompt")
    q = Question(id=qid, kind=kind, prompt=_text(raw["prompt"]),
                 explanation=_text(raw.get("explanation") or raw.get("model_answer")),
                 depends_on=list(raw.get("depends_on") or []))
    if raw.get("figure") is not None:
        q.figure = validate_figure(raw["figure"], qid)
        q.figure["caption"] = _text(q.figure.get("caption"))
    if kind in ("single", "multiple"):
        _parse_choices(raw, q)
    elif kind == "numeric":
        if "answer" in raw:
            raise ValueError(f"{qid}: write answer_from (a calculator call), not a typed answer")
        value = _answer(raw, q)
        q.unit = str(raw.get("unit", ""))
        if find_unit(q.unit) is None:
            raise ValueError(f"{qid}: unknown unit {q.unit!r}; add it to course.quiz_numbers.UNITS")
        q.answer = float(value) / SCALED_UNITS.get(q.unit, 1)
        tol = raw.get("tolerance") or {}
        q.abs_tol = float(tol.get("abs", 0))
        q.rel_tol = float(tol.get("rel", 0 if "abs" in tol else DEFAULT_REL_TOLERANCE))
    elif not q.explanation:
        raise ValueError(f"{qid}: an open question needs a model_answer")
    return q


def load_bank_data(path: str | Path) -> dict:
    """The raw YAML mapping of a bank (``title``, ``intro``, ``questions``)."""
    with open(bank_path(str(path)), encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ValueError(f"{path}: a bank is a mapping with a 'questions' list")
    return data


def check_order(questions: list[Question]) -> None:
    """Every ``depends_on`` id names a question that comes earlier in the bank."""
    position = {q.id: i for i, q in enumerate(questions)}
    for i, q in enumerate(questions):
        for dep in q.depends_on:
            if dep not in position:
                raise ValueError(f"{q.id}: depends_on names an unknown question {dep!r}")
            if position[dep] >= i:
                raise ValueError(f"{q.id} (Q{i + 1}) builds on {dep} (Q{position[dep] + 1}): "
                                 f"{dep} must come earlier in the bank")


def load_bank(path: str | Path) -> list[Question]:
    """Load and validate a bank; answers are computed by the calculators or from the figure data."""
    raws = load_bank_data(path)["questions"]
    questions = [_parse_question(raw, f"question {i + 1}") for i, raw in enumerate(raws)]
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate question ids")
    check_order(questions)
    return questions


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


def show_quiz(name: str):
    """Build the :class:`~course.quiz_widget.QuizWidget` for a bank in ``quizzes/`` (a cell's last expression)."""
    from course.quiz_widget import QuizWidget
    return QuizWidget.from_bank(name)


def __getattr__(name: str):
    """``course.quiz.QuizWidget`` and friends live in :mod:`course.quiz_widget` (ipywidgets loads only when used)."""
    if name in ("QuizWidget", "choices_feedback_html", "QUIZ_CSS"):
        from course import quiz_widget
        return getattr(quiz_widget, name)
    raise AttributeError(f"module 'course.quiz' has no attribute {name!r}")
