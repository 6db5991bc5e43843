"""The terms lint: learner-facing text uses the 採用する表記 of ``course/TERMS.md``::

    python -m course.tooling.terms [paths...]      # one line per violation, exit 1 if any
    python -m course.tooling.terms --structure     # the structure check (course.tooling.structure)

The rules come from TERMS.md itself: every table row's 使わない表記 column (words separated by 、, "A / B" read as one phrase; a word
with a qualifier in （）is linted only when the qualifier is in ``LINTED_QUALIFIERS``, because the others,
such as （初出の説明を除く）, need a reader's judgement), plus the regular expressions of its ``## 規則``
section and minus the lines of its ``## lint の例外`` section.

What is scanned (``default_paths``): Markdown cells and saved text outputs of lessons/, labs/, quizzes/ and
exercises/ notebooks, README.md, the quiz banks (quizzes/*.yaml, every string), and the Japanese string
literals in course/labs, course/panels, course/labkit and course/demos (labels and table headers; docstrings
are skipped). Code cells' source, fenced and inline code, URLs and HTML tags are not text and are skipped.
An occurrence inside an adopted term (デコード inside 投機的デコード) is not a violation.
"""
from __future__ import annotations

import ast
import fnmatch
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TERMS_MD = REPO / "course" / "TERMS.md"
LINTED_QUALIFIERS = ("コード以外", "空白なし", "コード・論文名以外でカタカナにしない")
NOTEBOOK_DIRS = ("lessons", "labs", "quizzes", "exercises")
PYTHON_DIRS = ("course/labs", "course/panels", "course/labkit", "course/demos")
JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
KATAKANA = "\u30a0-\u30ff"


@dataclass(frozen=True)
class Rule:
    word: str            # what the text must not contain (shown in the report)
    pattern: re.Pattern
    use: str             # the 採用する表記 to write instead
    allowed: tuple = ()  # adopted terms that contain the word (an occurrence inside one is fine)
    regex: bool = False  # a 規則 row: report the matched text
    code_word: bool = False  # qualified （コード以外）: a code value, so not linted in printed outputs


@dataclass(frozen=True)
class Violation:
    file: str
    where: str           # "cell 12", "line 40", "questions[3].choices[1]"
    word: str
    use: str
    context: str

    def line(self) -> str:
        return f"{self.file}:{self.where}: 「{self.word}」→「{self.use}」  …{self.context}…"


