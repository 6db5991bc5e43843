"""Quiz banks: ``quizzes/NN_topic.yaml`` read into ``Question`` objects, numeric answers computed from
``minimal_engine.calculators`` (``answer_from``), figure questions' choices marked from their data.

    questions = load_bank(bank_path("01_inference_basics"))

The YAML format is described in ``course.quiz`` (the package's docstring); grading is ``course.quiz.check``.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from course.quiz.figures import choice_fact, figure_answer, validate_figure
from course.quiz.numbers import find_unit
from minimal_engine import calculators

QUIZ_DIR = Path(__file__).resolve().parents[2] / "quizzes"
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
    if q.figure is None:
        # Writers tend to put the right answer first; the order shown is a fixed shuffle per question id,
        # the same on every load, so "always A" never passes (figure questions keep their data's order).
        random.Random(f"choices:{q.id}").shuffle(q.choices)


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
            raise ValueError(f"{qid}: unknown unit {q.unit!r}; add it to course.quiz.numbers.UNITS")
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
    _spread_single_answers(questions)
    return questions


def _spread_single_answers(questions: list[Question]) -> None:
    """After the per-question shuffle, rotate each single-choice question's choices so that the right
    answers of a bank sit at different letters in turn (B, C, D, ...): one letter never passes them all."""
    k = 0
    for q in questions:
        if q.kind != "single" or q.figure is not None:
            continue
        n = len(q.choices)
        shift = ([c.correct for c in q.choices].index(True) - (k + 1) % n) % n
        q.choices[:] = q.choices[shift:] + q.choices[:shift]
        k += 1
