"""The structure check of lessons and labs::

    python -m course.tooling.structure        # (or python -m course.tooling.terms --structure)

Each lesson ``lessons/NN_topic.ipynb`` (NN = 01..10) must have Markdown headings (any level, optionally
numbered "## 8. ") starting with each of ``LESSON_HEADINGS``, at least ``MIN_STEPS`` numbered step headings
("## 1. ...") for the short-step body, and links to ``../labs/NN_*_lab.ipynb``,
``../quizzes/NN_topic_quiz.ipynb`` and, once that file exists, ``../exercises/NN_topic_exercise.ipynb``.
Each lab must have headings starting with 課題 (or a ### 課題N) and まとめ.

Times: the first line of text under a lesson's ``## 所要時間の目安`` starts with ``NN〜MM分`` (or ``約 NN分``);
the guide (lessons/00_course_guide.ipynb) has a table row per chapter whose first cell is the chapter number,
whose second cell links ``NN_topic.ipynb`` and whose third cell is the same ``NN〜MM分``.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LESSON_HEADINGS = ("この章のゴール", "所要時間の目安", "まとめ", "セルフチェック", "用語集", "参考文献")
LAB_HEADINGS = ("課題", "まとめ")
MIN_STEPS = 3
TIME = re.compile(r"^\s*(約\s*\d+\s*分|\d+\s*[〜~～-]\s*\d+\s*分)")


def _markdown(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _headings(md: str) -> list[str]:
    return [re.sub(r"^#+\s*(\d+\.\s*)?", "", line).strip() for line in md.splitlines() if line.startswith("#")]


def _norm(time: str) -> str:
    return re.sub(r"\s+", "", time).replace("~", "〜").replace("～", "〜").replace("-", "〜")


def lesson_time(md: str) -> str | None:
    m = re.search(r"^#+\s*所要時間の目安\s*\n+(.*)", md, flags=re.M)
    t = TIME.match(m.group(1)) if m else None
    return _norm(t.group(1)) if t else None


def lesson_problems(path: Path, root: Path = REPO) -> list[str]:
    md, stem = _markdown(path), path.stem
    nn = stem[:2]
    heads = _headings(md)
    out = [f"{path.name}: 見出し「{h}」がありません" for h in LESSON_HEADINGS
           if not any(x.startswith(h) for x in heads)]
    steps = [l for l in md.splitlines() if re.match(r"^##\s+\d+\.\s", l)]
    if len(steps) < MIN_STEPS:
        out.append(f"{path.name}: 番号付きの節（## 1. …）が {len(steps)} 個です（{MIN_STEPS} 個以上）")
    if lesson_time(md) is None and any(x.startswith("所要時間の目安") for x in heads):
        out.append(f"{path.name}: 「## 所要時間の目安」の直後の行が「NN〜MM分」か「約 NN分」で始まりません")
    labs = sorted((root / "labs").glob(f"{nn}_*_lab.ipynb"))
    wanted = [f"../labs/{p.name}" for p in labs] + [f"../quizzes/{stem}_quiz.ipynb"]
    if (root / "exercises" / f"{stem}_exercise.ipynb").exists():
        wanted.append(f"../exercises/{stem}_exercise.ipynb")
    out += [f"{path.name}: {w} へのリンクがありません" for w in wanted if f"({w})" not in md]
    return out


def lab_problems(path: Path) -> list[str]:
    heads = _headings(_markdown(path))
    return [f"{path.name}: 見出し「{h}」がありません" for h in LAB_HEADINGS if not any(x.startswith(h) for x in heads)]


def guide_times(md: str) -> dict[str, str]:
    """Lesson file name -> the time in the guide's table."""
    out = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            link = re.search(r"\((\d\d_[^)/]+\.ipynb)\)", cells[1])
            t = TIME.match(cells[2])
            if link:
                out[link.group(1)] = _norm(t.group(1)) if t else cells[2]
    return out


def problems(root: Path = REPO) -> list[str]:
    lessons = [p for p in sorted((root / "lessons").glob("[01][0-9]_*.ipynb")) if not p.name.startswith("00_")]
    out = []
    for p in lessons:
        out += lesson_problems(p, root)
    for p in sorted((root / "labs").glob("*_lab.ipynb")):
        out += lab_problems(p)
    guide = guide_times(_markdown(root / "lessons" / "00_course_guide.ipynb"))
    for p in lessons:
        mine, theirs = lesson_time(_markdown(p)), guide.get(p.name)
        if theirs is None:
            out.append(f"00_course_guide.ipynb: {p.name} の行（章・リンク・時間）が表にありません")
        elif mine is not None and theirs != mine:
            out.append(f"00_course_guide.ipynb: {p.name} の時間が「{theirs}」、レッスンでは「{mine}」です")
    return out


def main(argv=None) -> int:
    found = problems()
    for line in found:
        print(line)
    print(f"{len(found)} 件" if found else "構成の問題はありません。", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
