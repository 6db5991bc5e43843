"""The numbers lint (course.tooling.numbers_lint): every number in a notebook's Markdown is
printed by the notebook's run or written in its code (a cited constant with its source and date),
and a stale number planted in a real notebook is named with the notebook, the cell and the number."""
import copy
from pathlib import Path

import nbformat
import pytest

from course.tooling import numbers_lint as nl

ROOT = Path(__file__).resolve().parents[2]


def _nb(markdown: str, code: str = "x = 1", printed: str = ""):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    cell = nbformat.v4.new_code_cell(code)
    if printed:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells.append(cell)
    return nb


def _unsupported(markdown: str, code: str = "x = 1", printed: str = "") -> list[str]:
    return [f.number for f in nl.lint_notebook(_nb(markdown, code, printed), "nb.ipynb")]


def test_references_dates_identifiers_and_code_are_not_numbers():
    text = ("# 第3章 ラボ\n\n1. §5 と課題2、3章を読みます（約 20 分、50〜70 分）。\n"
            "2. 2024年6月1日、2025-06-01、arXiv:2309.06180、SOSP 2023、OSDI'24、PR #10980。\n"
            "Llama-3-8B、Qwen3-0.6B、H100、fp8、1k/1k、Llama 3.1 8B、PCIe 5.0、`max_tokens=32`、"
            "[表](../docs/x.md)、lab1_history.csv、$n^2/2$、2つ、1人。\n"
            "- **試すこと**：プロンプト長を 16 → 448 にします。")
    assert nl.prose_numbers(text) == []


def test_claims_are_numbers():
    got = [n.text for n in nl.prose_numbers("TPOT は 5.6 ms → 7.5 ms、8 倍、83%、1,575 tok/s、16 件")]
    assert got == ["5.6", "7.5", "8", "83", "1,575", "16"]


def test_rounding_the_prose_uses():
    printed = "TPOT 5.63 ms, 1575.2 tok/s, ratio 0.83, share 82.7%, growth 1.83x"
    assert _unsupported("5.6 ms、1,575 tok/s、83%（0.83）、+83%、約 1,600 tok/s", printed=printed) == []
    stale = _unsupported("5.7 ms と 1,576 tok/s と 1,600 tok/s", printed=printed)
    assert stale == ["5.7", "1,576", "1,600"]


def test_an_equation_that_holds_checks_itself():
    assert _unsupported("1000 ÷ 42.1 ≈ 24 tok/s。10 + 100 + 20 + 50 = 180 です。") == []
    assert _unsupported("10 + 100 + 20 + 50 = 190 です。") == ["10", "100", "20", "50", "190"]


def test_a_comment_counts_only_with_its_source_and_date():
    text = "H100 の帯域は 3.35 TB/s です。"
    assert _unsupported(text, code="bw = 2.0  # H100: 3.35 TB/s") == ["3.35"]
    cited = "# H100 SXM: 3.35 TB/s\n# https://www.nvidia.com/h100 (2025-06-01)\nbw = 2.0"
    assert _unsupported(text, code=cited) == []
    assert _unsupported(text, code="HBM_TB_S = 3.35e12") == []            # a constant in code


def _planted(path: Path):
    """A real notebook with one supported prose number changed (in memory) to an unprinted value."""
    nb = nbformat.read(path, as_version=4)
    values = nl.evidence(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for number in nl.prose_numbers(cell.source):
            if number.decimals == 0 and "," not in number.text and not number.approx:
                stale = int(number.value) + 1
                while any(abs(v - stale) <= 0.5 for v in values):
                    stale += 1
                planted = copy.deepcopy(nb)
                end = number.start + len(number.text)
                source = cell.source[:number.start] + str(stale) + cell.source[end:]
                planted.cells[index].source = source
                return planted, index, str(stale)
    raise AssertionError(f"{path}: no prose number to plant a stale value in")


@pytest.mark.parametrize("name", ["labs/01_prefill_decode_lab.ipynb", "labs/05_batching_lab.ipynb"])
def test_a_planted_stale_number_is_named(name):
    nb, cell, stale = _planted(ROOT / name)
    assert nl.lint_notebook(nbformat.read(ROOT / name, as_version=4), name) == []
    found = nl.lint_notebook(nb, name)
    assert [(f.notebook, f.cell, f.number) for f in found] == [(name, cell, stale)]
    assert f"{name}: cell {cell}: {stale}" in found[0].line()


def test_every_notebook_states_only_numbers_from_its_run_or_cited_code():
    found = nl.lint(root=ROOT)
    assert not found, "\n" + "\n".join(f.line() for f in found)
