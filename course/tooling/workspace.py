"""The learner's working copies of the course notebooks, so that ``git pull`` never meets a run
notebook.

Running a notebook saves its outputs into the file. If learners ran the tracked notebooks in
``lessons/``, ``labs/`` and ``quizzes/``, their next ``git pull`` of new chapters would stop on
"local changes". So the learner works in copies:

- ``sync``: copy every course notebook that has no copy yet into ``work/`` (gitignored), mirroring
  the three folders so that relative links such as ``../labs/01_prefill_decode_lab.ipynb`` still
  work. A copy the learner has changed (run or edited) is never overwritten; a copy still exactly as
  it was copied is brought up to date when its original changes. ``make lab`` runs it and opens
  ``work/lessons/00_course_guide.ipynb``.
- ``update``: refuse, changing nothing, when git is mid-merge/rebase/cherry-pick/revert, on a
  detached HEAD or diverged from upstream (``gitstate``); else save any tracked notebook the learner
  changed anyway (into ``work/``), restore it (``restore``), run ``git pull --ff-only``, then
  ``sync`` (new chapters get their copies), and say where every saved file went. ``make update``
  runs it.
- ``reset``: replace one copy by the current tracked version, after backing the old copy up into
  ``work/backups/``. ``make reset-copy NB=labs/01_prefill_decode_lab.ipynb`` runs it.

Imports from the copies work as from the originals: ``course`` and ``minimal_engine`` are installed
in editable mode, and quiz banks are found in the repository's ``quizzes/``
(``course.quiz.bank.QUIZ_DIR``).

Odd contents of ``work/`` (a file where a folder belongs, a dangling link, a read-only folder) never
give a traceback: ``sync`` names each path it could not handle and what to do, and copies the other
notebooks.

Command line: ``python -m course.tooling.workspace sync|update|status|reset NOTEBOOK``.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course.tooling import gitstate
from course.tooling.copies import (BACKUP_DIR, FOLDERS, LINKED, MANIFEST, WORK_DIR, WorkspaceError,
                                   backup_file, course_notebooks, link_folders, new_backup_folder,
                                   read_manifest, sha, work_dir, write_manifest)
from course.tooling.gitstate import git
from course.tooling.restore import modified_tracked, save_and_restore, saved_report

__all__ = ["BACKUP_DIR", "FOLDERS", "LINKED", "MANIFEST", "WORK_DIR", "SyncResult",
           "WorkspaceError", "course_notebooks", "default_root", "modified_tracked", "reset_copy",
           "resolve_notebook", "save_and_restore", "saved_report", "sync", "update", "work_dir"]


@dataclass
class SyncResult:
    """What ``sync`` did, as paths relative to ``work/`` (``problems``: Japanese messages)."""
    copied: list[str] = field(default_factory=list)     # new copies (e.g. a new chapter)
    kept: list[str] = field(default_factory=list)       # copies that already existed, left as is
    refreshed: list[str] = field(default_factory=list)  # unchanged copies, now the new original
    changed_upstream: list[str] = field(default_factory=list)  # changed copies, original changed
    orphaned: list[str] = field(default_factory=list)   # copies whose original is gone
    problems: list[str] = field(default_factory=list)   # a path sync could not handle, what to do


def default_root() -> Path:
    """The repository this package is installed from (editable install), else the current folder."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "lessons").is_dir() else Path.cwd()


def _manifest(work: Path) -> dict:
    """The manifest, or ``{}`` when it is missing, unreadable, or valid JSON that is not an
    object."""
    manifest = read_manifest(work)
    return manifest if isinstance(manifest, dict) else {}


def _in_the_way(work: Path, rel: str) -> str | None:
    """What, on the way to ``work/rel``, is not what sync can use (a file where a folder belongs, a
    link to nothing, a folder where the notebook belongs); None when the path is usable."""
    path, shown = work, WORK_DIR
    for i, part in enumerate(Path(rel).parts):
        path, shown = path / part, f"{shown}/{part}"
        last = i == len(Path(rel).parts) - 1
        if path.is_symlink() and not path.exists():
            return (f"{shown} は、指す先がないシンボリックリンクです（{path.readlink()}）。"
                    "このリンクを削除してから、もう一度実行してください。")
        if not last and path.exists() and not path.is_dir():
            return (f"{shown} はフォルダであるべきところにあるファイルです。このファイルの名前を変えるか"
                    "別の場所へ移してから、もう一度実行してください。")
        if last and path.is_dir():
            return (f"{shown} はノートブックであるべきところにあるフォルダです。このフォルダの名前を変えるか"
                    "別の場所へ移してから、もう一度実行してください。")
    return None


def _os_problem(err: OSError, fallback: Path) -> str:
    where = err.filename or fallback
    if isinstance(err, PermissionError):
        return (f"{where} に書き込めません（読み取り専用です）。このフォルダやファイルを書き込めるようにして"
                "（例: chmod -R u+w work）から、もう一度実行してください。")
    return f"{where} を扱えませんでした（{err.strerror or err}）。この場所を確かめてから、もう一度実行してください。"


