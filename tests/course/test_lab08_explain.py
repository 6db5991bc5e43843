"""Lab 8's readings (course/labs/lab08_explain.py): Leviathan's alpha solved from the mean accepted
length (not accepted / proposed), accepted drafts inside a repetition loop, and the concurrency
predictions decided by the run (planted contradicting numbers turn the verdicts; the saved verdicts
agree with the saved numbers)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course.labkit.predictions import DISTURBED, HELD, MISSED
from course.labkit.spread import UNDECIDED, verdict_state
from course.labs import lab08_explain as ex
from minimal_engine.calculators import spec_tokens_per_step

ROOT = Path(__file__).resolve().parents[2]


def test_alpha_is_solved_from_the_mean_length():
    for a in (0.0, 0.3, 0.8, 0.95):
        assert ex.alpha_from_length(spec_tokens_per_step(a, 4), 4) == pytest.approx(a, abs=1e-6)
    # the blind reading's numbers: mean length 3.94 at k = 4 is alpha 0.88, while accepted /
    # proposed    # is (3.94 - 1) / 4 = 0.735, and the formula at that share gives far less than 3.94
    assert ex.alpha_from_length(3.94, 4) == pytest.approx(0.881, abs=1e-3)
    share = (3.94 - 1) / 4
    assert spec_tokens_per_step(share, 4) < 3.0 < 3.94
    with pytest.raises(ValueError, match="mean_len"):
        ex.alpha_from_length(5.5, 4)


def test_acceptance_reading_prints_both_quantities():
    res = {"k": 4, "methods": {"draft_model": {
        "label": "ドラフトモデル（蒸留）", "accepted": 47, "proposed": 64, "acceptance_rate": 47 / 64,
        "mean_accepted_length": 1 + 47 / 16, "acceptance_by_position": [0.88, 0.75, 0.69, 0.62]}}}
    text = ex.acceptance_reading(res, "draft_model")
    assert "47 ÷ 64 = 0.734" in text and "1 + k × 提案の採用率 = 3.94" in text
    assert f"= {ex.alpha_from_length(1 + 47 / 16, 4):.3f}" in text and "入れると 2.96" in text


def _row(drafts, accepted, tokens):
    return {"drafts": drafts, "accepted": accepted, "tokens": tokens}


def test_loop_share_counts_accepted_drafts_inside_a_repeat():
    rows = [_row([], 0, ["a"]), _row(["b", "x"], 1, ["b", "c"]),          # a b c: no repeat yet
            _row(["d", "a"], 1, ["d", "a"]),                               # a b c d a
            _row(["b", "c", "d"], 3, ["b", "c", "d", "a"])]                # "a b c d" again: a loop
    s = ex.loop_share(rows, n=3)
    assert s["accepted"] == 5 and s["in_loop"] == 2                       # c and d of the last step
    assert (s["before_accepted"], s["before_proposed"]) == (2, 4)
    assert (s["before_steps"], s["before_first"]) == (2, 2)               # both steps kept their first draft
    assert s["output"] == "abcdabcda"
    assert "5 個のうち 2 個" in ex.loop_reading(rows, n=3)
    assert "2 回のうち、1つ目の下書きが受理されたのは 2 回（1.00）" in ex.loop_reading(rows, n=3)
    missed = [_row([], 0, ["a"]), _row(["x", "y"], 0, ["b"]), _row(["c", "z"], 1, ["c", "d"])]  # a b c d
    m = ex.loop_share(missed, n=3)                                        # one step lost its first draft
    assert (m["before_steps"], m["before_first"], m["before_accepted"], m["before_proposed"]) == (2, 1, 1, 4)



def rows_for(step_ms, speedups):
    return [{"concurrency": c, "base_tok_s": 1000 * c / t, "ngram_speedup": s}
            for c, t, s in zip((1, 4, 8), step_ms, speedups)]


def test_concurrency_verdicts_follow_the_numbers():
    good = ex.concurrency_predictions(rows_for((2.58, 3.86, 5.15), (3.02, 1.62, 1.40)), k=4)
    assert [p.held for p in good] == [True, True]
    fit = ex.step_fit(rows_for((2.58, 3.86, 5.15), (3, 2, 1)))
    # by hand: mean batch 13/3, Sxx 24.667, Sxy 8.997 -> 0.3647 ms per token,
    # fixed 3.8633 - 4.333 x 0.3647
    assert fit["per_token_ms"] == pytest.approx(0.3647, abs=1e-3)
    assert fit["fixed_ms"] == pytest.approx(2.283, abs=1e-3)
    # planted: the step time grows in proportion to the batch (no fixed time): the CPU reading fails
    assert ex.concurrency_predictions(rows_for((1.0, 4.0, 8.0), (3, 2, 1)), k=4)[0].held is False
    # planted: the speedup rises with the batch
    rising = rows_for((2.58, 3.86, 5.15), (1.2, 1.6, 2.0))
    assert ex.concurrency_predictions(rising, k=4)[1].held is False


def saved_stream(marker: str) -> str:
    """The printed output of lab 8's code cell whose source contains ``marker``."""
    nb = json.loads((ROOT / "labs/08_speculative_decoding_lab.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


STEPS = re.compile(r"(\d+) → ([\d.]+) ms")
SPEED = re.compile(r"速度比 ([\d.]+) → ([\d.]+)")


def test_lab8_saved_verdicts_agree_with_its_saved_numbers():
    text = saved_stream("concurrency_predictions")
    if DISTURBED in text:                       # a crowded run: every verdict 判定できません (LoadWatch)
        assert all(x.startswith(UNDECIDED) for x in text.splitlines() if DISTURBED in x)
        return
    saved = [line for line in text.splitlines() if line.startswith((HELD, MISSED))]
    assert len(saved) == 3, text                # the fit, the speedup, the weight pass
    steps = [(int(c), float(t)) for c, t in STEPS.findall(saved[0].split("。固定")[0])]
    first, last = map(float, SPEED.search(saved[1]).groups())
    speed = [first] + [first] * (len(steps) - 2) + [last]
    rows = [{"concurrency": c, "base_tok_s": 1000 * c / t, "ngram_speedup": s}
            for (c, t), s in zip(steps, speed)]
    for line, p in zip(saved, ex.concurrency_predictions(rows, k=4)):
        assert line.startswith(HELD if p.held else MISSED), (line, p)
    linear = {int(b): float(t) for b, t in LINEAR.findall(saved[2])}
    step = float(re.search(r"1ステップ ([\d.]+) ms のうち", saved[2]).group(1))
    p = ex.weight_pass_prediction(linear, step)
    assert saved[2].startswith(HELD if p.held else MISSED), saved[2]


LINEAR = re.compile(r"(\d+) 行 ([\d.]+) ms")


def test_weight_pass_verdict_follows_the_numbers():
    # the blind reading's numbers (engine CpuLinear, 1 thread): 2.60 / 2.62 / 3.51 ms, step 5.67 ms
    good = ex.weight_pass_prediction({1: 2.60, 4: 2.62, 8: 3.51}, 5.67)
    assert good.held and "1 行 2.60 ms" in good.verdict() and "46%" in good.verdict()
    # planted: the rows are not hidden (4 rows cost 4x one row): compute-bound matmuls
    assert not ex.weight_pass_prediction({1: 1.0, 4: 4.0, 8: 8.0}, 5.67).held
    # planted: the weight pass is a small part of the step (the fixed time is mostly Python)
    assert not ex.weight_pass_prediction({1: 0.5, 4: 0.52, 8: 0.6}, 5.67).held


def test_k_gain_verdict_follows_the_numbers():
    assert ex.k_gain_prediction({2: 2.48, 4: 3.56, 8: 4.05}).held       # the saved sweep
    assert not ex.k_gain_prediction({2: 2.0, 4: 2.2, 8: 3.5}).held       # planted: the gain grows
    assert not ex.k_gain_prediction({2: 2.0, 4: 2.5}).held               # two k: nothing to judge


def test_loop_period_and_its_reading_against_k():
    loop = ["涯", "を", "、", "自分", "の生", "涯", "に", "、", "自分", "の生"] * 3
    assert ex.loop_period(loop) == 5                       # one token alternates: still period 5
    assert ex.loop_period(list("abcdefghij")) is None
    rows = [_row([], 0, ["x"])] + [_row(loop[i:i + 4], 4, loop[i:i + 5]) for i in range(0, 30, 5)]
    assert "周期の倍数なので" in ex.loop_reading(rows, k=4)
    assert "周期の倍数ではない" in ex.loop_reading(rows, k=2)
    assert "周期より長い" in ex.loop_reading(rows, k=8)
    assert "周期" not in ex.loop_reading(rows)             # no k: no claim about it


KGAIN = re.compile(r"k=(\d+) ([\d.]+)")


def test_a_speedup_above_the_mean_length_is_flagged():
    """Blind reading ch08 #9: n-gram, repetitive, k = 4 saved a speedup of 5.07 at a mean length of 4.50.
    The baseline's accepted length is NaN as run_spec_lab stores it (final reading reviews9 ch08 #1: it was flagged)."""
    res = {"k": 4, "methods": {"ngram": {"label": "n-gram", "speedup": 5.07, "mean_accepted_length": 4.50},
                               "none": {"label": "投機なし", "speedup": 1.0, "mean_accepted_length": float("nan")}}}
    (line,) = ex.over_length(res)
    assert "速度比 5.07 が平均受理長 4.50 を超えて" in line
    assert "検証" in line and "投機なしの計測" in line and "分けられない" in line   # both candidates, no blame
    assert "負荷" not in line
    res["concurrency"] = 1
    (kern,) = ex.over_length(res, linear_ms={1: 3.79, 5: 3.45})          # the Linear pass printed beside it
    assert "1 行 3.79 ms、5 行 3.45 ms" in kern
    res["methods"]["ngram"]["speedup"] = 4.20                             # below the length: nothing to say
    assert ex.over_length(res) == []
    # blind reading 2026-12-07 (reviews10) ch08 #3: one repeat's ratio 5.58 (median 3.85, length 4.50) is flagged
    res["methods"]["ngram"].update(speedup=3.85, speedup_min=3.62, speedup_max=5.58)
    res["methods"]["none"].update(tok_s=137.8, tok_s_min=121.4, tok_s_max=147.0)
    (one,) = ex.over_length(res)
    assert "繰り返しの1回の比 5.58" in one and "k+1 = 5" in one and "最小 121.4" in one
    p = ex.k_gain_prediction({2: 2.66, 4: 5.07, 8: 4.58}, {2: 2.62, 4: 4.50, 8: 6.30})
    assert "k 4 で 5.07 > 4.50" in p.measured and "k 8 で" not in p.measured and "k 2 で" not in p.measured
    assert "超えた" not in ex.k_gain_prediction({2: 2.5, 4: 4.0, 8: 4.5}, {2: 2.62, 4: 4.50, 8: 6.30}).measured


def test_lab8_saved_k_gain_verdict_agrees_with_its_saved_numbers():
    text = saved_stream("k_gain_prediction")
    line = next(x for x in text.splitlines() if x.startswith((HELD, MISSED, UNDECIDED)))
    speedups = {int(k): float(v) for k, v in KGAIN.findall(line.split("測定：")[1])}
    assert len(speedups) == 3, line
    if not line.startswith(UNDECIDED):        # a decided line agrees with its medians (ranges: 判定できません allowed)
        assert line.startswith(HELD if ex.k_gain_prediction(speedups).held else MISSED), line


def test_the_figure_plots_alpha_not_the_share():
    from course.labs.lab08_plots import plot_run
    res = {"k": 4, "text": "repetitive", "prompt_len": 64, "output_len": 64, "concurrency": 1, "methods": {
        "none": {"tok_s": 100.0},
        "ngram": {"tok_s": 300.0, "mean_accepted_length": 4.5, "acceptance_rate": 0.875, "alpha": 0.947}}}
    fig = plot_run(res)
    right = fig.axes[2]                                                   # the alpha axis carries the legend
    heights = [round(b.get_height(), 3) for ax in fig.axes[1:] for b in ax.patches]
    assert 0.947 in heights and 0.875 not in heights and 4.5 in heights
    assert fig.axes[2].get_ylim()[1] < 1.5 and "0〜1" in fig.axes[2].get_ylabel()   # alpha on its own 0-1 axis
    assert all("受理率 α" not in t.get_text() or "解いた" in t.get_text()
               for t in right.get_legend().get_texts())


def test_formula_verdict_follows_the_numbers():
    # the blind reading's predictions at alpha solved from the mean length, against the measured
    # speedups
    pairs = [(1.14, 0.99), (1.11, 1.03), (0.70, 0.67), (1.39, 1.21), (1.67, 1.49), (1.06, 1.02)]
    assert ex.formula_prediction(pairs).held
    planted = pairs[:-1] + [(0.43, 1.02)]          # accepted / proposed used as alpha at k = 8
    assert not ex.formula_prediction(planted).held
    assert "0.43 / 1.02" in ex.formula_prediction(planted).verdict()
    # final blind reading ch08 #3: a median 0.08 above the prediction, inside the repeats' spread, decides nothing
    noisy = [(1.17, 1.13), (1.16, 1.24)]
    ranges = [((1.12, 1.21), (1.03, 1.21)), ((1.11, 1.20), (1.14, 1.32))]
    p = ex.formula_prediction(noisy, ranges=ranges)
    assert p.held is None and p.verdict().startswith(UNDECIDED) and "実測 1.14〜1.32" in p.verdict()
    assert ex.formula_prediction(noisy).held is False                       # medians alone: missed
    clear = [((1.12, 1.21), (1.03, 1.21)), ((1.11, 1.20), (1.30, 1.40))]    # even the highest prediction is below
    assert ex.formula_prediction(noisy, ranges=clear).held is False
    assert "候補は3つ" in ex.formula_prediction(noisy).verdict().split("考えられる理由")[1][:30]
    # blind reading 2026-12-07 (reviews10) ch08 #2: three medians 0.03-0.05 above their predictions were
    # read as 予想どおり under a 0.05 tolerance; any median above its prediction now breaks "every row"
    saved = [(1.20, 1.20), (1.20, 1.24), (0.78, 0.74), (1.47, 1.50), (1.80, 1.85), (1.17, 1.13)]
    spans = [((1.20, 1.24), (1.14, 1.34)), ((1.20, 1.27), (0.93, 1.29)), ((0.78, 0.84), (0.71, 0.75)),
             ((1.47, 1.52), (1.28, 1.75)), ((1.80, 1.90), (1.78, 1.95)), ((1.17, 1.25), (0.71, 1.18))]
    p = ex.formula_prediction(saved, ranges=spans)
    assert p.held is None and "上回った行: 3 行" in p.verdict() and "負荷" not in p.verdict().split("範囲内です")[1]


PAIR = re.compile(r"([\d.]+) / ([\d.]+)")


def test_lab8_saved_formula_verdict_agrees_with_its_saved_numbers():
    text = saved_stream("formula_prediction")
    line = next(x for x in text.splitlines() if x.startswith((HELD, MISSED, UNDECIDED)))
    if DISTURBED in line:                       # a crowded run decides nothing (LoadWatch)
        return
    measured = line.split("測定：")[1]
    pairs = [(float(p), float(m)) for p, m in PAIR.findall(measured)]
    spans = [((float(a), float(b)), (float(c), float(d))) for a, b, c, d in
             re.findall(r"予測 ([\d.]+)〜([\d.]+)、実測 ([\d.]+)〜([\d.]+)", measured)]
    assert pairs, line
    p = ex.formula_prediction(pairs, ranges=spans if len(spans) == len(pairs) else None)
    assert verdict_state(line) == p.held, line


def test_a_disturbed_run_prints_every_lab8_verdict_as_undecided_with_its_numbers():
    """A load dict saying ``disturbed`` (LoadWatch) turns each printed lab-8 verdict into 判定できません, the
    measured numbers still shown; without it the verdicts are unchanged."""
    from course.labkit.predictions import UNDECIDED as DISTURBED_HEAD, verdicts
    from course.labs import lab08_breakeven as be
    rows = [{"concurrency": 1, "base_tok_s": 130.0, "ngram_speedup": 3.5},
            {"concurrency": 4, "base_tok_s": 380.0, "ngram_speedup": 2.6},
            {"concurrency": 8, "base_tok_s": 560.0, "ngram_speedup": 2.0}]
    info = {"alpha": 0.88, "k": 4, "c": 0.3, "c_min": 0.28, "c_max": 0.32, "be": 0.6, "be_lo": 0.58,
            "be_hi": 0.62, "pred": 1.7, "pred_lo": 1.6, "pred_hi": 1.8, "sp": 1.5, "sp_lo": 1.4, "sp_hi": 1.6}
    preds = (ex.concurrency_predictions(rows, k=4) + [ex.weight_pass_prediction({1: 3.0, 4: 3.3}, 6.0)]
             + [ex.k_gain_prediction({2: 2.48, 4: 3.56, 8: 4.05}), be.prediction("蒸留", info, True),
                ex.formula_prediction([(1.7, 1.5)])])
    quiet = verdicts(preds, {"disturbed": False}, None)
    assert quiet == "\n".join(p.verdict() for p in preds) and DISTURBED_HEAD not in quiet
    crowded = verdicts(preds, {"disturbed": False}, {"disturbed": True}).splitlines()
    assert len(crowded) == len(preds) and all(x.startswith(DISTURBED_HEAD) for x in crowded)
    for line, p in zip(crowded, preds):
        assert p.measured in line and "ほかのプログラム" in line


def test_k_gain_is_undecided_when_the_paired_ranges_or_a_slowed_baseline_leave_it_open():
    """Final reading 2026-12-07d ch08 #3: the gains are decided only beyond the paired speedups' ranges, and a
    speedup above its mean accepted length (a slowed baseline) decides nothing; the lengths' gains are printed."""
    sp = {2: 2.12, 4: 3.63, 8: 7.10}
    lengths = {2: 2.86, 4: 4.50, 8: 6.30}
    p = ex.k_gain_prediction(sp, lengths)
    assert p.held is None and "k 8 で 7.10 > 6.30" in p.measured and "平均受理長の k 1 あたりの伸び" in p.measured
    wide = {2: (1.6, 2.6), 4: (2.9, 4.2), 8: (3.5, 4.6)}
    assert ex.k_gain_prediction({2: 2.12, 4: 3.63, 8: 4.05}, spans=wide).held is None
    tight = {2: (2.1, 2.15), 4: (3.6, 3.66), 8: (4.0, 4.1)}
    assert ex.k_gain_prediction({2: 2.12, 4: 3.63, 8: 4.05}, spans=tight).held is True
    grows = {2: (1.95, 2.05), 4: (2.15, 2.25), 8: (3.45, 3.55)}
    assert ex.k_gain_prediction({2: 2.0, 4: 2.2, 8: 3.5}, spans=grows).held is False


def test_speedups_are_paired_per_repeat():
    """Final reading 2026-12-07d ch08 #4: speedup_span reads the paired ratios when the run has them."""
    res = {"methods": {"none": {"tok_s": 100.0, "tok_s_min": 60.0, "tok_s_max": 140.0},
                       "ngram": {"tok_s": 300.0, "tok_s_min": 200.0, "tok_s_max": 400.0, "speedup": 3.0,
                                 "speedup_min": 2.9, "speedup_max": 3.1}}}
    assert ex.speedup_span(res, "ngram") == (2.9, 3.1)
    del res["methods"]["ngram"]["speedup_min"]                      # an old result: the cross ratios
    assert ex.speedup_span(res, "ngram") == pytest.approx((200 / 140, 400 / 60))


def test_reviews11_ch08_readings():
    """reviews11 ch08: #2 the k-gain line compares the speedup's falloff with a constant alpha's (the saved sweep:
    0.775 -> 0.163 against 0.844 -> 0.730, so most of it is not alpha^i); #3 a median TPOT ratio above the mean
    length (three pairs) names the shorter verify step, not a slowed baseline; #1 the formula's candidates name
    c's denominator, timed apart from the run, and no fixed direction for c."""
    p = ex.k_gain_prediction({2: 2.67, 4: 4.22, 8: 4.87}, {2: 2.86, 4: 4.50, 8: 6.30},
                             {2: (2.50, 3.04), 4: (4.11, 4.26), 8: (4.78, 5.48)})
    assert "k 2 → 4: +0.844" in p.measured and "k 4 → 8: +0.730" in p.measured
    assert "大部分は α^i 以外" in p.measured and "分けられません" in p.measured
    near = ex.k_gain_prediction({2: 2.0, 4: 3.6, 8: 6.4}, {2: 2.86, 4: 4.50, 8: 6.30})   # gains 0.8 -> 0.7
    assert "α^i の逓減で説明できる" in near.measured
    res = {"k": 4, "concurrency": 1, "repeats": 3,
           "methods": {"ngram": {"label": "n-gram", "speedup": 4.08, "speedup_min": 3.9, "speedup_max": 5.16,
                                 "mean_accepted_length": 4.50, "tpot_ratio": 1 / 4.63},
                       "none": {"label": "投機なし", "speedup": 1.0, "mean_accepted_length": float("nan")}}}
    (line,) = ex.over_length(res)
    assert "TPOT の比の中央値 4.63" in line and "検証のステップが Decode のステップより短かった" in line
    assert "分けられない" not in line
    res["methods"]["ngram"]["tpot_ratio"] = 1 / 4.2                      # the TPOT median below: both candidates
    assert "分けられない" in ex.over_length(res)[0]
    why = ex.formula_prediction([(0.77, 0.82)], ranges=[((0.72, 0.78), (0.81, 0.86))]).verdict()
    assert "c の分母" in why and "小さめ" not in why
