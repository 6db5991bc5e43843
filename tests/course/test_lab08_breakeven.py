"""Lab 8's break-even section (course/labs/lab08_breakeven.py): both drafts' c measured alternately with
repeats, the break-even and the formula's speedup over the c range, and the k = 2 / k = 4 readings decided by
the ranges (planted numbers turn them; the saved lines agree with their saved numbers)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from course.labkit.predictions import DISTURBED
from course.labkit.spread import UNDECIDED, verdict_state
from course.labs import lab08, lab08_breakeven as be
from minimal_engine import calculators as calc

ROOT = Path(__file__).resolve().parents[2]
LABELS = {"draft_model": "蒸留", "draft_model_lm": "蒸留なし"}


def cost(c, lo=None, hi=None):
    return {"c": c, "c_min": c if lo is None else lo, "c_max": c if hi is None else hi}


def info(alpha, k, c, sp, span=None, lo=None, hi=None):
    return be.row_info(alpha, k, cost(c, lo, hi), lab08.break_even_alpha, calc.spec_speedup, sp, span or (sp, sp))


def test_costs_alternate_and_keep_median_and_range():
    calls = []
    fake = {"a": iter([0.30, 0.26, 0.28]), "b": iter([0.44, 0.19, 0.29])}

    def measure(method):
        calls.append(method)
        return {"c": next(fake[method])}
    out = be.measure_costs(measure, ("a", "b"), repeats=3)
    assert calls == ["a", "b"] * 3
    assert out["a"]["c"] == 0.28 and out["b"]["c"] == 0.29 and (out["b"]["c_min"], out["b"]["c_max"]) == (0.19, 0.44)
    line = be.cost_line(out, {"a": "A", "b": "B"})
    assert "A 0.28（0.26〜0.30）" in line and "見分けられません" in line
    apart = be.cost_line({"a": cost(0.28, 0.27, 0.30), "b": cost(0.15, 0.14, 0.16)}, {"a": "A", "b": "B"})
    assert "Bの c は、繰り返しの幅を超えてAより小さく" in apart


def test_break_even_range_follows_c():
    i = info(0.5, 2, 0.28, 1.2, lo=0.26, hi=0.30)
    assert i["be_lo"] < i["be"] < i["be_hi"] and i["pred_lo"] < i["pred"] < i["pred_hi"]
    assert abs(i["be"] - 0.400) < 0.002                        # the blind reading: c = 0.28, k = 2 -> 0.400


def test_k2_note_is_decided_by_the_ranges():
    # the blind reading's consistent c: undistilled k = 2, alpha 0.352 below the break-even 0.400, slower: as the formula
    same = be.note("蒸留なし", info(0.352, 2, 0.28, 0.92, (0.90, 0.95), 0.27, 0.29))
    assert "遅いと予測します" in same and "式どおり" in same
    # planted: alpha above the break-even's whole range, yet slower: the actual break-even is higher
    higher = be.note("蒸留なし", info(0.45, 2, 0.28, 0.92, (0.90, 0.95), 0.27, 0.29))
    assert "速いと予測します" in higher and "遅くなりました" in higher and be.HIGHER in higher
    lower = be.note("蒸留なし", info(0.35, 2, 0.28, 1.10, (1.05, 1.12), 0.27, 0.29))
    assert "速くなりました" in lower and be.LOWER in lower
    inside = be.note("蒸留なし", info(0.40, 2, 0.28, 0.92, None, 0.26, 0.30))
    assert "決まりません" in inside and "損益分岐の中" in inside
    near = be.note("蒸留なし", info(0.352, 2, 0.24, 0.91, (0.78, 0.98), 0.24, 0.29))   # reviews10 ch08 #8
    assert "決まりません" in near and "0.03 以内" in near and "遅いと予測" not in near
    straddle = be.note("蒸留", info(0.75, 2, 0.28, 1.02, (0.97, 1.08)))
    assert "1 をまたぐ" in straddle


def test_k4_prediction_held_missed_undecided():
    assert be.prediction("蒸留", info(0.88, 4, 0.28, 1.76, (1.6, 1.9)), True).held
    assert be.prediction("蒸留なし", info(0.34, 4, 0.28, 0.73, (0.7, 0.76)), False).held
    missed = be.prediction("蒸留なし", info(0.62, 4, 0.28, 0.88, (0.85, 0.9)), False)
    assert missed.held is False and be.HIGHER in missed.verdict()
    inside = be.prediction("蒸留なし", info(0.56, 4, 0.28, 0.95, (0.9, 0.98), 0.2, 0.4), False)
    assert inside.held is None and inside.verdict().startswith(UNDECIDED)
    lucky = be.prediction("蒸留", info(0.719, 4, 0.43, 1.53, (1.4, 1.6), 0.34, 0.73), True)   # held, but inside c's range
    assert lucky.held is None


NUM = re.compile(r"受理率 α ([\d.]+)、損益分岐の α ([\d.]+)（c の幅で ([\d.]+)〜([\d.]+)）、速度比 ([\d.]+)（繰り返しで ([\d.]+)〜([\d.]+)）")


def _saved():
    nb = json.loads((ROOT / "labs/08_speculative_decoding_lab.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "lab08_breakeven.note" in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _from(line):
    a, b, lo, hi, sp, sl, sh = map(float, NUM.search(line).groups())
    return {"alpha": a, "be": b, "be_lo": lo, "be_hi": hi, "sp": sp, "sp_lo": sl, "sp_hi": sh, "k": 2}


def test_saved_break_even_lines_agree_with_their_numbers():
    """Re-derives the saved k = 2 notes and k = 4 verdicts from their printed numbers (empty until the re-save)."""
    text = _saved()
    for line in text.splitlines():
        if DISTURBED in line:                   # a crowded run decides nothing (LoadWatch)
            assert line.startswith(UNDECIDED), line
            continue
        if not NUM.search(line) or min(abs(x) for x in (_from(line)["alpha"] - _from(line)["be_lo"],
                                                       _from(line)["alpha"] - _from(line)["be_hi"])) < 0.0015:
            continue
        i = _from(line)
        if line.startswith("k = "):
            label = line.split("：", 1)[1].split("の受理率")[0]
            assert be.note(label, i) == line
        else:
            label = line.split("：", 1)[1].split("は、受理率")[0]
            p = be.prediction(label, i, distilled="蒸留なし" not in label)
            assert verdict_state(line) == p.held, line


def test_cost_line_says_when_the_formula_sections_c_is_outside_this_range():
    """Final reading 2026-12-07d ch08 #7: c 0.54 (0.52-0.62) earlier against 0.35 (0.33-0.36) here."""
    labels = {"draft_model": "蒸留", "draft_model_lm": "蒸留なし"}
    costs = {"draft_model": {"c": 0.35, "c_min": 0.33, "c_max": 0.36}, "draft_model_lm": {"c": 0.35, "c_min": 0.34, "c_max": 0.37}}
    far = be.cost_line(costs, labels, earlier={"c": 0.54, "c_min": 0.52, "c_max": 0.62})
    assert "幅の外です" in far and "0.54（0.52〜0.62）" in far
    assert "幅の外" not in be.cost_line(costs, labels, earlier={"c": 0.35, "c_min": 0.30, "c_max": 0.40})
