"""Self-check quizzes: YAML question banks, answer checking, and a JupyterLab widget.

A bank is one YAML file per lesson in ``quizzes/``::

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
        unit: ms          # B/KB/MB/GB/TB: the calculator's bytes are converted
        tolerance: {rel: 0.01}   # or {abs: 0.1}; default rel 1%
        explanation: ...
      - id: q3
        type: open
        prompt: ...
        model_answer: ...

An argument in ``args`` may itself be ``{func, args}`` (a nested calculator
call). The logic is plain functions that tests call:

    questions = load_bank(bank_path("01_inference_basics"))
    correct, feedback = check_answer(questions[0], 1)
    n_correct, n_graded = score(questions, {"q1": True})

Numeric answers are never typed into the YAML: a question names a function of
``minimal_engine.calculators`` and its arguments (``answer_from``), and the
loader computes the answer, so quizzes and lessons share one source of numbers.

``QuizWidget`` only wires ipywidgets (no JupyterLab extension) to these
functions; its ``submit(i, response)`` and ``reveal(i)`` are what the buttons call.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from minimal_engine import calculators

QUIZ_DIR = Path(__file__).resolve().parent.parent / "quizzes"
KINDS = ("single", "multiple", "numeric", "open")
BYTE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}   # calculators return bytes
DEFAULT_REL_TOLERANCE = 0.01


@dataclass
class Choice:
    text: str
    correct: bool
    explanation: str


@dataclass
class Question:
    """One question. ``answer`` (numeric only) is computed from ``answer_from`` at load time."""

    id: str
    kind: str
    prompt: str
    choices: list[Choice] = field(default_factory=list)
    answer_from: dict | None = None
    answer: float | None = None
    unit: str = ""
    rel_tol: float = DEFAULT_REL_TOLERANCE
    abs_tol: float = 0.0
    explanation: str = ""      # shown after a numeric answer; the model answer of an open one

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


def _parse_question(raw: dict, where: str) -> Question:
    qid = raw.get("id") or where
    kind = raw.get("type")
    if kind not in KINDS:
        raise ValueError(f"{qid}: type must be one of {KINDS}, got {kind!r}")
    if not raw.get("prompt"):
        raise ValueError(f"{qid}: missing prompt")
    q = Question(id=qid, kind=kind, prompt=_text(raw["prompt"]),
                 explanation=_text(raw.get("explanation") or raw.get("model_answer")))
    if kind in ("single", "multiple"):
        for c in raw.get("choices") or []:
            if not _text(c.get("explanation")):
                raise ValueError(f"{qid}: every choice needs an explanation (missing for {c.get('text')!r})")
            q.choices.append(Choice(_text(c["text"]), bool(c.get("correct", False)), _text(c["explanation"])))
        n_correct = sum(c.correct for c in q.choices)
        if len(q.choices) < 2 or n_correct == 0:
            raise ValueError(f"{qid}: needs at least 2 choices and at least one correct one")
        if kind == "single" and n_correct != 1:
            raise ValueError(f"{qid}: a single-choice question needs exactly one correct choice, has {n_correct}")
    elif kind == "numeric":
        if "answer" in raw:
            raise ValueError(f"{qid}: write answer_from (a calculator call), not a typed answer")
        q.answer_from = raw.get("answer_from")
        try:
            value = compute_answer(q.answer_from)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{qid}: {err}") from err
        q.unit = str(raw.get("unit", ""))
        q.answer = value / BYTE_UNITS[q.unit] if q.unit in BYTE_UNITS else float(value)
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


def load_bank(path: str | Path) -> list[Question]:
    """Load and validate a bank; numeric answers are computed by the calculators."""
    raws = load_bank_data(path)["questions"]
    questions = [_parse_question(raw, f"question {i + 1}") for i, raw in enumerate(raws)]
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate question ids")
    return questions


# ----------------------------------------------------------------- checking
def format_number(x: float) -> str:
    """Readable number: 131,072 / 16.67 / 287.8 / 1.687e+13."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 1e6:
        return f"{x:.4g}"
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.4g}"


def parse_numeric(response) -> tuple[float, str]:
    """``16.7`` / ``"16.7 ms"`` / ``"287,834,112 B"`` / ``"1.69e13"`` -> (value, unit)."""
    if isinstance(response, (int, float)) and not isinstance(response, bool):
        return float(response), ""
    text = str(response).strip().lstrip("$＄")          # "$0.39" reads as 0.39
    m = re.fullmatch(r"([-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?)\s*(.*?)", text)
    if not m:
        raise ValueError(f"数値として読めません: {response!r}")
    return float(m.group(1).replace(",", "")), m.group(2)


def _norm_unit(unit: str) -> str:
    return unit.replace(" ", "").replace("／", "/").lower()


def _check_numeric(q: Question, response) -> tuple[bool, str]:
    try:
        value, unit = parse_numeric(response)
    except ValueError as err:
        return False, str(err)
    if unit and _norm_unit(unit) != _norm_unit(q.unit):
        units = {u.lower(): s for u, s in BYTE_UNITS.items()}
        if q.unit in BYTE_UNITS and unit.lower() in units:
            value = value * units[unit.lower()] / BYTE_UNITS[q.unit]
        else:
            return False, f"単位が違います: {unit} ではなく {q.unit} で答えてください。"
    tol = max(q.abs_tol, q.rel_tol * abs(q.answer))
    correct = abs(value - q.answer) <= tol
    head = "正解です。" if correct else f"不正解です（あなたの答え: {format_number(value)} {q.unit}）。"
    body = f"答え: {format_number(q.answer)} {q.unit}（許容誤差 ±{format_number(tol)}）"
    return correct, f"{head}{body}\n{q.explanation}".strip()


