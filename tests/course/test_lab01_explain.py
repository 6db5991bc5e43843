"""Lab 1's sweep readings (course/labs/lab01_explain.py): the prefill share and step budget printed
from the rows, predictions that turn with a planted number, and saved verdicts that agree with the
saved sweep."""
import json
import re
from pathlib import Path

from course.labkit.predictions import HELD, MISSED
from course.labs import lab01_explain as ex

ROOT = Path(__file__).resolve().parents[2]


def row(c, ttft, tpot, tok_s):
    return {"concurrency": c, "ttft_ms": ttft, "tpot_ms": tpot, "tok_s": tok_s}


ROWS = [row(1, 17.3, 6.9, 136.6), row(2, 28.2, 7.0, 263.7), row(4, 57.6, 7.2, 460.6),
        row(8, 104.0, 8.7, 682.6), row(16, 229.5, 12.5, 828.5)]


def test_reading_prints_prefill_share_and_the_step_budget():
    text = ex.sweep_reading(ROWS, prompt_len=256, output_len=32, budget=2048)
    wall16 = 16 * 32 / 828.5 * 1000                               # ms: the burst's whole time
    assert f"所要時間 {wall16:.0f} ms の {100 * 229.5 / wall16:.0f}%" in text
    assert "4,096 トークン" in text and "2 ステップに分かれます" in text    # 16 x 256 over a 2,048 budget
    eight = text.splitlines()[4]                                   # 8 x 256 = 2,048 fits
    assert "同時  8" in eight and "収まります" in eight
    assert "6.9 → 12.5 ms（1.81 倍）" in text


def test_predictions_turn_with_a_planted_number():
    assert [p.held for p in ex.sweep_predictions(ROWS)] == [True, True]
    slow = ROWS[:-1] + [row(16, 229.5, 6.9 * 9, 828.5)]        # TPOT grows 9x for 16x requests
    assert ex.sweep_predictions(slow)[0].held is False
    straight = [row(2 ** i, 10, 7, 100 * 2 ** i) for i in range(5)]  # tok/s doubles: no plateau
    assert ex.sweep_predictions(straight)[1].held is False


LINE = re.compile(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+$", re.M)


def test_lab1_saved_sweep_verdicts_agree_with_the_saved_rows():
    nb = json.loads((ROOT / "labs/01_prefill_decode_lab.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"]
                if c["cell_type"] == "code" and "sweep_predictions" in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")
    rows = [row(int(c), float(t), float(p), float(s)) for c, t, p, s in LINE.findall(text)]
    assert len(rows) >= 3, text
    saved = [x for x in text.splitlines() if x.startswith((HELD, MISSED))]
    derived = ex.sweep_predictions(rows)
    assert len(saved) == len(derived)
    for s, p in zip(saved, derived):
        assert s.startswith(HELD if p.held else MISSED) and p.text in s, (s, p)
