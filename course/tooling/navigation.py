"""The 「次へ」 footer of every course notebook: one path through the course, and the way back to the guide.

Each chapter is read in the order レッスン → ラボ → クイズ → 演習, then the next chapter's lesson; after chapter
10's exercise comes the review quiz (11_review), then the guide. The footer is the last cell of each notebook
(a Markdown cell tagged ``course-nav``), with relative links (``../labs/05_batching_lab.ipynb``) that work
from the originals and from the learner's copies in ``work/`` alike (``course.tooling.workspace`` mirrors the
four folders there). It always links back to the guide, where the progress table is.

    python -m course.tooling.navigation          # write (or rewrite) the footer of every notebook

Writing a footer only changes a Markdown cell: no notebook needs to be executed again.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG = "course-nav"
GUIDE = "lessons/00_course_guide.ipynb"
REVIEW = "quizzes/11_review_quiz.ipynb"
KINDS = (("labs", "ラボ", "_lab.ipynb"), ("quizzes", "クイズ", "_quiz.ipynb"), ("exercises", "演習", "_exercise.ipynb"))


def chapter_notebooks(root: Path = ROOT) -> dict[int, list[tuple[str, str]]]:
    """{chapter: [(kind label, path), ...]} in reading order (lesson, lab, quiz, exercise), for each chapter."""
    out = {}
    for lesson in sorted((root / "lessons").glob("[0-9][0-9]_*.ipynb")):
        n = int(lesson.name[:2])
        if n == 0:
            continue
        row = [("レッスン", lesson.relative_to(root).as_posix())]
        for folder, label, suffix in KINDS:
            found = sorted((root / folder).glob(f"{n:02d}_*{suffix}"))
            if found:
                row.append((label, found[0].relative_to(root).as_posix()))
        out[n] = row
    return out


def reading_order(root: Path = ROOT) -> list[tuple[str, str]]:
    """(title, path) of every notebook in the order the course is read: guide, then each chapter, review quiz."""
    order = [("コースガイド", GUIDE)]
    for n, row in sorted(chapter_notebooks(root).items()):
        order += [(f"第{n}章の{label}", path) for label, path in row]
    if (root / REVIEW).exists():
        order.append(("全章のまとめのクイズ", REVIEW))
    return order


def _rel(src: str, dst: str) -> str:
    """A relative link from notebook ``src`` to ``dst`` (both repository paths, one folder deep)."""
    a, b = src.split("/", 1)[0], dst.split("/", 1)
    return b[1] if a == b[0] else f"../{dst}"


def footer(path: str, root: Path = ROOT) -> str:
    """The Markdown of ``path``'s footer: where to go next, the chapter's four notebooks, the guide."""
    order = reading_order(root)
    names = [p for _, p in order]
    i = names.index(path)
    lines = ["---", ""]
    if i + 1 < len(order):
        title, nxt = order[i + 1]
        lines.append(f"**次へ**：[{title}]({_rel(path, nxt)})")
    else:
        lines.append(f"**次へ**：これで全章を終えました。[コースガイド]({_rel(path, GUIDE)}) の進み具合の表で、"
                     "やり残した章を確かめましょう。")
    m = re.match(r"\w+/(\d\d)_", path)
    chapter = int(m.group(1)) if m else 0
    row = chapter_notebooks(root).get(chapter)
    if row:
        steps = [f"**{label}**（このノートブック）" if p == path else f"[{label}]({_rel(path, p)})" for label, p in row]
        lines += ["", f"第{chapter}章の流れ：" + " → ".join(steps)]
    if path != GUIDE and i + 1 < len(order):
        lines += ["", f"[コースガイドに戻る]({_rel(path, GUIDE)})（章の一覧と進み具合の表）"]
    return "\n".join(lines)


def set_footer(path: Path, root: Path = ROOT) -> bool:
    """Write the footer as the last cell of the notebook at ``path`` (replacing an older one). Returns whether
    the file changed."""
    import nbformat
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    nb = nbformat.read(path, as_version=4)
    text = footer(rel, root)
    cells = [c for c in nb.cells if TAG not in c.get("metadata", {}).get("tags", [])]
    if len(cells) == len(nb.cells) - 1 and nb.cells[-1].source == text:
        return False
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata["tags"] = [TAG]
    nb.cells = cells + [cell]
    nbformat.validator.normalize(nb)
    nbformat.write(nb, path)
    return True


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description="Write the 「次へ」 footer of every course notebook.")
    parser.add_argument("--skip", nargs="*", default=[], help="notebooks to leave as they are (repository paths)")
    skip = set(parser.parse_args(argv).skip)
    changed = [p for _, p in reading_order() if p not in skip and set_footer(ROOT / p)]
    print(f"footers written: {len(changed)}" + "".join(f"\n  {p}" for p in changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
