"""Predictions checked by the run (course/labkit/predictions.py): a verdict follows the measured numbers, and
every verdict saved in a lab agrees with the numbers saved next to it."""
from __future__ import annotations

import json
import re
from pathlib import Path

from course.labkit.predictions import HELD, MISSED, Prediction, verdicts
from course.labs import lab01_explain as lab01   # 課題4's verdicts live in lab01_explain

ROOT = Path(__file__).resolve().parents[2]


def test_verdict_says_held_or_missed_with_the_numbers_and_reasons():
    ok = Prediction("A は B より速い", True, "A 1.0 ms、B 2.0 ms", "負荷")
    bad = Prediction("A は B より速い", False, "A 3.0 ms、B 2.0 ms", "負荷")
    assert ok.verdict().startswith(HELD) and "A 1.0 ms" in ok.verdict() and "負荷" not in ok.verdict()
    assert bad.verdict().startswith(MISSED) and "A 3.0 ms" in bad.verdict() and "考えられる理由：負荷" in bad.verdict()
    assert verdicts([ok, bad]).splitlines() == [ok.verdict(), bad.verdict()]


def m(tpot, itl_max):
    return {"tpot_ms": tpot, "max_itl_ms": itl_max}


def test_lab1_task4_verdicts_follow_the_numbers():
    """A planted contradicting number turns each verdict."""
    good = lab01.late_long_predictions(m(4.7, 5.6), m(7.0, 60.0))
    assert [p.held for p in good] == [True, True, True]
    assert [p.held for p in lab01.late_long_predictions(m(4.7, 10.0), m(7.0, 60.0))][0] is False  # spiky at once
    assert [p.held for p in lab01.late_long_predictions(m(4.7, 5.6), m(7.0, 12.0))][1] is False   # no spike
    # TPOT rose 15.3 ms, more than a quarter of the 55.3 ms spike: missed
    assert [p.held for p in lab01.late_long_predictions(m(4.7, 5.6), m(20.0, 60.0))][2] is False


LINE = re.compile(r"(一斉に|遅れて長いプロンプト): TPOT\s+([\d.]+) ms、ITL p99\s+([\d.]+) ms、ITL 最大\s+([\d.]+) ms")


def saved_text(rel: str, marker: str) -> str:
    nb = json.loads((ROOT / rel).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_lab1_saved_verdicts_agree_with_its_saved_numbers():
    text = saved_text("labs/01_prefill_decode_lab.ipynb", "late_long_predictions")
    runs = {name: m(float(tpot), float(mx)) for name, tpot, _, mx in LINE.findall(text)}
    assert set(runs) == {"一斉に", "遅れて長いプロンプト"}, text
    saved = [line for line in text.splitlines() if line.startswith((HELD, MISSED))]
    derived = lab01.late_long_predictions(runs["一斉に"], runs["遅れて長いプロンプト"])
    assert len(saved) == len(derived) == 3
    for line, p in zip(saved, derived):
        assert line.startswith(HELD if p.held else MISSED), (line, p)
        assert p.text in line
