"""The numbers lint: each number in a notebook's prose comes from its run or from cited code::

    python -m course.tooling.numbers_lint [notebooks...]   # one line per number, exit 1 if any

A sentence that restates a measured figure goes stale the day the notebook is re-executed. So each
number in a Markdown cell of a lessons/, labs/, exercises/ or quizzes/ notebook must be found in
the same notebook, either

- in a **saved output** (stream, ``text/plain``, ``text/markdown``, ``text/html`` without tags),
  as printed or rounded the way the prose writes it (see "Matching" below), or
- in a **code cell**: a literal or string outside comments (``max_tokens=32``), or a comment
  block (consecutive ``#`` lines) that names its source, a URL or a repository file
  (``docs/published_points.md``), and a date (YYYY-MM-DD). That is where a cited fact (a GPU's
  bandwidth, a price, a paper's figure) lives: ``# H100 SXM 3.35 TB/s (https://..., 2025-06-01)``.

To satisfy it, best first: make the cell print the sentence that states a measured figure
(``print(f"TPOT は {a:.1f} → {b:.1f} ms")``); or point the Markdown at the printed line without
restating it (「下のセルが表示する TPOT の比」); or, for a cited fact, put the constant with its
source and date in a comment of the nearest code cell (a comment changes no output: nbval passes).

What is not a number to check (``IGNORED`` holds the patterns, removed before extracting):

- code and markup: fenced blocks, inline code spans, HTML tags, link targets, URLs, file names,
  math (``$...$`` holding a backslash command or only ASCII: formulas such as ``$n^2/2$``);
- references: 第3章, 3章, 第5節, §5, 課題2, 問3, 図1, ステップ2, list numbering and numbered
  headings, ``#89`` (a row or PR number), 「86 行目」「行 87」;
- time estimates and durations in minutes or hours (「約 20 分」「50〜70 分」「1時間」);
- years and dates (2024年, 2025-06-01, 6月1日, SOSP 2023, OSDI'24), arXiv ids (2309.06180),
  versions (Python 3.11, any ``x.y.z``) and numbered names (Llama 3.1, PCIe 5.0, NVLink 4);
- identifiers: a word in which a digit is glued to a letter (H100, Llama-3-8B, Qwen3-0.6B, fp8,
  1k/1k, 70B); a number glued to a unit (``5.6ms``, ``2x``, ``80GB``) is still a number;
- unit conversions next to ×, ÷ or / (60, 1000, 1024, 3600, 10⁶) and the 100万 of 100万トークン;
- a task's settings: the line of a ``**試すこと**`` bullet (the values the learner sets);
- single-digit integers unless a ratio follows (倍, %, x): 「2つ」「1人」 count, 「8 倍」 claims.

Matching (``supported``): a prose number with *d* digits after the point matches an evidence
number that rounds to it at *d* digits (5.6 matches 5.63; 1,575 matches 1575.2); 2,500万 reads
as 25,000,000. A percentage p% also matches a fraction (83% ~ 0.83) or a ratio's change
(+83% ~ 1.83). A number marked approximate (約, およそ, ほぼ, 〜 or ~ before it; 前後, 程度, ほど,
くらい after it) may also be rounded to its trailing zeros (約 1,600 matches 1575). Signs are
ignored. An equation written out with plain numbers whose arithmetic holds (「1000 ÷ 42.1 ≈ 24」,
「10 + 100 + 20 + 50 = 180」) checks itself: its operands and result need no other evidence, and
a stale operand breaks it.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("lessons", "labs", "exercises", "quizzes")

_REF_WORDS = "課題|問|演習|ステップ|Step|step|図|表|節|章|例|パート|手順|レッスン|ラボ|クイズ|セル"
_NAMED = ("Llama|Qwen|Mistral|GPT|Gemma|Phi|DeepSeek|Yi|Falcon|OPT|BLOOM|PCIe|NVLink|NDR|HBM|DDR"
          "|LPDDR|capability|Gen|SM|AVX|Ampere|Hopper|Blackwell")
_TOOLS = ("Python|python|torch|PyTorch|vLLM|SGLang|CUDA|Triton|transformers|JupyterLab"
          "|TensorRT-LLM|v")
_FILES = "ipynb|py|md|yaml|yml|csv|json|txt|png|svg|gguf|safetensors|toml"
_COUNTED = r"トークン|件|個|W|GB|MB|tok|ms|円|人|回|バイト|B\b"
_CONVERSION = r"(?:60|1000|1024|3600|10\^?6|10⁶)"
IGNORED = [re.compile(p, re.M | re.S) for p in (
    r"```.*?```", r"`[^`\n]*`",                                   # code
    r"<!--.*?-->", r"<[^>\n]+>",                                  # HTML comments and tags
    r"\]\([^)]*\)", r"https?://[^\s)>]+",                         # link targets, URLs
    rf"[\w.\-/]+\.(?:{_FILES})\b",                                  # file names
    r"(?<!\\)\$\$.*?\$\$",                                               # display math
    r"(?<![\\$])\$(?!\s)(?:[^$\n]*\\[A-Za-z{][^$\n]*|[\x20-\x23\x25-\x5b\x5d-\x7e]+)"
    r"(?<![\s\\])\$",                                               # math
    r"第\s*\d+(?:\s*[章節項問部回])?", r"§\s*\d+(?:\.\d+)*",            # references
    rf"(?:{_REF_WORDS})\s*\d+(?:\s*[〜~・、,–-]\s*\d+)*", r"\d+\s*[章節]",
    r"^\s*(?:[-*]\s+)?\d+[.)]\s", r"^#+\s*\d+(?:\.\d+)*[.)]?\s",       # list numbers, headings
    r"#\d+", r"\d+\s*行目", r"(?<![実並進])行\s*\d+(?:\s*[・、,]\s*\d+)*",         # rows
    r"\d+(?:\.\d+)?\s*(?:[〜~–-]\s*\d+(?:\.\d+)?\s*)?(?:分(?!の)|時間(?!あたり|の料金))",  # durations
    r"\d{4}\s*年(?:\s*\d{1,2}\s*月(?:\s*\d{1,2}\s*日)?)?",
    r"(?:19|20)\d\d[-/](?:0?[1-9]|1[0-2])(?:[-/][0-3]?\d)?(?!\d)",
    r"\d{1,2}\s*月\s*\d{1,2}\s*日", r"\d{1,2}\s*月", r"'\d\d\b",           # dates
    rf"(?<![\d,.])(?:19[5-9]\d|20[0-3]\d)(?![\d,]|\.\d|\s*(?:{_COUNTED}))",      # years
    r"(?:arXiv:?\s*)?\b\d{4}\.\d{4,5}(?:v\d+)?\b",                   # arXiv ids
    rf"(?:{_TOOLS})\s*\d+(?:\.\d+)+", r"\b\d+\.\d+\.\d+\b",           # versions
    rf"(?:{_NAMED})\s*\d+(?:\.\d+)?",                                # numbered names
    rf"(?<![\d,.]){_CONVERSION}(?=\s*[×÷/*])|(?<=[×÷/*])\s*{_CONVERSION}(?![\d,.])",
    r"100\s*万(?=\s*トークン)",                                    # the M of $/M tokens
    r"^\s*[-*]\s*\*\*試すこと\*\*[^\n]*$",                           # a task's settings
)]
_UNIT = r"(?:ms|us|µs|s|ns|x|GB|GiB|MB|MiB|KB|KiB|TB|TiB|W|kW|MW|GHz|TFLOPS|FLOPs?|B/s|GB/s|TB/s)"
_UNIT_WORD = re.compile(rf"[\d.,]+{_UNIT}(?:/\w+)?")
_IDENTIFIER = re.compile(r"(?<![A-Za-z0-9_.])[A-Za-z0-9][A-Za-z0-9_.\-]*")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.,])[-+−]?"
                     r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\d])")
_EVIDENCE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+")
_APPROX_BEFORE = re.compile(r"(?:約|およそ|ほぼ|概ね|〜|~|≈|≒)\s*\\?\$?\s*$")
_APPROX_AFTER = re.compile(r"^\s*\S{0,6}?(?:前後|程度|ほど|くらい|ぐらい)")
_RATIO_AFTER = re.compile(r"^\s*(?:倍|%|％|x\b)")


@dataclass(frozen=True)
class ProseNumber:
    text: str            # as written ("1,575", "5.6")
    value: float
    decimals: int
    scale: float         # 1, or 1e4 for a number written with 万
    percent: bool
    approx: bool
    context: str
    start: int           # offset in the Markdown source
    checked: bool = False  # part of an equation whose arithmetic holds


@dataclass(frozen=True)
class Finding:
    notebook: str
    cell: int
    number: str
    context: str

    def line(self) -> str:
        return f"{self.notebook}: cell {self.cell}: {self.number} is unsupported  …{self.context}…"


def _blank(text: str) -> str:
    """``text`` with every ignored span replaced by spaces (positions, hence contexts, are kept)."""
    for pattern in IGNORED:
        text = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return text


def _blank_identifiers(text: str) -> str:
    def keep_units(m):                                  # 5.6ms, 2x, 80GB: a number and its unit
        word = m.group(0)
        mixed = re.search(r"\d", word) and re.search(r"[A-Za-z]", word)
        return " " * len(word) if mixed and not _UNIT_WORD.fullmatch(word) else word
    return _IDENTIFIER.sub(keep_units, text)


_OPERAND = r"\(?\s*\d[\d,]*(?:\.\d+)?\s*\)?"
_ARITHMETIC = re.compile(rf"(?<![\d.,])((?:{_OPERAND}\s*[×*÷/+−^-]\s*)+{_OPERAND})"
                         r"\s*[=≈≒]\s*(?:約\s*)?$")


def _derived(before: str) -> tuple[float, int] | None:
    """The value and start of an arithmetic expression ending ``before`` with =, ≈ or ≒."""
    tail = before[-80:]
    m = _ARITHMETIC.search(tail)
    if not m:
        return None
    expr = re.sub(r"(?<=\d),(?=\d{3})", "", m.group(1))
    expr = expr.replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    huge = any(float(e) > 64 for e in re.findall(r"\*\*\s*([\d.]+)", expr))   # 9^99999999
    if huge or expr.count("(") != expr.count(")"):
        return None
    try:
        value = float(eval(expr, {"__builtins__": {}}))     # digits, operators, parentheses only
    except (SyntaxError, ZeroDivisionError):
        return None
    return value, len(before) - len(tail) + m.start(1)


def prose_numbers(markdown: str) -> list[ProseNumber]:
    """The numbers a Markdown text states, once ``IGNORED`` spans and identifiers are removed."""
    text = _blank_identifiers(_blank(markdown))
    out = []
    for m in _NUMBER.finditer(text):
        written = m.group(1)
        after = text[m.end():m.end() + 8]
        before = text[max(0, m.start() - 6):m.start()]
        single_digit = "." not in written and len(written.replace(",", "")) == 1
        if single_digit and not _RATIO_AFTER.match(after):
            continue
        decimals = len(written.split(".")[1]) if "." in written else 0
        scale = 1e4 if after.lstrip().startswith("万") else 1.0      # 2,500万, 1億2,500万
        oku = re.search(r"(\d+)\s*億\s*$", text[:m.start()]) if scale > 1 else None
        value = float(written.replace(",", "")) * scale + (int(oku.group(1)) * 1e8 if oku else 0)
        context = re.sub(r"\s+", " ", markdown[max(0, m.start() - 25):m.end() + 25]).strip()
        derived = _derived(markdown[:m.start()])
        approx = bool(_APPROX_BEFORE.search(before) or _APPROX_AFTER.match(after))
        out.append(ProseNumber(written, value, decimals, scale, bool(re.match(r"\s*[%％]", after)),
                               approx, context, m.start(1)))
        if derived and abs(derived[0] - value) <= _tolerance(out[-1]):
            # a correct equation written out: its result and its operands are checked by it
            out = [replace(n, checked=True) if n.start >= derived[1] else n for n in out]
    return out


def _output_text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    parts = [data.get(k, "") for k in ("text/plain", "text/markdown", "text/latex")]
    parts.append(re.sub(r"<[^>]+>", " ", data.get("text/html", "")))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


_SOURCE = re.compile(r"https?://|\b[\w.-]+/[\w./-]+\.(?:md|py|json|csv)\b")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


def _code_and_comments(source: str) -> tuple[str, list[str]]:
    """A code cell's source without its comments, and its comment blocks (consecutive lines).
    A ``#`` inside a string literal does not start a comment."""
    code, blocks, last = [], [], -2
    for number, line in enumerate(source.splitlines()):
        quote, cut = None, None
        for i, ch in enumerate(line):
            if quote and ch == quote and line[i - 1] != "\\":
                quote = None
            elif not quote and ch in "'\"":
                quote = ch
            elif not quote and ch == "#":
                cut = i
                break
        code.append(line if cut is None else line[:cut])
        if cut is not None and number == last + 1:
            blocks[-1] += "\n" + line[cut + 1:]
        elif cut is not None:
            blocks.append(line[cut + 1:])
        last = number if cut is not None else last
    return "\n".join(code), blocks


