"""Navigation between the notebooks: every notebook ends with the 「次へ」 footer of
``course.tooling.navigation`` (lesson → lab → quiz → exercise → next chapter, and back to the guide), and
every relative link in a notebook's Markdown resolves, from the original and from the learner's copy in
``work/`` (``course.tooling.workspace.sync``)."""
import re
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pytest

from course.tooling import navigation, workspace

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [p for _, p in navigation.reading_order(ROOT)]
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|href=[\"']([^\"']+)[\"']")


def links(path: Path) -> list[str]:
    """Relative link targets in the Markdown cells of a notebook (no URLs, no in-page anchors)."""
    nb = nbformat.read(path, as_version=4)
    out = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"`[^`\n]*`", "", cell.source)             # code spans are not links
        for m in LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if not re.match(r"[a-z][a-z0-9+.-]*:|#", target):
                out.append(unquote(target.split("#", 1)[0]))
    return [t for t in out if t]


def test_every_chapter_is_read_in_order():
    order = NOTEBOOKS
    assert order[0] == navigation.GUIDE and order[-1] == navigation.REVIEW
    for n in range(1, 11):
        kinds = [p.split("/")[0] for p in order if re.match(rf"\w+/{n:02d}_", p)]
        assert kinds == ["lessons", "labs", "quizzes", "exercises"], (n, kinds)


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_each_notebook_ends_with_its_footer(rel):
    nb = nbformat.read(ROOT / rel, as_version=4)
    last = nb.cells[-1]
    assert navigation.TAG in last.metadata.get("tags", []), "run `python -m course.tooling.navigation`"
    assert last.source == navigation.footer(rel, ROOT)
    i = NOTEBOOKS.index(rel)
    if i + 1 < len(NOTEBOOKS):
        assert f"**次へ**：[" in last.source and NOTEBOOKS[i + 1].split("/")[-1] in last.source.split("\n")[2]
    if rel != navigation.GUIDE:
        assert "00_course_guide.ipynb" in last.source


def test_the_quiz_leads_to_the_exercise():
    text = navigation.footer("quizzes/05_batching_quiz.ipynb", ROOT)
    assert text.splitlines()[2] == "**次へ**：[第5章の演習](../exercises/05_batching_exercise.ipynb)"


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    work = tmp_path_factory.mktemp("learner") / "work"
    workspace.sync(ROOT, work)
    return work


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_every_link_resolves_in_the_repository_and_in_work(rel, copies):
    broken = []
    for target in links(ROOT / rel):
        for base in (ROOT / rel, copies / rel):
            if not (base.parent / target).exists():
                broken.append(f"{target} (from {base.relative_to(base.parents[2])})")
    assert not broken, f"{rel}: broken relative links: {broken}"


def test_the_link_reader_sees_the_links():
    found = links(ROOT / "lessons/05_batching.ipynb")
    assert "../labs/05_batching_lab.ipynb" in found and "../course/TERMS.md" in found
