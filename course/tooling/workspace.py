"""The learner's working copies of the course notebooks, so that ``git pull`` never meets a run notebook.

Running a notebook saves its outputs into the file. If learners ran the tracked notebooks in ``lessons/``,
``labs/`` and ``quizzes/``, their next ``git pull`` of new chapters would stop on "local changes". So the
learner works in copies:

- ``sync``: copy every course notebook that has no copy yet into ``work/`` (gitignored), mirroring the
  three folders so that relative links such as ``../labs/01_prefill_decode_lab.ipynb`` still work. A copy
  the learner has changed (run or edited) is never overwritten; a copy still exactly as it was copied is
  brought up to date when its original changes. ``make lab`` runs it and opens
  ``work/lessons/00_course_guide.ipynb``.
- ``update``: save any tracked notebook the learner changed anyway (into ``work/``), restore it, run
  ``git pull --ff-only``, then ``sync`` (new chapters get their copies). ``make update`` runs it.
- ``reset``: replace one copy by the current tracked version, after backing the old copy up into
  ``work/backups/``. ``make reset-copy NB=labs/01_prefill_decode_lab.ipynb`` runs it.

Imports from the copies work as from the originals: ``course`` and ``minimal_engine`` are installed in
editable mode, and quiz banks are found in the repository's ``quizzes/`` (``course.quiz.bank.QUIZ_DIR``).

Command line: ``python -m course.tooling.workspace sync|update|status|reset NOTEBOOK``.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course.tooling.copies import (BACKUP_DIR, FOLDERS, LINKED, MANIFEST, WORK_DIR, WorkspaceError, backup_file,
                                   new_backup_folder, course_notebooks, link_folders, read_manifest, sha, work_dir,
                                   write_manifest)

__all__ = ["BACKUP_DIR", "FOLDERS", "LINKED", "MANIFEST", "WORK_DIR", "SyncResult", "WorkspaceError",
           "course_notebooks", "default_root", "modified_tracked", "reset_copy", "resolve_notebook",
           "save_and_restore", "sync", "update", "work_dir"]


@dataclass
class SyncResult:
    copied: list[str] = field(default_factory=list)     # new copies (e.g. a new chapter)
    kept: list[str] = field(default_factory=list)       # copies that already existed, left as they are
    refreshed: list[str] = field(default_factory=list)  # unchanged copies replaced by their new original
    changed_upstream: list[str] = field(default_factory=list)   # changed copies whose original changed since
    orphaned: list[str] = field(default_factory=list)   # copies whose original is gone (renamed, removed)


def default_root() -> Path:
    """The repository this package is installed from (editable install), else the current folder."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "lessons").is_dir() else Path.cwd()


def sync(root: Path, work: Path | None = None) -> SyncResult:
    """Copy each course notebook that has no copy in ``work`` yet, and refresh copies the learner has not
    changed since they were made. A changed copy is never overwritten."""
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    manifest, result = read_manifest(work), SyncResult()
    originals = course_notebooks(root)
    for rel in originals:
        src, dst = root / rel, work / rel
        if dst.exists():
            made_from, now = manifest.get(rel), sha(src)
            if made_from is None or made_from == now:
                result.kept.append(rel)
                continue
            if sha(dst) != made_from:      # the learner's work: keep it, say that a new version exists
                result.kept.append(rel)
                result.changed_upstream.append(rel)
                continue
            result.refreshed.append(rel)
        else:
            result.copied.append(rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)           # fresh file times: the copy is the learner's from now on
        manifest[rel] = sha(src)
    result.orphaned = sorted(p.relative_to(work).as_posix() for folder in FOLDERS
                             for p in (work / folder).glob("*.ipynb") if p.relative_to(work).as_posix()
                             not in originals)
    if result.copied or result.refreshed:
        write_manifest(work, manifest)
    link_folders(root, work)
    return result


def resolve_notebook(root: Path, name: str) -> str:
    """``labs/x.ipynb``, ``work/labs/x.ipynb`` or just ``x.ipynb`` / ``x`` -> ``labs/x.ipynb``."""
    rel = Path(name).as_posix().removeprefix("./").removeprefix(f"{WORK_DIR}/")
    known = course_notebooks(root)
    if rel in known:
        return rel
    stem = Path(rel).name.removesuffix(".ipynb")
    matches = [k for k in known if Path(k).stem == stem]
    if len(matches) == 1:
        return matches[0]
    raise WorkspaceError(f"講座のノートブック {name!r} が見つかりません（{'、'.join(matches) or '該当なし'}）。"
                         f"例: labs/01_prefill_decode_lab.ipynb")


def reset_copy(root: Path, name: str, work: Path | None = None) -> Path | None:
    """Replace the learner's copy of ``name`` by the tracked version. Returns the backup of the old copy."""
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    rel = resolve_notebook(root, name)
    dst, backup = work / rel, None
    if dst.exists():
        backup = backup_file(work, rel, dst, new_backup_folder(work))
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(root / rel, dst)
    manifest = read_manifest(work)
    manifest[rel] = sha(root / rel)
    write_manifest(work, manifest)
    return backup


# ---------------------------------------------------------------- git
def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def modified_tracked(root: Path) -> list[str]:
    """Files under the course folders that differ from the last commit: changed, deleted, staged, and both
    names of a staged rename (``git mv``)."""
    out = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no", "--", *FOLDERS)
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


