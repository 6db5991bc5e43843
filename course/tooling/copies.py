"""Files of the learner's workspace (``work/``): which notebooks are course notebooks, the manifest of what
each copy was made from, backups that never overwrite each other, and the links to the code folders.

``course.tooling.workspace`` builds ``sync``, ``update`` and ``reset`` on these.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

FOLDERS = ("lessons", "labs", "quizzes", "exercises")
WORK_DIR = "work"
BACKUP_DIR = "backups"
MANIFEST = ".course-sync.json"      # which tracked version each copy was made from (sha256)
# Folders the notebooks link into (``../course/TERMS.md``, ``../minimal_engine/model/attention.py``): ``work/`` gets a
# symbolic link to each, so the same relative links work from the copies as from the originals.
LINKED = ("course", "minimal_engine", "benchmarks", "docs", "exercises/solutions")


class WorkspaceError(RuntimeError):
    """Something the learner must sort out; the message says what, in Japanese."""


def work_dir(root: Path) -> Path:
    return Path(root) / WORK_DIR


def course_notebooks(root: Path) -> list[str]:
    """Relative paths (``labs/x.ipynb``) of the course's notebooks in ``lessons/``, ``labs/``, ``quizzes/``, ``exercises/``."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for folder in FOLDERS for p in (root / folder).glob("*.ipynb"))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(work: Path) -> dict:
    try:
        return json.loads((work / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_manifest(work: Path, manifest: dict) -> None:
    work.mkdir(parents=True, exist_ok=True)        # `make update` may come before any `make lab`
    (work / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")


def link_folders(root: Path, work: Path) -> None:
    """``work/course`` -> ``../course`` etc. (relative, so the checkout can move). Where the system refuses
    symbolic links (Windows without developer mode) the links to code are missing, nothing else breaks."""
    for name in LINKED:
        link, target = work / name, root / name
        if target.is_dir() and not link.exists() and not link.is_symlink():
            try:
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)
            except OSError:
                pass


def new_backup_folder(work: Path) -> Path:
    """A new, never used ``work/backups/<YYYYmmdd-HHMMSS>[-k]/`` (created here, so two calls within one
    second, or two processes at once, never share one: ``mkdir`` without ``exist_ok`` is atomic)."""
    base, k = work / BACKUP_DIR / time.strftime("%Y%m%d-%H%M%S"), 1
    base.parent.mkdir(parents=True, exist_ok=True)
    folder = base
    while True:
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            k += 1
            folder = base.with_name(f"{base.name}-{k}")


def backup_file(work: Path, rel: str, source: Path, folder: Path) -> Path:
    target = folder / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return target
