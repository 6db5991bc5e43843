"""work/progress.json that is damaged but valid JSON, saved with a byte order mark, or in a
read-only folder (course/exercises/progress.py): rows(), record_quiz(), record_exercise() and
grade() never raise, the learner is warned, and what could not be used is kept aside (attack round
3: M3, L13)."""
import contextlib
import json
import os
import subprocess

import pytest

from course.exercises import grade, progress

EX = "01_request_metrics"


def wrong(arrival, times):
    return {"ttft": 0.0, "tpot": 0.0, "itl": [], "e2el": 0.0}


@pytest.fixture
def path(tmp_path, monkeypatch):
    p = tmp_path / "work" / "progress.json"
    p.parent.mkdir()
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(p))
    return p


@contextlib.contextmanager
def read_only(folder):
    """Make ``folder`` unwritable, also for root (``chattr +i``); skip where that is impossible."""
    immutable = os.geteuid() == 0
    if immutable:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here")
    else:
        folder.chmod(0o555)
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def test_a_file_with_a_byte_order_mark_loads(path):
    """L13: Notepad's BOM made the file count as broken, so the progress looked reset."""
    data = {"exercises": {EX: {"attempts": 2, "passed": True}},
            "quizzes": {"01": {"score": 4, "total": 5}}}
    path.write_text("\ufeff" + json.dumps(data), encoding="utf-8")
    assert progress.attempts(EX) == 2
    assert progress.rows([EX])[0] == {"章": "第1章", "クイズの得点": "4/5", "合格した演習": "1/1"}
    assert not list(path.parent.glob("*.broken-*"))


@pytest.mark.parametrize("content", [
    '{"exercises": [], "quizzes": {}}',
    '{"exercises": {"01_request_metrics": 5}}',
    '{"exercises": {"01_request_metrics": {"attempts": "x"}}}',
    '{"exercises": {"01_request_metrics": {"attempts": null}}}',
    '{"exercises": {}, "quizzes": []}',
    '{"exercises": {}, "quizzes": {"01": "4/5"}}',
    '{"exercises": {}, "quizzes": {"01": {"score": "4", "total": 5}}}',
    '[1, 2]',
])
def test_a_wrong_shaped_file_is_set_aside_with_a_warning_and_never_raises(path, content, capsys):
    path.write_text(content, encoding="utf-8")
    rows = progress.rows([EX])
    assert rows[0]["章"] == "第1章" and len(rows) == 11
    progress.record_quiz("01", 3, 5)
    assert progress.record_exercise(EX, False) == 1
    report = grade(EX, wrong)
    assert not report.passed and report.attempt == 2
    warning = capsys.readouterr().err
    assert "⚠ 進み具合のファイル" in warning and str(path) in warning
    aside = list(path.parent.glob("progress.json.broken-*"))
    assert len(aside) == 1 and aside[0].read_text(encoding="utf-8") == content, "original kept"
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["quizzes"]["01"] == {"score": 3, "total": 5}
    assert saved["exercises"][EX] == {"attempts": 2, "passed": False}


def test_repair_keeps_the_usable_entries(path, capsys):
    path.write_text(json.dumps({"exercises": {EX: {"attempts": 3, "passed": True}, "02_x": 5},
                                "quizzes": {"01": {"score": 4, "total": 5}, "02": "9/10"}}),
                    encoding="utf-8")
    assert progress.attempts(EX) == 3
    warning = capsys.readouterr().err
    assert "演習 02_x の記録 5" in warning and "クイズ 02 の得点 '9/10'" in warning
    assert progress.rows([EX])[0] == {"章": "第1章", "クイズの得点": "4/5", "合格した演習": "1/1"}
    assert capsys.readouterr().err == "", "repaired once: the file on disk is now clean"


def test_a_read_only_folder_makes_recording_a_warning_and_grade_still_reports(path, capsys):
    path.write_text(json.dumps({"exercises": {EX: {"attempts": 1, "passed": False}}}),
                    encoding="utf-8")
    with read_only(path.parent):
        assert progress.record_exercise(EX, False) == 2
        assert "進み具合を保存できませんでした" in capsys.readouterr().err
        progress.record_quiz("01", 3, 5)
        assert "進み具合を保存できませんでした" in capsys.readouterr().err
        report = grade(EX, wrong)
        assert report.attempt == 2 and not report.passed and report.cases
        assert "進み具合を保存できませんでした" in capsys.readouterr().err
    assert json.loads(path.read_text(encoding="utf-8"))["exercises"][EX]["attempts"] == 1


def test_a_broken_file_in_a_read_only_folder_is_a_warning(path, capsys):
    path.write_text("{not json", encoding="utf-8")
    with read_only(path.parent):
        assert progress.rows([EX])[0]["合格した演習"] == "0/1"
        assert progress.record_exercise(EX, True) == 1
        report = grade(EX, wrong)
    assert report.cases
    err = capsys.readouterr().err
    assert "別名で残すこともできませんでした" in err and "保存できませんでした" in err
    assert path.read_text(encoding="utf-8") == "{not json", "the unreadable file is left as it was"
