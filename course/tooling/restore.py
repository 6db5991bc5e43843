"""``make update``'s first step: keep the learner's changes to tracked course files, then restore
those files to the last commit, so that ``git pull --ff-only`` can run.

Only files under the course folders (``lessons/``, ``labs/``, ``quizzes/``, ``exercises/``) are
touched, each after it was saved; :func:`saved_report` says where each one went (and which
``work/backups/<time>/`` folder), and is printed whether the pull then succeeds or not.
``course.tooling.workspace.update`` runs the checks of ``course.tooling.gitstate`` first, so this
never runs during a merge, rebase or on a detached HEAD.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from course.tooling.copies import (BACKUP_DIR, FOLDERS, WORK_DIR, WorkspaceError, backup_file,
                                   new_backup_folder, read_manifest, sha, work_dir, write_manifest)
from course.tooling.gitstate import git


def modified_tracked(root: Path) -> list[str]:
    """Files under the course folders that differ from the last commit: changed, deleted, staged,
    and both names of a staged rename (``git mv``)."""
    out = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no", "--", *FOLDERS)
    if out.returncode != 0:
        raise WorkspaceError(f"git status が失敗しました:\n{out.stderr.strip()}")
    entries, paths = out.stdout.split("\0"), []
    i = 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            paths.append(entry[3:])
            if entry[0] in "RC" and i + 1 < len(entries):   # a rename is followed by its old name
                i += 1
                paths.append(entries[i])
        i += 1
    return sorted(set(paths))


def _shown(path: Path, root: Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def saved_report(saved: dict[str, Path | None], root: Path, work: Path | None = None) -> str:
    """What :func:`save_and_restore` did, in Japanese, one line per file, with the backup folder
    first."""
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    if not saved:
        return ""
    folders, lines = [], []
    for rel, where in saved.items():
        if where is None:
            lines.append(f"  削除されていた元の {rel} を元に戻しました。")
            continue
        lines.append(f"  元の {rel} の変更を {_shown(where, root)} に保存しました。")
        parts = Path(where).relative_to(work).parts if Path(where).is_relative_to(work) else ()
        if parts[:1] == (BACKUP_DIR,) and work / parts[0] / parts[1] not in folders:
            folders.append(work / parts[0] / parts[1])
    head = [f"バックアップの保存先: {_shown(f, root)}/" for f in folders]
    return "\n".join(head + ["講座の元のファイルへの変更は、次のとおり保存してから最後のコミットの状態に戻しました"
                             "（git mv などで加えたファイルは取り除きました）。", *lines])


def _saved_so_far(saved: dict, root: Path, work: Path) -> str:
    return f"\nここまでに保存したもの:\n{saved_report(saved, root, work)}" if saved else ""


def save_and_restore(root: Path, work: Path | None = None) -> dict[str, Path | None]:
    """Keep the learner's changes to tracked course files, then restore those files to the last
    commit.

    A changed notebook that has no copy yet becomes the learner's copy in ``work/``; otherwise (and
    for other files) it goes to ``work/backups/<time>/``. Returns ``{path: where it was saved}``
    (None: deleted). Nothing is restored unless every file was saved; a :class:`WorkspaceError` says
    what was saved.
    """
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    changed, saved, folder = modified_tracked(root), {}, None
    in_head = {rel for rel in changed if git(root, "cat-file", "-e", f"HEAD:{rel}").returncode == 0}
    for rel in changed:
        src, copy = root / rel, work / rel
        try:
            if not src.exists():
                saved[rel] = None
            elif (rel.endswith(".ipynb") and rel in in_head and not copy.exists()
                  and not copy.is_symlink()):
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, copy)
                saved[rel] = copy
            else:       # (also a name HEAD lacks, e.g. the new name of a `git mv`: backups/ too)
                folder = folder or new_backup_folder(work)
                saved[rel] = backup_file(work, rel, src, folder)
        except OSError as err:
            raise WorkspaceError(
                f"元の {rel} の変更を {WORK_DIR}/ に保存できませんでした（{err.filename or rel}: "
                f"{err.strerror or err}）。更新を中止しました。元のファイルは何も戻していません。\n"
                f"{WORK_DIR}/ フォルダに書き込めるか（読み取り専用でないか、空き容量があるか）確かめてから、"
                "もう一度 make update を実行してください。" + _saved_so_far(saved, root, work)) from None
    new_names = [rel for rel in changed if rel not in in_head]
    if new_names:               # saved above: unstage and remove them, as HEAD has them not
        out = git(root, "rm", "-q", "-f", "--cached", "--ignore-unmatch", "--", *new_names)
        if out.returncode != 0:
            raise WorkspaceError(f"追加・改名したファイルを元に戻せませんでした:\n{out.stderr.strip()}"
                                 + _saved_so_far(saved, root, work))
        for rel in new_names:
            (root / rel).unlink(missing_ok=True)
    if in_head:
        out = git(root, "checkout", "HEAD", "--", *sorted(in_head))
        if out.returncode != 0:
            raise WorkspaceError(f"変更したノートブックを元に戻せませんでした:\n{out.stderr.strip()}"
                                 + _saved_so_far(saved, root, work))
    made = {rel: sha(root / rel) for rel, where in saved.items() if where == work / rel}
    if made:                            # a new copy was made from the committed version
        manifest = read_manifest(work)
        manifest = manifest if isinstance(manifest, dict) else {}
        manifest.update(made)
        try:
            write_manifest(work, manifest)
        except OSError:
            pass                # only means: sync treats these copies as the learner's (kept)
    return saved