def sync(root: Path, work: Path | None = None) -> SyncResult:
    """Copy each course notebook that has no copy in ``work`` yet, and refresh copies the learner
    has not changed since they were made. A changed copy is never overwritten. A path that cannot be
    handled goes to ``problems`` (the others are still synced); a ``work`` that is not a folder
    raises WorkspaceError."""
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    if (work.exists() or work.is_symlink()) and not work.is_dir():
        raise WorkspaceError(f"{work} がフォルダではありません（ファイルか、指す先のないリンクです）。"
                             "名前を変えるか別の場所へ移してから、もう一度実行してください。")
    manifest, result = _manifest(work), SyncResult()
    originals = course_notebooks(root)
    for rel in originals:
        src, dst = root / rel, work / rel
        problem = _in_the_way(work, rel)
        if problem:
            result.problems.append(problem)
            continue
        try:
            if dst.exists():
                made_from, now = manifest.get(rel), sha(src)
                if made_from is None or made_from == now:
                    result.kept.append(rel)
                    continue
                if sha(dst) != made_from:  # the learner's work: keep, say there is a new one
                    result.kept.append(rel)
                    result.changed_upstream.append(rel)
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                result.refreshed.append(rel)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)       # fresh file times: the learner's copy from now on
                result.copied.append(rel)
        except OSError as err:
            result.problems.append(_os_problem(err, dst))
            continue
        manifest[rel] = sha(src)
    copies = (p.relative_to(work).as_posix() for f in FOLDERS for p in (work / f).glob("*.ipynb"))
    result.orphaned = sorted(rel for rel in copies if rel not in originals)
    if result.copied or result.refreshed:
        try:
            write_manifest(work, manifest)
        except OSError as err:
            result.problems.append(_os_problem(err, work / MANIFEST))
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
    """Replace the learner's copy of ``name`` by the tracked version. Returns the backup of the old
    copy. Odd paths and unwritable folders raise WorkspaceError, which names the backup if one was
    made."""
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    rel = resolve_notebook(root, name)
    dst, backup = work / rel, None
    problem = _in_the_way(work, rel)
    if problem:
        raise WorkspaceError(problem)
    try:
        if dst.exists():
            backup = backup_file(work, rel, dst, new_backup_folder(work))
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, dst)
        manifest = _manifest(work)
        manifest[rel] = sha(root / rel)
        write_manifest(work, manifest)
    except OSError as err:
        kept = f"\nそれまでのコピーは {backup} に保存してあります。" if backup else ""
        raise WorkspaceError(_os_problem(err, dst) + kept) from None
    return backup


# ---------------------------------------------------------------- update
def update(root: Path, work: Path | None = None) -> tuple[dict, str, SyncResult]:
    """``make update``: check that the checkout can be fast-forwarded (no merge, rebase, cherry-pick
    or revert in progress, a branch with an upstream, not diverged), save learner changes to tracked
    notebooks, ``git pull --ff-only``, then sync.

    Returns ``(saved, git output, sync result)``; raises :class:`WorkspaceError` with a Japanese
    message (which, when the pull fails after notebooks were saved, says where they went).
    """
    root = Path(root)
    work = Path(work) if work else work_dir(root)
    if git(root, "rev-parse", "--is-inside-work-tree").returncode != 0:
        raise WorkspaceError("このフォルダは git で取得したものではないため、git pull で更新できません。"
                             "新しい版を取得し直して、work/ フォルダを新しい版へコピーしてください。")
    for check in (gitstate.operation_in_progress, gitstate.branch_problem, gitstate.fetch,
                  gitstate.diverged, gitstate.in_the_way):
        problem = check(root)
        if problem:
            raise WorkspaceError(problem)
    saved = save_and_restore(root, work)
    pulled = git(root, "pull", "--ff-only")
    if pulled.returncode != 0:
        where = saved_report(saved, root, work)
        raise WorkspaceError(
            "git pull --ff-only が失敗しました。git の出力を読んで原因を取り除いてから、"
            "もう一度 make update を実行してください。\n"
            + (f"{where}\n" if where else "講座のノートブックは何も変更していません。\n")
            + "git の出力:\n" + (pulled.stderr or pulled.stdout).strip())
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
    if result.problems:
        lines.append(f"  次の {len(result.problems)} 件は扱えなかったため、そのままにしました"
                     "（ほかのノートブックは上のとおりです）:")
        lines += [f"  ⚠ {problem}" for problem in result.problems]
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
            in_git = git(root, "rev-parse", "--is-inside-work-tree").returncode == 0
            for rel in modified_tracked(root) if in_git else []:
                print(f"  注意: 元のファイル {rel} が変更されています（make update で work/ に保存してから戻します）")
        elif args.cmd == "update":
            saved, git_out, result = update(root, work)
            if saved:
                print(saved_report(saved, root, work))
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
    except OSError as err:          # anything not foreseen above: still a message, not a traceback
        print(_os_problem(err, work), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