def _numbers(text: str) -> set[float]:
    values = set()
    for m in _EVIDENCE.finditer(text):
        values.add(abs(float(m.group(0).replace(",", ""))))
        if "e" in m.group(0).lower():                       # 3.35e12 also reads as 3.35
            values.add(float(re.split(r"[eE]", m.group(0))[0]))
    return values


def cited(comment: str) -> bool:
    """Whether a comment block names a source (a URL or a repository file) and a date."""
    return bool(_SOURCE.search(comment) and _DATE.search(comment))


def evidence(nb) -> set[float]:
    """Every number printed in the notebook's saved outputs, written in its code (outside
    comments) or in a comment block that cites its source (``cited``)."""
    values = set()
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        code, comments = _code_and_comments(cell.source)
        texts = [code] + [c for c in comments if cited(c)] + [_output_text(o) for o in cell.outputs]
        values |= set().union(*map(_numbers, texts))
    return values


def _tolerance(number: ProseNumber) -> float:
    """Half a unit of the last digit written; for an approximate integer, of its trailing zeros."""
    tol = 0.5 * 10 ** -number.decimals * number.scale + 1e-9
    if number.approx and number.decimals == 0:
        digits = number.text.replace(",", "")
        zeros = len(digits) - len(digits.rstrip("0")) if digits.strip("0") else 0
        tol = max(tol, 0.5 * 10 ** zeros * number.scale + 1e-9)
    return tol


