"""Checks ``make update`` runs before it changes anything: is the checkout in a state where
``git pull --ff-only`` can bring the new chapters?

``update`` refuses (with a Japanese message that says what state the repository is in and what to
type) when:

- a merge, rebase, ``git am``, cherry-pick, revert or bisect is in progress, or files are still in
  conflict (detected with ``git rev-parse --git-path MERGE_HEAD`` etc., so worktrees and submodules
  work too);
- HEAD is detached, or the branch has no upstream;
- after ``git fetch``, the branch has commits its upstream lacks while the upstream has new ones
  (diverged);
- a local change outside the course folders, or an untracked file, is in the way of the new version.

Nothing here changes the working tree or the index; ``git fetch`` only updates remote-tracking refs.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from course.tooling.copies import FOLDERS

UNTOUCHED = "更新を始めませんでした（ファイルは何も変更していません）。"
AGAIN = "そのあとで、もう一度 make update を実行してください。"


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def _lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def _exists(root: Path, name: str) -> bool:
    out = git(root, "rev-parse", "--git-path", name)
    return out.returncode == 0 and (Path(root) / out.stdout.strip()).exists()


def _course_branch(root: Path) -> str:
    """The branch the course is published on (``origin/HEAD``), for ``git switch``; ``main`` if
    unknown."""
    out = git(root, "rev-parse", "--abbrev-ref", "origin/HEAD")
    name = out.stdout.strip()
    return name.split("/", 1)[1] if out.returncode == 0 and "/" in name else "main"


def _conflicts(root: Path) -> str:
    files = sorted(set(_lines(git(root, "diff", "--name-only", "--diff-filter=U"))))
    return f"\n競合しているファイル: {'、'.join(files)}" if files else ""


def operation_in_progress(root: Path) -> str | None:
    """The message for an unfinished merge, rebase, am, cherry-pick, revert or bisect; None if
    none."""
    root = Path(root)
    if _exists(root, "MERGE_HEAD"):
        return ("マージ（git pull や git merge）の途中で競合が起きたまま、マージが終わっていません。" + UNTOUCHED
                + _conflicts(root) + "\n次のどちらかを行ってください。\n"
                "  - 中断してマージ前に戻す: git merge --abort\n"
                "  - マージを終える: 競合したファイルを直して git add し、git commit を実行する\n" + AGAIN)
    if _exists(root, "rebase-apply/applying"):
        return ("git am（パッチの適用）の途中です。" + UNTOUCHED + _conflicts(root) + "\n"
                "中断するには git am --abort、続けるには競合を直して git add し git am --continue を"
                "実行してください。\n" + AGAIN)
    if _exists(root, "rebase-merge") or _exists(root, "rebase-apply"):
        return ("リベース（git rebase や git pull --rebase）の途中です。" + UNTOUCHED + _conflicts(root)
                + "\n次のどちらかを行ってください。\n"
                "  - 中断してリベース前に戻す: git rebase --abort\n"
                "  - リベースを終える: 競合したファイルを直して git add し、git rebase --continue を実行する\n"
                + AGAIN)
    for head, command in (("CHERRY_PICK_HEAD", "git cherry-pick"), ("REVERT_HEAD", "git revert")):
        if _exists(root, head):
            return (f"{command} の途中です。" + UNTOUCHED + _conflicts(root) + "\n次のどちらかを行ってください。\n"
                    f"  - 中断して元に戻す: {command} --abort\n"
                    f"  - 終える: 競合したファイルを直して git add し、{command} --continue を実行する\n" + AGAIN)
    if _exists(root, "BISECT_LOG"):
        return ("git bisect の途中です。" + UNTOUCHED + "\ngit bisect reset で元のブランチに戻ってください。\n"
                + AGAIN)
    if _lines(git(root, "ls-files", "--unmerged")):
        return ("競合が解決されていないファイルがあります（git stash pop などのあと）。" + UNTOUCHED
                + _conflicts(root) + "\nファイルを直して git add で解決済みにしてください"
                "（git stash pop で競合した場合、stash は消えずに残っています）。\n" + AGAIN)
    return None


def branch_problem(root: Path) -> str | None:
    """The message for a detached HEAD or a branch without upstream; None when the branch can be
    pulled."""
    root = Path(root)
    branch = git(root, "symbolic-ref", "-q", "--short", "HEAD")
    main = _course_branch(root)
    if branch.returncode != 0:
        return ("HEAD がブランチを指していません（detached HEAD: 特定のコミットを git checkout した状態です）。"
                + UNTOUCHED + f"\ngit switch {main} で講座のブランチに戻ってください"
                "（この状態で自分のコミットを作った場合は、先に git branch <新しいブランチ名> で残してください）。\n"
                + AGAIN)
    upstream = git(root, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
    if upstream.returncode != 0:
        name = branch.stdout.strip()
        return (f"ブランチ {name} には取得元（upstream）が設定されていないため、git pull で更新できません。"
                + UNTOUCHED + f"\n講座のブランチに戻るには git switch {main} を、このブランチの取得元を設定するには"
                f" git branch --set-upstream-to=origin/{main} を実行してください。\n" + AGAIN)
    return None


def fetch(root: Path) -> str | None:
    """``git fetch`` of the branch's remote; the message when it fails, else None."""
    out = git(root, "fetch", "--quiet")
    if out.returncode == 0:
        return None
    return ("新しい版の取得（git fetch）に失敗しました。" + UNTOUCHED + "\nネットワークにつながっているか確かめて"
            "から、もう一度 make update を実行してください。\ngit の出力:\n" + (out.stderr or out.stdout).strip())


