"""A learner's progress: graded exercises and quiz scores, kept in ``work/progress.json`` (never tracked).

``COURSE_PROGRESS_FILE`` names another file (tests set it to a temporary one). Writes are atomic (a temporary
file, then os.replace); a file that cannot be read is kept aside as ``progress.json.broken-<time>`` and a fresh
one is started, so a damaged file never stops a notebook.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def progress_file() -> Path:
    env = os.environ.get("COURSE_PROGRESS_FILE", "").strip()
    return Path(env) if env else ROOT / "work" / "progress.json"


def load() -> dict:
    path = progress_file()
    if not path.exists():
        return {"exercises": {}, "quizzes": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
        data.setdefault("exercises", {})
        data.setdefault("quizzes", {})
        return data
    except (ValueError, OSError):
        path.replace(path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}"))
        return {"exercises": {}, "quizzes": {}}


def _save(data: dict) -> None:
    path = progress_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def attempts(exercise_id: str) -> int:
    return int(load()["exercises"].get(exercise_id, {}).get("attempts", 0))


def record_exercise(exercise_id: str, passed: bool) -> int:
    """Count one attempt (and remember a pass); returns the attempt number."""
    data = load()
    e = data["exercises"].setdefault(exercise_id, {"attempts": 0, "passed": False})
    e["attempts"] = int(e.get("attempts", 0)) + 1
    e["passed"] = bool(e.get("passed")) or bool(passed)
    _save(data)
    return e["attempts"]


def record_quiz(chapter: str, score: int, total: int) -> None:
    if not (isinstance(score, int) and isinstance(total, int) and 0 <= score <= total and total > 0):
        raise ValueError(f"得点は 0 ≤ score ≤ total（total > 0）の整数で渡してください（今は {score!r}/{total!r}）")
    data = load()
    data["quizzes"][str(chapter)] = {"score": score, "total": total}
    _save(data)


REVIEW_LABEL = "総復習"      # quizzes/11_review: the whole course, its own row after chapter 10


def quiz_row(key: str) -> str | None:
    """The row of the progress table a quiz score saved under ``key`` belongs to: ``"05_batching"``,
    ``"05"`` and ``"5"`` -> ``"第5章"``; ``"11_review"`` -> ``"総復習"``; anything else -> None.
    (A quiz records under its bank's name, ``course.quiz.widget.QuizWidget.from_bank``.)"""
    head = str(key).split("_", 1)[0]
    if not head.isdigit():
        return None
    n = int(head)
    if 1 <= n <= 10:
        return f"第{n}章"
    return REVIEW_LABEL if n == 11 else None


def rows(exercise_ids: list[str] | None = None) -> list[dict]:
    """One row per chapter (第1章 … 第10章) and one for the review quiz (総復習): 章, クイズの得点, 合格した演習."""
    data = load()
    if exercise_ids is None:
        from course.exercises.registry import EXERCISE_IDS
        exercise_ids = EXERCISE_IDS
    quizzes = {}
    for key, q in data["quizzes"].items():
        row = quiz_row(key)
        if row and isinstance(q, dict) and "score" in q and "total" in q:
            quizzes[row] = q            # both "05" and "05_batching" saved: the later one in the file counts
    out = []
    for ch in [*range(1, 12)]:
        label = f"第{ch}章" if ch <= 10 else REVIEW_LABEL
        q = quizzes.get(label)
        ex = [i for i in exercise_ids if i.startswith(f"{ch:02d}_")]
        done = [i for i in ex if data["exercises"].get(i, {}).get("passed")]
        out.append({"章": label, "クイズの得点": f"{q['score']}/{q['total']}" if q else "—",
                    "合格した演習": f"{len(done)}/{len(ex)}" if ex else "—"})
    return out


def show_progress():
    import pandas as pd
    return pd.DataFrame(rows()).set_index("章")
