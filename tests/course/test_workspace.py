"""The learner's working copies (course/tooling/workspace.py): `make lab` works in work/, `make update` pulls new
chapters even after the learner ran and edited notebooks, and a copy can be refreshed with a backup."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course.tooling import workspace

ROOT = Path(__file__).resolve().parents[2]


def notebook(text: str) -> str:
    cell = {"cell_type": "markdown", "metadata": {}, "source": [text]}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, ensure_ascii=False)


def git(cwd, *args):
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def repos(tmp_path, monkeypatch):
    """(upstream, learner): a course repository and a learner's clone of it."""
    for var in ("GIT_AUTHOR", "GIT_COMMITTER"):
        monkeypatch.setenv(f"{var}_NAME", "test")
        monkeypatch.setenv(f"{var}_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))   # no user settings leak in
    up = tmp_path / "upstream"
    files = {"lessons/00_course_guide.ipynb": notebook("ガイド [ラボ](../labs/01_lab.ipynb)"),
             "lessons/01_basics.ipynb": notebook("第1章"),
             "labs/01_lab.ipynb": notebook("ラボ1"),
             "quizzes/01_basics_quiz.ipynb": notebook("クイズ1"),
             "quizzes/01_basics.yaml": "questions: []\n",
             ".gitignore": "/work/\n"}
    for rel, text in files.items():
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        (up / rel).write_text(text, encoding="utf-8")
    git(up, "init", "-q", "-b", "main")
    git(up, "add", ".")
    git(up, "commit", "-q", "-m", "chapter 1")
    learner = tmp_path / "learner"
    git(tmp_path, "clone", "-q", str(up), str(learner))
    return up, learner


def upstream_adds_chapter_and_changes_lab(up):
    (up / "lessons/02_next.ipynb").write_text(notebook("第2章"), encoding="utf-8")
    (up / "labs/01_lab.ipynb").write_text(notebook("ラボ1（修正版）"), encoding="utf-8")
    (up / "lessons/01_basics.ipynb").write_text(notebook("第1章（修正版）"), encoding="utf-8")
    git(up, "add", ".")
    git(up, "commit", "-q", "-m", "chapter 2")


def test_sync_copies_each_notebook_once_and_never_overwrites(repos):
    _, learner = repos
    result = workspace.sync(learner)
    work = learner / "work"
    assert result.copied == ["labs/01_lab.ipynb", "lessons/00_course_guide.ipynb", "lessons/01_basics.ipynb",
                             "quizzes/01_basics_quiz.ipynb"]
    assert not (work / "quizzes/01_basics.yaml").exists(), "banks stay in quizzes/ (course.quiz.QUIZ_DIR)"
    (work / "labs/01_lab.ipynb").write_text(notebook("ラボ1 + 学習者の出力"), encoding="utf-8")
    again = workspace.sync(learner)
    assert again.copied == [] and "labs/01_lab.ipynb" in again.kept
    assert "学習者の出力" in (work / "labs/01_lab.ipynb").read_text(encoding="utf-8")
    assert git(learner, "status", "--porcelain") == "", "copies are gitignored, the checkout stays clean"


def test_plain_git_pull_fails_after_running_a_tracked_notebook(repos):
    """The problem the workspace solves: a run (autosaved) tracked notebook blocks `git pull`."""
    up, learner = repos
    (learner / "labs/01_lab.ipynb").write_text(notebook("ラボ1 + 実行結果"), encoding="utf-8")
    upstream_adds_chapter_and_changes_lab(up)
    pulled = subprocess.run(["git", "pull", "--ff-only"], cwd=learner, capture_output=True, text=True)
    assert pulled.returncode != 0 and "local changes" in pulled.stderr


def test_update_pulls_new_chapter_and_keeps_learner_work(repos):
    up, learner = repos
    work = learner / "work"
    workspace.sync(learner)
    (work / "labs/01_lab.ipynb").write_text(notebook("学習者のラボ"), encoding="utf-8")
    # the learner also ran a tracked notebook directly (one without a copy, one with a copy)
    (work / "quizzes/01_basics_quiz.ipynb").unlink()
    (learner / "quizzes/01_basics_quiz.ipynb").write_text(notebook("元のクイズを実行"), encoding="utf-8")
    (learner / "labs/01_lab.ipynb").write_text(notebook("元のラボを編集"), encoding="utf-8")
    upstream_adds_chapter_and_changes_lab(up)

    saved, _, result = workspace.update(learner)

    assert (learner / "lessons/02_next.ipynb").exists(), "the pull succeeded"
    assert "ラボ1（修正版）" in (learner / "labs/01_lab.ipynb").read_text(encoding="utf-8")
    assert result.copied == ["lessons/02_next.ipynb"] and (work / "lessons/02_next.ipynb").exists()
    assert (work / "labs/01_lab.ipynb").read_text(encoding="utf-8") == notebook("学習者のラボ")
    assert result.changed_upstream == ["labs/01_lab.ipynb"], "the learner is told the lab was revised"
    assert result.refreshed == ["lessons/01_basics.ipynb"], "a copy the learner never changed gets the new version"
    assert "第1章（修正版）" in (work / "lessons/01_basics.ipynb").read_text(encoding="utf-8")
    # an edited tracked notebook without a copy becomes the copy; one with a copy goes to backups/
    assert saved["quizzes/01_basics_quiz.ipynb"] == work / "quizzes/01_basics_quiz.ipynb"
    assert "元のクイズを実行" in (work / "quizzes/01_basics_quiz.ipynb").read_text(encoding="utf-8")
    backup = saved["labs/01_lab.ipynb"]
    assert backup.parent.parent.parent.name == "backups" and "元のラボを編集" in backup.read_text(encoding="utf-8")
    assert git(learner, "status", "--porcelain") == ""


def test_renamed_notebook_gets_a_new_copy_and_the_old_one_is_kept(repos):
    up, learner = repos
    workspace.sync(learner)
    git(up, "mv", "labs/01_lab.ipynb", "labs/01_renamed_lab.ipynb")
    git(up, "commit", "-q", "-m", "rename")
    (learner / "quizzes/01_basics_quiz.ipynb").write_text(notebook("元のクイズを実行"), encoding="utf-8")
    saved, _, result = workspace.update(learner)
    assert result.copied == ["labs/01_renamed_lab.ipynb"] and result.orphaned == ["labs/01_lab.ipynb"]
    assert (learner / "work/labs/01_lab.ipynb").exists()
    backup = saved["quizzes/01_basics_quiz.ipynb"]        # the quiz already had a copy: the run goes to backups/
    assert backup.is_relative_to(learner / "work" / "backups")
    assert "元のクイズを実行" in backup.read_text(encoding="utf-8")
    report = workspace.report(result, learner / "work")
    assert "元のノートブックがなくなったコピー" in report
    assert "新しくコピーしました: work/labs/01_renamed_lab.ipynb" in report


def test_reset_copy_backs_up_and_refreshes(repos):
    _, learner = repos
    work = learner / "work"
    workspace.sync(learner)
    (work / "labs/01_lab.ipynb").write_text(notebook("壊してしまったラボ"), encoding="utf-8")
    backup = workspace.reset_copy(learner, "work/labs/01_lab.ipynb")
    assert "壊してしまったラボ" in backup.read_text(encoding="utf-8")
    assert (work / "labs/01_lab.ipynb").read_bytes() == (learner / "labs/01_lab.ipynb").read_bytes()
    assert workspace.resolve_notebook(learner, "01_lab") == "labs/01_lab.ipynb"
    with pytest.raises(workspace.WorkspaceError, match="見つかりません"):
        workspace.reset_copy(learner, "99_none.ipynb")


def test_cli_sync_and_status(repos):
    _, learner = repos
    run = [sys.executable, "-m", "course.tooling.workspace", "--root", str(learner)]
    out = subprocess.run([*run, "sync"], capture_output=True, text=True, check=True).stdout
    assert "新しくコピーしました: work/lessons/00_course_guide.ipynb" in out
    out = subprocess.run([*run, "status"], capture_output=True, text=True, check=True).stdout
    assert "作業用コピー: 4 / 4" in out


def test_make_lab_syncs_then_opens_the_guide_copy():
    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    lines = dry.replace("\\\n", " ").splitlines()
    sync = next(i for i, l in enumerate(lines) if "course.tooling.workspace sync" in l)
    lab = next(i for i, l in enumerate(lines) if "jupyter lab" in l)
    assert sync < lab and "--LabApp.default_url=/lab/tree/work/lessons/00_course_guide.ipynb" in lines[lab]
    update = subprocess.run(["make", "-n", "update"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "course.tooling.workspace update" in update
    reset = subprocess.run(["make", "-n", "reset-copy", "NB=labs/x.ipynb"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60).stdout
    assert "course.tooling.workspace reset labs/x.ipynb" in reset
    ignored = subprocess.run(["git", "check-ignore", "-q", "work/lessons/00_course_guide.ipynb"], cwd=ROOT)
    assert ignored.returncode == 0, "work/ is gitignored"


def test_course_and_quiz_banks_load_from_a_copy_folder(tmp_path):
    """A notebook in work/quizzes/ runs in that folder: `course` and the banks come from the repository."""
    folder = tmp_path / "work" / "quizzes"
    folder.mkdir(parents=True)
    banks = [p.stem for p in (ROOT / "quizzes").glob("*.yaml")]
    assert banks
    code = ("import sys; from course.quiz.bank import load_bank; from course.labs import lab01; "
            "[load_bank(b) for b in sys.argv[1:]]; print('ok')")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code, *banks], cwd=folder, capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_every_relative_link_resolves_from_originals_and_from_copies(tmp_path):
    """Links such as ../course/TERMS.md or ../labs/x.ipynb work in the tracked notebooks (GitHub) and in the
    learner's copies under work/ (JupyterLab), which get symbolic links to the code folders."""
    import re
    work = tmp_path / "work"
    workspace.sync(ROOT, work)
    link = re.compile(r"\]\((?!https?:|#|mailto:)([^)\s]+)\)")
    checked = 0
    for rel in workspace.course_notebooks(ROOT):
        cells = json.loads((ROOT / rel).read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        for target in link.findall(text):
            target = target.split("#")[0]
            for base in (ROOT, work):
                assert (base / rel).parent.joinpath(target).exists(), f"{rel}: link {target} is broken under {base}"
            checked += 1
    assert checked > 0
    assert (work / "course").is_symlink() and (work / "course" / "TERMS.md").is_file()


def test_two_quick_resets_keep_both_backups(repos):
    """Issue 29 #1: two resets within one second used the same backups/<second>/ folder, so the second backup
    (the pristine copy) overwrote the first (the learner's work)."""
    _, learner = repos
    work = learner / "work"
    workspace.sync(learner)
    (work / "labs/01_lab.ipynb").write_text(notebook("学習者の大事なラボ"), encoding="utf-8")
    first = workspace.reset_copy(learner, "labs/01_lab.ipynb")
    second = workspace.reset_copy(learner, "labs/01_lab.ipynb")
    assert first != second and first.exists() and second.exists()
    assert "学習者の大事なラボ" in first.read_text(encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "course.tooling.workspace", "--root", str(learner), "reset",
                          "labs/01_lab.ipynb"], capture_output=True, text=True, check=True).stdout
    assert "backups" in out, "reset says where the learner's copy went"


def test_update_before_any_sync_restores_a_deleted_notebook_and_pulls(repos):
    """Issue 29 #2: with no work/ folder yet, writing work/.course-sync.json raised FileNotFoundError."""
    up, learner = repos
    (learner / "labs/01_lab.ipynb").unlink()
    upstream_adds_chapter_and_changes_lab(up)
    saved, _, _ = workspace.update(learner)
    assert saved == {"labs/01_lab.ipynb": None}
    assert (learner / "lessons/02_next.ipynb").exists(), "the pull happened"
    assert git(learner, "status", "--porcelain") == ""


def test_update_after_git_mv_saves_the_renamed_notebook_and_pulls(repos):
    """Issue 29 #3: after `git mv`, update asked git to restore the new name from HEAD, which fails."""
    up, learner = repos
    workspace.sync(learner)
    (learner / "labs/01_lab.ipynb").write_text(notebook("名前を変える前に編集"), encoding="utf-8")
    git(learner, "mv", "labs/01_lab.ipynb", "labs/01_my_lab.ipynb")
    (learner / "work" / "progress.json").write_text('{"done": ["01"]}', encoding="utf-8")
    upstream_adds_chapter_and_changes_lab(up)
    saved, _, _ = workspace.update(learner)
    assert (learner / "lessons/02_next.ipynb").exists(), "the pull happened"
    assert "ラボ1（修正版）" in (learner / "labs/01_lab.ipynb").read_text(encoding="utf-8")
    kept = saved["labs/01_my_lab.ipynb"]
    assert kept.is_relative_to(learner / "work" / "backups") and "名前を変える前に編集" in kept.read_text(encoding="utf-8")
    assert not (learner / "labs/01_my_lab.ipynb").exists()
    assert git(learner, "status", "--porcelain") == ""
    assert (learner / "work" / "progress.json").read_text(encoding="utf-8") == '{"done": ["01"]}'
