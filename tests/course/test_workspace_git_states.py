"""``make update`` (course/tooling/workspace.py, gitstate.py) in every git state a learner can leave
behind: an unfinished merge, rebase, cherry-pick or revert, a detached HEAD, a diverged branch, a
branch without upstream. In each, update must refuse, change nothing, and say in Japanese what to
type. Also: it always says where it saved the learner's edits, even when the pull then fails. Real
throwaway clones, real git."""
import subprocess
import sys

import pytest
from test_workspace import git, notebook, repos, upstream_adds_chapter_and_changes_lab  # noqa: F401

from course.tooling import workspace

LESSON = "lessons/01_basics.ipynb"


def snapshot(learner):
    """Everything update could disturb: HEAD, index, working-tree status, files on disk, git's state
    files."""
    files = {p.relative_to(learner).as_posix(): p.read_bytes() for p in learner.rglob("*")
             if p.is_file() and ".git" not in p.relative_to(learner).parts}
    return (git(learner, "rev-parse", "HEAD"), git(learner, "ls-files", "--stage"),
            git(learner, "status", "--porcelain"), files)


def refuses(learner, *expected):
    before = snapshot(learner)
    with pytest.raises(workspace.WorkspaceError) as info:
        workspace.update(learner)
    message = str(info.value)
    for text in expected:
        assert text in message, message
    assert "何も変更していません" in message
    assert snapshot(learner) == before, "update changed the checkout although it refused"
    assert not (learner / "work" / "backups").exists()
    return message


def conflicting_merge(up, learner):
    """The attack report's M4: upstream adds a chapter and edits lesson 1; the learner committed an
    edit to lesson 1 and ran `git pull --no-rebase`, which stopped on a conflict."""
    (up / "labs/99_new_chapter_lab.ipynb").write_text(notebook("新しい章"), encoding="utf-8")
    (up / LESSON).write_text(notebook("第1章（講座の修正）"), encoding="utf-8")
    git(up, "add", ".")
    git(up, "commit", "-q", "-m", "new chapter")
    (learner / LESSON).write_text(notebook("第1章（学習者の編集）"), encoding="utf-8")
    git(learner, "commit", "-q", "-am", "my notes in lesson 1")


def test_update_during_an_unfinished_merge_refuses_and_keeps_the_incoming_chapter(repos):
    up, learner = repos
    conflicting_merge(up, learner)
    pulled = subprocess.run(["git", "pull", "--no-rebase"], cwd=learner, capture_output=True,
                            text=True)
    assert pulled.returncode != 0 and "CONFLICT" in pulled.stdout
    message = refuses(learner, "マージ", "git merge --abort", LESSON)
    assert (learner / "labs/99_new_chapter_lab.ipynb").exists(), "the incoming chapter is kept"
    assert (learner / ".git" / "MERGE_HEAD").exists(), "the merge is still git's to finish or abort"
    # after the abort the branch has the learner's commit and upstream's: update says so, and never
    # advises to commit (the edits are already committed; committing cannot help)
    git(learner, "merge", "--abort")
    message = refuses(learner, "my notes in lesson 1", "1 件", "git pull --rebase",
                      "git reset --keep")
    assert "git commit" not in message and "work/ には保存されていません" in message


def test_update_refuses_during_a_rebase(repos):
    up, learner = repos
    conflicting_merge(up, learner)
    pulled = subprocess.run(["git", "pull", "--rebase"], cwd=learner, capture_output=True,
                            text=True)
    assert pulled.returncode != 0
    refuses(learner, "リベース", "git rebase --abort", "git rebase --continue")


def test_update_refuses_during_a_cherry_pick_and_a_revert(repos):
    up, learner = repos
    git(learner, "switch", "-q", "-c", "side")
    (learner / LESSON).write_text(notebook("脇のブランチ"), encoding="utf-8")
    git(learner, "commit", "-q", "-am", "side edit")
    git(learner, "switch", "-q", "main")
    (learner / LESSON).write_text(notebook("main の編集"), encoding="utf-8")
    git(learner, "commit", "-q", "-am", "main edit")
    picked = subprocess.run(["git", "cherry-pick", "side"], cwd=learner, capture_output=True)
    assert picked.returncode != 0
    refuses(learner, "git cherry-pick の途中", "git cherry-pick --abort")
    git(learner, "cherry-pick", "--abort")
    (learner / LESSON).write_text(notebook("main の2回目の編集"), encoding="utf-8")
    git(learner, "commit", "-q", "-am", "main edit 2")
    assert subprocess.run(["git", "revert", "--no-edit", "HEAD~1"], cwd=learner,
                          capture_output=True).returncode != 0
    refuses(learner, "git revert の途中", "git revert --abort")