def _word_pattern(word: str) -> re.Pattern:
    """Match ``word`` not glued to more katakana (キー in キーワード) or ASCII letters (TPS in TPSx)."""
    body = re.escape(word).replace(r"\ ", r"\s*")
    before = after = ""
    if re.match(rf"[{KATAKANA}]", word[0]):
        before = rf"(?<![{KATAKANA}])"
    if re.match(rf"[{KATAKANA}]", word[-1]):
        after = rf"(?![{KATAKANA}])"
    if re.match(r"[A-Za-z0-9]", word[0]):
        before = r"(?<![A-Za-z0-9_])"
    if re.match(r"[A-Za-z0-9]", word[-1]):
        after = r"(?![A-Za-z0-9_])"
    return re.compile(before + body + after)


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row; ``\\|`` is a literal bar inside a cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _section(text: str, title: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == title
            continue
        if inside:
            out.append(line)
    return out


def _bad_words(cell: str) -> list[tuple[str, bool]]:
    """The linted words of one 使わない表記 cell, each with whether it is a code word."""
    words = []
    for raw in cell.split("、"):
        raw = raw.strip()
        qual = re.search(r"（([^）]*)）$", raw)
        code = bool(qual) and "コード" in qual.group(1)
        if qual:
            if qual.group(1) not in LINTED_QUALIFIERS:
                continue                                  # needs judgement: not linted
            raw = raw[:qual.start()].strip()
        if len(raw) >= 2 and raw != "—":                 # "キー / バリュー" as a whole (キー alone is a dict key)
            words.append((raw, code))
    return words


def load_rules(path: Path = TERMS_MD) -> tuple[list[Rule], list[tuple[str, str]]]:
    """(rules, exceptions) from TERMS.md; an exception is (word, file glob)."""
    text = path.read_text(encoding="utf-8")
    table, adopted = [], []
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = _cells(line)
        if len(cells) < 3 or cells[0] in ("採用する表記", "使う表記", "正規表現", "語"):
            continue
        if line in _section(text, "規則") or line in _section(text, "lint の例外"):
            continue
        use = cells[0]
        adopted.append(use)
        for word, code in _bad_words(cells[1]):
            table.append((word, use, code))
    pieces = {p.strip() for a in adopted for p in re.split(r"[ /（）()・、]+", a) if p.strip()} | set(adopted)
    rules = [Rule(w, _word_pattern(w), u, tuple(sorted(p for p in pieces if w in p and p != w)), code_word=c)
             for w, u, c in table]
    for line in _section(text, "規則"):
        cells = _cells(line) if line.startswith("|") and not line.startswith("|---") else []
        if len(cells) >= 2 and cells[0] != "正規表現":
            pattern = cells[0].strip("`").replace(r"\|", "|")
            rules.append(Rule(pattern, re.compile(pattern), cells[1], regex=True))
    exceptions = []
    for line in _section(text, "lint の例外"):
        cells = _cells(line) if line.startswith("|") and not line.startswith("|---") else []
        if len(cells) >= 2 and cells[0] != "語":
            exceptions.append((cells[0].strip("`"), cells[1].strip("`")))
    return rules, exceptions


def strip_markdown_code(text: str) -> str:
    """Drop fenced code, inline code, URLs (also in links and images), HTML tags and math."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", " ", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)\s]*\)", "]", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"<[^>\n]+>", " ", text)
    return text


def check_text(text: str, rules: list[Rule], output: bool = False) -> list[tuple[str, str, str]]:
    """(word, use, context) for each violation in ``text`` (already stripped of code); ``output``: the text
    a cell printed, where code words (bf16's dtype name bfloat16) are values, not prose."""
    out = []
    for rule in rules:
        if output and rule.code_word:
            continue
        for m in rule.pattern.finditer(text):
            s, e = m.span()
            if any(_covers(text, a, s, e) for a in rule.allowed):
                continue
            out.append((m.group(0) if rule.regex else rule.word, rule.use,
                        text[max(0, s - 12):e + 12].replace("\n", " ")))
    return out


def _covers(text: str, term: str, s: int, e: int) -> bool:
    """Whether an occurrence of ``term`` spans text[s:e]."""
    i = text.find(term, max(0, e - len(term)))
    while i != -1 and i <= s:
        if i + len(term) >= e:
            return True
        i = text.find(term, i + 1)
    return False


def _output_text(out: dict) -> str:
    if out.get("output_type") == "stream":
        return "".join(out.get("text", ""))
    data = out.get("data", {})
    parts = [data.get(k, "") for k in ("text/plain", "text/markdown", "text/html")]
    return strip_markdown_code("\n".join("".join(p) if isinstance(p, list) else p for p in parts))


def notebook_texts(path: Path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            yield f"cell {i}", strip_markdown_code("".join(cell["source"]))
        for out in cell.get("outputs", []):
            yield f"cell {i} (出力)", _output_text(out)


def yaml_texts(path: Path):
    import yaml

    def walk(node, where):
        if isinstance(node, str):
            yield where, strip_markdown_code(node)
        elif isinstance(node, dict):
            for k, v in node.items():
                if k == "id":
                    continue                              # identifiers, not text
                yield from walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, f"{where}[{i}]")
    yield from walk(yaml.safe_load(path.read_text(encoding="utf-8")), "")


def python_texts(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and JAPANESE.search(node.value)):
            yield f"line {node.lineno}", strip_markdown_code(node.value)


def texts(path: Path):
    if path.suffix == ".ipynb":
        return notebook_texts(path)
    if path.suffix in (".yaml", ".yml"):
        return yaml_texts(path)
    if path.suffix == ".py":
        return python_texts(path)
    return [("line 1", strip_markdown_code(path.read_text(encoding="utf-8")))]


def default_paths(root: Path = REPO) -> list[Path]:
    paths = [root / "README.md"]
    for d in NOTEBOOK_DIRS:
        paths += sorted((root / d).glob("*.ipynb"))
    paths += sorted((root / "quizzes").glob("*.yaml"))
    for d in PYTHON_DIRS:
        paths += sorted((root / d).rglob("*.py"))
    return [p for p in paths if p.exists()]


def lint(paths=None, root: Path = REPO, terms: Path = TERMS_MD) -> list[Violation]:
    rules, exceptions = load_rules(terms)
    out = []
    for path in paths or default_paths(root):
        path = Path(path).resolve()
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        for where, text in texts(path):
            for word, use, context in check_text(text, rules, output="(出力)" in where):
                if any(word == w and fnmatch.fnmatch(rel, g) for w, g in exceptions):
                    continue
                out.append(Violation(rel, where, word, use, context))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--structure" in argv:
        from course.tooling import structure
        return structure.main([a for a in argv if a != "--structure"])
    found = lint([Path(a) for a in argv] or None)
    for v in found:
        print(v.line())
    print(f"{len(found)} 件" if found else "表記の問題はありません。", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
