"""The terms lint (course.tooling.terms): rules come from course/TERMS.md, and the course passes it.

``test_course_uses_the_adopted_terms`` fails with one line per violation (file, cell, word, the term to use).
"""
from pathlib import Path

from course.tooling import terms


def _lint_text(tmp_path: Path, markdown: str, outputs=None):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    code = nbformat.v4.new_code_cell("x = 1  # プリフィル in code is fine")
    code.outputs = outputs or []
    nb.cells.append(code)
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return terms.lint([path], root=tmp_path)


def test_rules_are_read_from_terms_md():
    rules, exceptions = terms.load_rules()
    words = {r.word for r in rules}
    assert {"プリフィル", "デコード", "同時ユーザー数", "トークン/秒", "KVキャッシュ"} <= words
    assert "鍵 / 値" not in words                            # qualified （初出の説明の括弧内を除く）
    assert "キー / バリュー" in words and "キー" not in words  # a pair is one phrase (キー alone: a dict key)
    assert any(r.regex and r.pattern.search("何人入るか") for r in rules)
    assert ("acceptance length", "lessons/08_speculative_decoding.ipynb") in exceptions


def test_known_offenders_are_reported_with_cell_and_term(tmp_path):
    found = _lint_text(tmp_path, "プリフィルとデコードの速さ [トークン/秒]。同時ユーザー数は何人入るか。1人 8,192 トークン")
    got = {(v.where, v.word, v.use) for v in found}
    assert ("cell 0", "プリフィル", "Prefill") in got
    assert ("cell 0", "デコード", "Decode") in got
    assert ("cell 0", "トークン/秒", "tok/s（出力 tok/s）") in got
    assert any(v.word == "同時ユーザー数" and v.use == "同時リクエスト数" for v in found)
    assert any(v.word == "何人" for v in found) and any(v.word.startswith("1") for v in found)


def test_code_urls_and_adopted_terms_are_not_violations(tmp_path):
    text = ("投機的デコード。`デコード` と\n```\nプリフィル\n```\n[link](https://x.org/デコード) "
            "1人あたりの速さ、デコーダーの層、キーワード、dict のキー")
    assert _lint_text(tmp_path, text) == []


def test_printed_outputs_are_linted_but_code_values_are_not(tmp_path):
    import nbformat
    out = nbformat.v4.new_output("stream", text="dtype bfloat16\nプリフィル 12 ms\n")
    found = _lint_text(tmp_path, "本文", [out])
    assert [(v.where, v.word) for v in found] == [("cell 1 (出力)", "プリフィル")]


def test_course_uses_the_adopted_terms():
    found = terms.lint()
    assert not found, f"{len(found)} 件:\n" + "\n".join(v.line() for v in found)
