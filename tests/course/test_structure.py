"""The structure check (course.tooling.structure) of lessons, labs and the guide's times.

Format the check expects (also in the module's docstring):
- each lessons/NN_topic.ipynb (01..10) has Markdown headings starting with この章のゴール, 所要時間の目安,
  まとめ, セルフチェック, 用語集, 参考文献 (a leading "8. " is allowed), at least 3 numbered "## N. " steps, and
  links ``(../labs/NN_*_lab.ipynb)``, ``(../quizzes/NN_topic_quiz.ipynb)`` and, once the file exists,
  ``(../exercises/NN_topic_exercise.ipynb)``;
- the first line under ``## 所要時間の目安`` starts with ``NN〜MM分`` (or ``約 NN分``);
- lessons/00_course_guide.ipynb has a table row ``| N | [title](NN_topic.ipynb) | NN〜MM分 | ...`` per lesson
  with the same time;
- each labs/*_lab.ipynb has headings starting with 課題 and まとめ.
"""
import json
from pathlib import Path

from course.tooling import structure

REPO = Path(__file__).resolve().parents[2]


def _nb(path: Path, markdown: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    cell = {"cell_type": "markdown", "metadata": {}, "source": markdown}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


LESSON = """# 第1章
## この章のゴール
## 所要時間の目安

50〜70分（セルの実行を含む）
## 1. a
## 2. b
## 3. c
## 4. セルフチェック
## 5. 用語集
## まとめ
[lab](../labs/01_x_lab.ipynb) [quiz](../quizzes/01_basics_quiz.ipynb)
## 参考文献・資料
"""


def _course(tmp_path: Path, lesson=LESSON, guide_time="50〜70分"):
    _nb(tmp_path / "lessons/01_basics.ipynb", lesson)
    _nb(tmp_path / "labs/01_x_lab.ipynb", "# ラボ\n### 課題1：a\n## まとめ\n")
    _nb(tmp_path / "lessons/00_course_guide.ipynb", f"| 章 | レッスン | 時間 |\n|---|---|---|\n"
                                                   f"| 1 | [推論](01_basics.ipynb) | {guide_time} |\n")
    return tmp_path


def test_a_complete_course_passes(tmp_path):
    assert structure.problems(_course(tmp_path)) == []


def test_missing_heading_link_and_time_mismatch_are_reported(tmp_path):
    root = _course(tmp_path, LESSON.replace("## 5. 用語集\n", ""), guide_time="60〜90分")
    _nb(root / "exercises/01_basics_exercise.ipynb", "# 演習")
    found = structure.problems(root)
    assert "01_basics.ipynb: 見出し「用語集」がありません" in found
    assert "01_basics.ipynb: ../exercises/01_basics_exercise.ipynb へのリンクがありません" in found
    assert any("「60〜90分」、レッスンでは「50〜70分」" in p for p in found)


def test_lab_without_summary_is_reported(tmp_path):
    root = _course(tmp_path)
    _nb(root / "labs/01_x_lab.ipynb", "# ラボ\n### 課題1\n")
    assert structure.problems(root) == ["01_x_lab.ipynb: 見出し「まとめ」がありません"]


def test_course_structure():
    found = structure.problems(REPO)
    assert not found, f"{len(found)} 件:\n" + "\n".join(found)
