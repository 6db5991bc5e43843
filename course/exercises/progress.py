"""A learner's progress: graded exercises and quiz scores, kept in ``work/progress.json``
(never tracked).

``COURSE_PROGRESS_FILE`` names another file (tests set it to a temporary one). A damaged file never
stops a notebook and never raises out of ``load``, ``rows``, ``record_quiz`` or ``record_exercise``:

- a file that is not JSON, or JSON that is not an object, is kept aside as
  ``progress.json.broken-<time>`` and a fresh one is started;
- valid JSON of the wrong shape (``"exercises": 5``, a quiz score that is a string ...) is repaired:
  the entries that cannot be used are dropped, the original is copied aside as ``.broken-<time>``
  first;
- a UTF-8 byte order mark (Windows Notepad) is accepted;
- when the file cannot be written (a read-only or full disk), recording prints a warning to stderr
  and returns normally, so ``grade`` still shows its report.

Writes are atomic (a temporary file, then ``os.replace``).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def progress_file() -> Path:
    env = os.environ.get("COURSE_PROGRESS_FILE", "").strip()
    return Path(env) if env else ROOT / "work" / "progress.json"


def _warn(message: str) -> None:
    print(f"⚠ {message}", file=sys.stderr)


def _aside(path: Path) -> Path:
    """A name for the broken file that no earlier one has: ``.broken-<time>``, then ``-2`` ..."""
    base = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
    target, k = base, 1
    while target.exists():
        k += 1
        target = base.with_name(f"{base.name}-{k}")
    return target


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _repair(data: dict) -> tuple[dict, list[str]]:
    """The usable part of ``data`` and, in Japanese, what had to be dropped or fixed."""
    fixed, notes = {k: v for k, v in data.items() if k not in ("exercises", "quizzes")}, []
    exercises = data.get("exercises", {})
    if not isinstance(exercises, dict):
        notes.append(f"exercises が辞書ではありません（{type(exercises).__name__}）")
        exercises = {}
    fixed["exercises"] = {}
    for key, entry in exercises.items():
        attempts = _count(entry.get("attempts", 0)) if isinstance(entry, dict) else None
        passed = entry.get("passed", False) if isinstance(entry, dict) else None
        if attempts is None or passed not in (True, False):    # (1 and 0 count as True, False)
            notes.append(f"演習 {key} の記録 {entry!r}")
            continue
        fixed["exercises"][key] = {**entry, "attempts": attempts, "passed": bool(passed)}
    quizzes = data.get("quizzes", {})
    if not isinstance(quizzes, dict):
        notes.append(f"quizzes が辞書ではありません（{type(quizzes).__name__}）")
        quizzes = {}
    fixed["quizzes"] = {}
    for key, entry in quizzes.items():
        score = _count(entry.get("score")) if isinstance(entry, dict) else None
        total = _count(entry.get("total")) if isinstance(entry, dict) else None
        if score is None or total is None or not 0 <= score <= total or total == 0:
            notes.append(f"クイズ {key} の得点 {entry!r}")
            continue
        fixed["quizzes"][key] = entry
    return fixed, notes


def load() -> dict:
    """The progress, ``{"exercises": {...}, "quizzes": {...}}``, whatever the file holds.
    Never raises."""
    path = progress_file()
    fresh = {"exercises": {}, "quizzes": {}}
    if not path.exists() and not path.is_symlink():
        return fresh
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(data, dict):
            raise ValueError(f"JSON のオブジェクトではありません（{type(data).__name__}）")
    except (ValueError, OSError, RecursionError) as err:
        try:
            target = _aside(path)
            path.replace(target)
            _warn(f"進み具合のファイル {path} を読めなかったため（{err}）、{target.name} として残し、"
                  "新しく記録を始めます。")
        except OSError as move_err:
            _warn(f"進み具合のファイル {path} を読めず（{err}）、別名で残すこともできませんでした"
                  f"（{move_err}）。このファイルを直すか移すまで、進み具合は保存されません。")
        return fresh
    fixed, notes = _repair(data)
    if notes:
        try:
            target = _aside(path)
            shutil.copyfile(path, target)
        except OSError as err:          # not kept aside: then the file is not rewritten either
            _warn(f"進み具合のファイル {path} の次の記録は使えないため、無視します: {'、'.join(notes)}。"
                  f"（元のファイルを別名で残せなかったため（{err}）、ファイルはそのままです。）")
            return fixed
        saved = _save(fixed, quiet=True)
        _warn(f"進み具合のファイル {path} の次の記録は使えないため、外しました: {'、'.join(notes)}。"
              f"元のファイルは {target.name} として残しました。" + (f"（{saved}）" if saved else ""))
    return fixed


def _save(data: dict, quiet: bool = False) -> str | None:
    """Write ``data`` atomically. Returns None, or a Japanese warning when it cannot (printed unless
    ``quiet``); never raises."""
    path = progress_file()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
        os.replace(tmp, path)
        return None
    except OSError as err:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        message = (f"進み具合を保存できませんでした（{err}）。今回の結果は記録されません。"
                   f"{path.parent} に書き込めるか（読み取り専用でないか、空き容量があるか）確かめてください。")
        if not quiet:
            _warn(message)
        return message


def attempts(exercise_id: str) -> int:
    return load()["exercises"].get(exercise_id, {}).get("attempts", 0)


def record_exercise(exercise_id: str, passed: bool) -> int:
    """Count one attempt (and remember a pass); returns the attempt number.
    A failed save only warns."""
    data = load()
    e = data["exercises"].setdefault(exercise_id, {"attempts": 0, "passed": False})
    e["attempts"] += 1
    e["passed"] = e["passed"] or bool(passed)
    _save(data)
    return e["attempts"]


def record_quiz(chapter: str, score: int, total: int) -> None:
    """Save a quiz score; a failed save only warns. ValueError for a score that is not one."""
    if not (isinstance(score, int) and isinstance(total, int) and 0 <= score <= total
            and total > 0):
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
            quizzes[row] = q    # both "05" and "05_batching" saved: the later one counts
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