def _check_choices(q: Question, response) -> tuple[bool, str]:
    selected = {response} if isinstance(response, int) else set(response or ())
    if not all(isinstance(i, int) and 0 <= i < len(q.choices) for i in selected):
        raise ValueError(f"{q.id}: choice indices must be in 0..{len(q.choices) - 1}, got {sorted(selected)}")
    right = {i for i, c in enumerate(q.choices) if c.correct}
    correct = selected == right
    letters = ", ".join(chr(65 + i) for i in sorted(right))
    lines = ["正解です。" if correct else f"不正解です。正しい選択肢: {letters}"]
    for i, c in enumerate(q.choices):
        mark = "○ 正しい" if c.correct else "× 誤り"
        chosen = "（選択）" if i in selected else ""
        lines.append(f"{chr(65 + i)}. {c.text}{chosen} — {mark}: {c.explanation}")
    return correct, "\n".join(lines)


def check_answer(question: Question, response) -> tuple[bool, str]:
    """Grade a response: an index (single), indices (multiple), a number or "number unit" (numeric).

    Returns ``(correct, feedback)``; the feedback explains every choice.
    Open questions are not graded: use :func:`reveal_answer`.
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


def score(questions: list[Question], results: dict[str, bool]) -> tuple[int, int]:
    """(correct answers, graded questions); ``results`` maps question id -> last result."""
    graded = [q for q in questions if q.graded]
    return sum(bool(results.get(q.id)) for q in graded), len(graded)


# ------------------------------------------------------------------- widget
def _html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


class QuizWidget:
    """An ipywidgets view of a bank. Buttons call ``submit(i, response)`` / ``reveal(i)``."""

    def __init__(self, questions: list[Question], title: str = "", intro: str = ""):
        import ipywidgets as w

        self.questions, self.results = questions, {}
        self.inputs, self.feedback, self.buttons = [], [], []
        self.score_label = w.HTML()
        boxes = [w.HTML(f"<h3>{_html(title)}</h3><p>{_html(intro)}</p>")] if title else []
        for i, q in enumerate(questions):
            label = {"single": "単一選択", "multiple": "複数選択（当てはまるものをすべて）",
                     "numeric": f"数値（単位: {q.unit}）", "open": "記述"}[q.kind]
            # Choices are listed as text (long Japanese lines wrap there); the inputs are just A, B, ...
            listed = "".join(f"<br>{chr(65 + j)}. {_html(c.text)}" for j, c in enumerate(q.choices))
            head = w.HTML(f"<b>Q{i + 1}.</b> <i>[{label}]</i><br>{_html(q.prompt)}{listed}")
            letters = [chr(65 + j) for j in range(len(q.choices))]
            if q.kind == "single":
                field_ = w.RadioButtons(options=[(x, j) for j, x in enumerate(letters)], value=None,
                                        orientation="horizontal")
            elif q.kind == "multiple":
                field_ = w.HBox([w.Checkbox(description=x, indent=False, layout=w.Layout(width="60px"))
                                 for x in letters])
            elif q.kind == "numeric":
                field_ = w.HBox([w.Text(placeholder="数値を入力"), w.Label(q.unit)])
            else:
                field_ = w.Textarea(placeholder="自分の答えを書いてから「回答を見る」を押す",
                                    layout=w.Layout(width="90%"))
            button = w.Button(description="回答を見る" if q.kind == "open" else "回答する")
            button.on_click(lambda _b, i=i: self._on_click(i))
            self.inputs.append(field_)
            self.buttons.append(button)
            self.feedback.append(w.HTML())
            boxes.append(w.VBox([head, field_, button, self.feedback[-1]],
                                layout=w.Layout(margin="0 0 16px 0")))
        self._update_score()
        self.widget = w.VBox(boxes + [self.score_label])

    @classmethod
    def from_bank(cls, name: str | Path) -> QuizWidget:
        data = load_bank_data(name)
        return cls(load_bank(name), data.get("title", ""), data.get("intro", ""))

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
            self.feedback[i].value = "選択肢を1つ選んでください。"
        else:
            self.submit(i, self._read(i))

    def submit(self, i: int, response) -> tuple[bool, str]:
        """Grade question ``i``, show the feedback and update the score."""
        correct, text = check_answer(self.questions[i], response)
        self.results[self.questions[i].id] = correct
        color = "green" if correct else "firebrick"
        self.feedback[i].value = f"<div style='color:{color}'>{_html(text)}</div>"
        self._update_score()
        return correct, text

    def reveal(self, i: int) -> str:
        text = reveal_answer(self.questions[i])
        self.feedback[i].value = f"<div>{_html(text)}</div>"
        return text

    def score_text(self) -> str:
        right, total = score(self.questions, self.results)
        return f"得点: {right} / {total}（選択・数値問題のみ採点。回答済み {len(self.results)} 問）"

    def _update_score(self) -> None:
        self.score_label.value = f"<b>{_html(self.score_text())}</b>"

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)


def show_quiz(name: str) -> QuizWidget:
    """Build the widget for a bank in ``quizzes/`` (display it as a cell's last expression)."""
    return QuizWidget.from_bank(name)
