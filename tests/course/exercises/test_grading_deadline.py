"""grade() has one overall deadline for all calls of the learner's function (attack round 3 M5): a
slow but correct function gets a report within the limit, naming the overall limit, and the
progress file records the attempt; a report comes back when saving fails; bad deadline_s is a
clear error."""
from __future__ import annotations

import json
import os
import time

import pytest

from course.exercises import grade
from course.exercises.kit import call, grading_deadline
from solution_loader import load


def slow(fn, seconds: float):
    def wrapped(*args):
        time.sleep(seconds)
        return fn(*args)
    return wrapped


@pytest.mark.parametrize("exercise, module, name, per_call", [
    ("01_request_metrics", "ex01_request_metrics", "request_metrics", 0.3),
    ("04_block_hashes", "ex04_block_hashes", "block_hashes", 0.3),
])
def test_a_slow_function_gets_its_report_within_the_overall_deadline(exercise, module, name,
                                                                      per_call):
    solution = load(module, name)
    assert grade(exercise, solution, record=False).passed          # the right answer, fast
    t0 = time.monotonic()
    report = grade(exercise, slow(solution, per_call), deadline_s=1.0)
    took = time.monotonic() - t0
    assert took < 1.0 + 2 * per_call + 1.5, took    # not one call per case, each to its own limit
    assert not report.passed
    assert any("採点全体の制限時間（1 秒）" in c.message for c in report.cases), str(report)
    progress = json.loads(open(os.environ["COURSE_PROGRESS_FILE"], encoding="utf-8").read())
    assert progress["exercises"][exercise]["attempts"] >= 1               # recorded after


def test_calls_share_the_limit_and_each_keeps_its_own():
    with grading_deadline(0.5):
        assert call(lambda: 1, timeout_s=10).value == 1
        r = call(time.sleep, 2, timeout_s=10)
        assert r.status == "timeout" and "採点全体の制限時間（0.5 秒）" in r.error
        later = call(lambda: 1, timeout_s=10)                     # past the limit: at once
        assert later.status == "timeout" and "採点全体" in later.error
    r = call(time.sleep, 1, timeout_s=0.2)                        # outside: the call's own limit
    assert r.status == "timeout" and "0.2 秒以内に終わりませんでした" in r.error


@pytest.mark.parametrize("bad", [0, -1, "10", True, None])
def test_a_bad_deadline_is_named(bad):
    with pytest.raises(ValueError, match="deadline_s は正の秒数"):
        grade("01_request_metrics", lambda a, t: {}, deadline_s=bad)


def test_the_report_comes_back_when_progress_cannot_be_saved(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(folder / "progress.json"))
    import course.exercises as exercises

    def refuse(*args, **kwargs):
        raise PermissionError("read-only")
    monkeypatch.setattr(exercises, "record_exercise", refuse)
    report = grade("01_request_metrics", load("ex01_request_metrics", "request_metrics"))
    assert report.passed and "進み具合を保存できませんでした" in report.summary