def save_and_restore(root: Path, work: Path | None = None) -> dict[str, Path | None]:
    """Keep the learner's changes to tracked course files, then restore those files to the last commit.

    A changed notebook that has no copy yet becomes the learner's copy in ``work/``; otherwise (and for
    other files) it goes to ``work/backups/<time>/``. Returns ``{path: where it was saved}`` (None: deleted).
    """
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    changed, saved, folder = modified_tracked(root), {}, None
    in_head = {rel for rel in changed if _git(root, "cat-file", "-e", f"HEAD:{rel}").returncode == 0}
    for rel in changed:
        src = root / rel
        if not src.exists():
            saved[rel] = None
        elif rel.endswith(".ipynb") and rel in in_head and not (work / rel).exists():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / rel)
            saved[rel] = work / rel
        else:                           # (a name HEAD lacks, e.g. the new name of a `git mv`: backups/ too)
            folder = folder or new_backup_folder(work)
            saved[rel] = backup_file(work, rel, src, folder)
    new_names = [rel for rel in changed if rel not in in_head]
    if new_names:                       # saved above: unstage them and remove them, as HEAD has them not
        out = _git(root, "rm", "-q", "-f", "--cached", "--ignore-unmatch", "--", *new_names)
        if out.returncode != 0:
            raise WorkspaceError(f"追加・改名したファイルを元に戻せませんでした:\n{out.stderr.strip()}")
        for rel in new_names:
            (root / rel).unlink(missing_ok=True)
    if in_head:
        out = _git(root, "checkout", "HEAD", "--", *sorted(in_head))
        if out.returncode != 0:
            raise WorkspaceError(f"変更したノートブックを元に戻せませんでした:\n{out.stderr.strip()}")
    if changed:
        manifest = read_manifest(work)     # a new copy was made from the committed version
        manifest.update({rel: sha(root / rel) for rel, where in saved.items() if where == work / rel})
        write_manifest(work, manifest)
    return saved


def update(root: Path, work: Path | None = None) -> tuple[dict, str, SyncResult]:
    """``make update``: save learner changes to tracked notebooks, ``git pull --ff-only``, then sync.

    Returns ``(saved, git output, sync result)``; raises :class:`WorkspaceError` with a Japanese message.
    """
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    if _git(root, "rev-parse", "--is-inside-work-tree").returncode != 0:
        raise WorkspaceError("このフォルダは git で取得したものではないため、git pull で更新できません。"
                             "新しい版を取得し直して、work/ フォルダを新しい版へコピーしてください。")
    saved = save_and_restore(root, work)
    pulled = _git(root, "pull", "--ff-only")
    if pulled.returncode != 0:
        raise WorkspaceError(
            "git pull --ff-only が失敗しました。講座のノートブックの変更は work/ に保存済みです。\n"
            "講座以外のファイル（エンジンのコードなど）を変更した場合は、その変更を commit するか"
            "別の場所へ保存してから、もう一度実行してください。\n" + (pulled.stderr or pulled.stdout).strip())
    return saved, (pulled.stdout + pulled.stderr).strip(), sync(root, work)


# ---------------------------------------------------------------- command line
def report(result: SyncResult, work: Path) -> str:
    lines = [f"作業用コピーの場所: {work}"]
    lines += [f"  新しくコピーしました: {WORK_DIR}/{rel}" for rel in result.copied]
    lines += [f"  新しい版に更新しました（変更していないコピー）: {WORK_DIR}/{rel}" for rel in result.refreshed]
    if not result.copied and not result.refreshed:
        lines.append("  新しいノートブックはありません（既存のコピーはそのまま使います）。")
    for rel in result.changed_upstream:
        lines.append(f"  元の {rel} が更新されています。新しい版にするには: make reset-copy NB={rel}"
                     f"（今のコピーは {WORK_DIR}/{BACKUP_DIR}/ に保存されます）")
    for rel in result.orphaned:
        lines.append(f"  {WORK_DIR}/{rel} は元のノートブックがなくなったコピーです（名前の変更など）。"
                     "そのまま残してあります。")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m course.tooling.workspace",
                                description="講座ノートブックの作業用コピー（work/）の作成・更新")
    p.add_argument("--root", type=Path, default=None, help="リポジトリのフォルダ（既定: この講座のフォルダ）")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sync", help="まだコピーのないノートブックを work/ にコピーする（既存のコピーは上書きしない）")
    sub.add_parser("status", help="作業用コピーの状態を表示する")
    sub.add_parser("update", help="git pull --ff-only で新しい章を取得し、work/ にコピーする")
    r = sub.add_parser("reset", help="1つのコピーを元の版で置き換える（古いコピーは work/backups/ へ）")
    r.add_argument("notebook", help="例: labs/01_prefill_decode_lab.ipynb")
    args = p.parse_args(argv)
    root = (args.root or default_root()).resolve()
    work = work_dir(root)
    try:
        if args.cmd == "sync":
            print(report(sync(root, work), work))
        elif args.cmd == "status":
            existing = [rel for rel in course_notebooks(root) if (work / rel).exists()]
            print(f"作業用コピー: {len(existing)} / {len(course_notebooks(root))} 冊（{work}）")
            in_git = _git(root, "rev-parse", "--is-inside-work-tree").returncode == 0
            for rel in modified_tracked(root) if in_git else []:
                print(f"  注意: 元のファイル {rel} が変更されています（make update で work/ に保存してから戻します）")
        elif args.cmd == "update":
            saved, git_out, result = update(root, work)
            for rel, where in saved.items():
                print(f"{rel} の変更を保存しました: {where}" if where else f"{rel} の削除を元に戻しました")
            print(git_out)
            print(report(result, work))
        else:
            backup = reset_copy(root, args.notebook, work)
            rel = resolve_notebook(root, args.notebook)
            print(f"{WORK_DIR}/{rel} を元の版で置き換えました。"
                  + (f"それまでのコピーは {backup} に保存しました。" if backup else ""))
    except WorkspaceError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
