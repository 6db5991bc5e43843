"""Odd contents of ``work/`` (course/tooling/workspace.py): a file where a folder belongs, a
dangling link, a notebook that is not JSON, a manifest of the wrong shape, a read-only folder. Each
gives a Japanese message naming the path and what to do, never a traceback, and the other notebooks
are still synced."""
import contextlib
import os
import subprocess
import sys

import pytest
from test_workspace import git, notebook, repos  # noqa: F401 (fixture)

from course.tooling import workspace


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


def cli(learner, *args):
    return subprocess.run([sys.executable, "-m", "course.tooling.workspace", "--root", str(learner),
                           *args], capture_output=True, text=True)


def test_odd_work_contents_are_named_and_the_rest_still_syncs(repos):
    _, learner = repos
    work = learner / "work"
    work.mkdir()
    (work / "lessons").write_text("フォルダのはずがファイル", encoding="utf-8")
    (work / "labs").mkdir()
    (work / "labs/01_lab.ipynb").symlink_to(work / "nowhere" / "lab.ipynb")
    (work / "quizzes").mkdir()
    (work / "quizzes/01_basics_quiz.ipynb").write_text("{壊れた JSON", encoding="utf-8")
    (work / ".course-sync.json").write_text("[]", encoding="utf-8")
    out = cli(learner, "sync")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "⚠ work/lessons はフォルダであるべきところにあるファイルです" in out.stdout
    assert "⚠ work/labs/01_lab.ipynb は、指す先がないシンボリックリンクです" in out.stdout
    assert "このリンクを削除してから" in out.stdout
    assert not (work / "nowhere").exists(), "nothing was written through the dangling link"
    kept = (work / "quizzes/01_basics_quiz.ipynb").read_text(encoding="utf-8")
    assert kept == "{壊れた JSON", "a copy that is not JSON is the learner's: kept"
    # once the learner fixes the paths, sync copies what was missing
    (work / "lessons").unlink()
    (work / "labs/01_lab.ipynb").unlink()
    result = workspace.sync(learner)
    assert result.problems == [] and "lessons/01_basics.ipynb" in result.copied
    assert "labs/01_lab.ipynb" in result.copied


def test_reset_with_a_manifest_of_the_wrong_shape_says_where_the_copy_went(repos):
    """L5: with work/.course-sync.json = null, reset raised TypeError after replacing the copy."""
    _, learner = repos
    work = learner / "work"
    workspace.sync(learner)
    (work / "labs/01_lab.ipynb").write_text(notebook("学習者のラボ"), encoding="utf-8")
    (work / ".course-sync.json").write_text("null", encoding="utf-8")
    out = cli(learner, "reset", "labs/01_lab.ipynb")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "backups" in out.stdout
    backup = next((work / "backups").rglob("01_lab.ipynb"))
    assert "学習者のラボ" in backup.read_text(encoding="utf-8")


def test_a_work_file_instead_of_a_folder_is_a_message(repos):
    _, learner = repos
    (learner / "work").write_text("", encoding="utf-8")
    out = cli(learner, "sync")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "がフォルダではありません" in out.stderr and "移して" in out.stderr


def test_a_read_only_work_folder_is_a_message_and_other_folders_still_sync(repos):
    _, learner = repos
    work = learner / "work"
    (work / "labs").mkdir(parents=True)
    with read_only(work / "labs"):
        out = cli(learner, "sync")
        reset = cli(learner, "reset", "labs/01_lab.ipynb")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "labs/01_lab.ipynb に書き込めません（読み取り専用です）" in out.stdout
    assert "新しくコピーしました: work/lessons/01_basics.ipynb" in out.stdout
    assert reset.returncode == 1 and "Traceback" not in reset.stderr
    assert "書き込めません" in reset.stderr