def supported(number: ProseNumber, values: set[float]) -> bool:
    """Whether ``number`` is one of ``values`` as rounded the way the prose writes it."""
    if number.checked:
        return True
    candidates = set(values)
    if number.percent:
        candidates |= {v * 100 for v in values} | {(v - 1) * 100 for v in values if v > 1}
    return any(abs(v - number.value) <= _tolerance(number) for v in candidates)


def lint_notebook(nb, name: str) -> list[Finding]:
    values = evidence(nb)
    return [Finding(name, index, number.text, number.context)
            for index, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for number in prose_numbers(cell.source) if not supported(number, values)]


def lint(paths=None, root: Path = REPO) -> list[Finding]:
    """Findings for ``paths`` (default: every notebook of ``NOTEBOOK_DIRS`` under ``root``)."""
    import nbformat
    found = []
    for path in paths or [p for d in NOTEBOOK_DIRS for p in sorted((root / d).glob("*.ipynb"))]:
        path = Path(path).resolve()
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        found += lint_notebook(nbformat.read(path, as_version=4), name)
    return found


def main(argv=None) -> int:
    found = lint([Path(a) for a in (sys.argv[1:] if argv is None else argv)] or None)
    for f in found:
        print(f.line())
    print(f"{len(found)} unsupported number(s)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
