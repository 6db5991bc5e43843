"""Exercises: ``grade(exercise_id, fn)`` runs a grader on a learner's function and returns a Report.

    from course.exercises import grade
    report = grade("01_request_metrics", request_metrics)
    report                     # a small table in Japanese (結果, 入力, 期待, あなたの関数, メッセージ)

Graders live one per module (``ex01_request_metrics.py`` ...), imported only when graded, so importing this
package stays cheap. Every grade is recorded in the progress file (progress.py), after the report
is made: a progress file that cannot be saved adds a warning to the report, never an exception.
A grading has one overall deadline (kit.grading_deadline; ``deadline_s``, default 600 s), so it
always ends with its report.
"""
from __future__ import annotations

import importlib

from course.exercises.kit import DEADLINE_S, Report, check_seconds, grading_deadline, summarize
from course.exercises.progress import attempts, record_exercise, show_progress
from course.exercises.registry import EXERCISE_IDS, REGISTRY


__all__ = ["grade", "show_progress", "EXERCISE_IDS", "get_grader", "Report"]


def get_grader(exercise_id: str):
    if exercise_id not in REGISTRY:
        raise ValueError(f"演習 {exercise_id!r} はありません。使えるのは {', '.join(EXERCISE_IDS)} です。")
    try:
        module = importlib.import_module(f"course.exercises.{REGISTRY[exercise_id]}")
    except ModuleNotFoundError as e:
        raise ValueError(f"演習 {exercise_id!r} の採点はまだ用意されていません（{e.name}）。") from None
    return module.GRADER


def grade(exercise_id: str, fn, record: bool = True, **options) -> Report:
    """Grade fn; options go to the grader's check (ctx). The hint escalates with the attempt number."""
    grader = get_grader(exercise_id)
    if not callable(fn):
        raise TypeError(f"grade の2つ目の引数には関数を渡してください（今は {type(fn).__name__}）。")
    overall = grading_deadline(check_seconds(options.get("deadline_s", DEADLINE_S)))
    try:
        with overall:
            cases = grader.check(fn, dict(options))
    except Exception as e:                       # the grader itself failed: still a report, never a traceback
        from course.exercises.kit import Case
        cases = [Case("採点", "", "", f"{type(e).__name__}: {e}", False,
                      "採点の途中でエラーが起きました。セルをもう一度実行してください。")]
    try:
        attempt = attempts(exercise_id) + 1
    except OSError:
        attempt = 1
    report = summarize(grader, cases, attempt)
    if record and not report.not_implemented:
        try:
            record_exercise(exercise_id, report.passed)
        except OSError as e:                     # a read-only or full disk: the report still shows
            report.summary += f"（⚠ 進み具合を保存できませんでした：{e}）"
    return report