def test_update_on_a_detached_head_refuses_before_saving_anything(repos):
    """L4: on a detached HEAD, update saved the learner's edit to backups/ without saying so, then
    failed."""
    up, learner = repos
    upstream_adds_chapter_and_changes_lab(up)
    git(learner, "switch", "-q", "--detach", "HEAD")
    (learner / LESSON).write_text(notebook("detached で編集"), encoding="utf-8")
    refuses(learner, "detached HEAD", "git switch main")


def test_update_on_a_branch_without_upstream_says_how_to_go_back(repos):
    _, learner = repos
    git(learner, "switch", "-q", "-c", "mine")
    refuses(learner, "ブランチ mine には取得元", "git switch main")


def test_update_with_local_commits_only_still_pulls_nothing_and_syncs(repos):
    """Commits the upstream lacks, but nothing new upstream: not diverged, update goes on."""
    _, learner = repos
    (learner / "NOTES.md").write_text("メモ\n", encoding="utf-8")
    git(learner, "add", "NOTES.md")
    git(learner, "commit", "-q", "-m", "my notes")
    saved, _, result = workspace.update(learner)
    assert saved == {} and "lessons/01_basics.ipynb" in result.copied


def test_update_refuses_when_a_non_course_change_is_in_the_way(repos):
    """A changed file outside the course folders that the new version changes too: found before
    anything is saved or restored (update does not save such files, so the pull would fail
    half-way)."""
    up, learner = repos
    (learner / ".gitignore").write_text("/work/\n*.tmp\n", encoding="utf-8")
    (learner / LESSON).write_text(notebook("実行した第1章"), encoding="utf-8")
    (up / ".gitignore").write_text("/work/\n*.log\n", encoding="utf-8")
    git(up, "commit", "-q", "-am", "ignore logs")
    refuses(learner, ".gitignore", "git restore")


def test_cli_update_says_where_the_backups_went(repos):
    up, learner = repos
    workspace.sync(learner)
    (learner / "labs/01_lab.ipynb").write_text(notebook("元のラボを編集"), encoding="utf-8")
    upstream_adds_chapter_and_changes_lab(up)
    out = subprocess.run([sys.executable, "-m", "course.tooling.workspace", "--root", str(learner),
                          "update"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    folder = next((learner / "work" / "backups").iterdir())
    assert f"バックアップの保存先: work/backups/{folder.name}/" in out.stdout
    assert f"元の labs/01_lab.ipynb の変更を work/backups/{folder.name}/labs/01_lab.ipynb に保存しました" \
        in out.stdout


def test_a_failed_pull_still_says_where_the_edits_went(repos):
    """L4: the "saved to ..." lines were printed only after a successful pull. Here git itself
    refuses to move the branch (a reference-transaction hook), after update saved and restored the
    notebook."""
    up, learner = repos
    workspace.sync(learner)
    (learner / "labs/01_lab.ipynb").write_text(notebook("元のラボを編集"), encoding="utf-8")
    upstream_adds_chapter_and_changes_lab(up)
    hook = learner / ".git" / "hooks" / "reference-transaction"
    hook.write_text('#!/bin/sh\n'
                    '[ "$1" = prepared ] && grep -q " refs/heads/main$" && exit 1\nexit 0\n')
    hook.chmod(0o755)
    with pytest.raises(workspace.WorkspaceError) as info:
        workspace.update(learner)
    message = str(info.value)
    backup = next((learner / "work" / "backups").rglob("01_lab.ipynb"))
    assert "git pull --ff-only が失敗しました" in message
    assert backup.relative_to(learner).as_posix() in message and "バックアップの保存先" in message
    assert "元のラボを編集" in backup.read_text(encoding="utf-8")