def diverged(root: Path) -> str | None:
    """After ``fetch``: the message when the branch and its upstream both have commits the other
    lacks."""
    root = Path(root)
    counts = git(root, "rev-list", "--left-right", "--count", "HEAD...@{upstream}").stdout.split()
    if len(counts) != 2 or counts[0] == "0" or counts[1] == "0":
        return None
    ahead, behind = int(counts[0]), int(counts[1])
    upstream = git(root, "rev-parse", "--abbrev-ref", "@{upstream}").stdout.strip()
    branch = git(root, "symbolic-ref", "--short", "HEAD").stdout.strip()
    mine = _lines(git(root, "log", "--oneline", "--no-decorate", "-n", "10", "@{upstream}..HEAD"))
    more = f"\n    …ほか {ahead - len(mine)} 件" if ahead > len(mine) else ""
    return (f"ブランチ {branch} には取得元（{upstream}）にないあなたのコミットが {ahead} 件あり、取得元には"
            f"新しいコミットが {behind} 件あります（履歴が分岐しています）。make update は早送り"
            "（git pull --ff-only）でしか更新しないため、" + UNTOUCHED + "\nあなたのコミット:\n"
            + "\n".join(f"    {line}" for line in mine) + more + "\n"
            "これらのコミットの変更は work/ には保存されていません（コミットの中にだけあります）。"
            "git reset --hard は使わないでください（コミットが失われます）。\n次のどちらかを行ってください。\n"
            "  - あなたのコミットを新しい版の上に載せ直す: git pull --rebase"
            "（競合したら git rebase --abort で元に戻せます）\n"
            f"  - あなたのコミットを別のブランチに残して、{branch} を取得元に合わせる:\n"
            f"      git branch my-work   （残すブランチの名前は自由です）\n"
            f"      git reset --keep {upstream}\n" + AGAIN)


def in_the_way(root: Path) -> str | None:
    """After ``fetch``: local changes outside the course folders (which ``update`` does not save) to
    files the new version changes, and untracked files where it adds one. The message, or None."""
    root = Path(root)
    incoming = set(_lines(git(root, "diff", "--name-only", "HEAD", "@{upstream}")))
    added = set(_lines(git(root, "diff", "--name-only", "--diff-filter=A", "HEAD", "@{upstream}")))
    local = set(_lines(git(root, "diff", "--name-only", "HEAD")))
    changed = sorted(p for p in local & incoming if p.split("/", 1)[0] not in FOLDERS)
    untracked = sorted(p for p in added if (root / p).exists() or (root / p).is_symlink())
    untracked = [p for p in untracked
                 if git(root, "ls-files", "--error-unmatch", "--", p).returncode != 0]
    if not changed and not untracked:
        return None
    lines = ["新しい版と重なるファイルがあるため、" + UNTOUCHED]
    if changed:
        lines.append("次のファイル（講座のノートブック以外）をあなたが変更していて、新しい版でも変更されています: "
                     + "、".join(changed))
        lines.append("  変更を残すには別の場所にコピーしてから、git restore -- <ファイル> で元に戻してください。")
    if untracked:
        lines.append("次のファイルは git に登録されていませんが、新しい版で同じ名前のファイルが追加されます: "
                     + "、".join(untracked))
        lines.append("  別の名前に変えるか、別の場所へ移してください。")
    return "\n".join(lines + [AGAIN])
