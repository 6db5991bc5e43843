"""Lab 1's sweep (course/labs/lab01_sweep.py): the prefill's steps, share and tok/s bound printed from the
runs; the predictions of 課題3 and 課題5 decided against the repeats' ranges (判定できません within the
noise), the last doubling's cause named from the run; saved verdicts that agree with the saved numbers."""
import json
import re
from pathlib import Path

from course.labkit import spread
from course.labs import lab01_sweep as sw

ROOT = Path(__file__).resolve().parents[2]


def row(c, ttft, tpot, tok_s, **ranges):
    return {"concurrency": c, "ttft_ms": ttft, "tpot_ms": tpot, "tok_s": tok_s, **ranges}


ROWS = [row(1, 17.3, 6.9, 136.6), row(2, 28.2, 7.0, 263.7), row(4, 57.6, 7.2, 460.6),
        row(8, 104.0, 8.7, 682.6), row(16, 229.5, 12.5, 828.5)]


def burst(n, first_ms, wall_ms, prefill_steps):
    """A run of n requests: first tokens up to first_ms, last token at wall_ms, the engine's steps."""
    reqs = [{"first_token_ms": first_ms * (i + 1) / n, "token_times_ms": [first_ms * (i + 1) / n, wall_ms],
             "late": False} for i in range(n)]
    steps = [{"first_tokens": 1} for _ in range(prefill_steps)] + [{"first_tokens": 0}] * 5
    return {"requests": reqs, "steps": steps}


def test_spread_order_and_undecided():
    a, b = {"x": 10.0, "x_min": 9.0, "x_max": 12.0}, {"x": 11.0, "x_min": 10.5, "x_max": 11.5}
    assert spread.order(a, b, "x") == 0 and spread.order(a, {"x": 13.0}, "x") == 1 and spread.order(a, {"x": 8.0}, "x") == -1
    assert spread.order({"x": 7.0}, {"x": 7.0}, "x") == -1              # equal points: not above
    assert spread.ratio_span(a, b, "x") == (10.5 / 12.0, 11.5 / 9.0)
    p = spread.decide(True, True, "A は伸びる", "A 10.0（9.0〜12.0）", "負荷", "測り直す")
    assert p.held is None and p.verdict().startswith(spread.UNDECIDED) and spread.NOISE in p.verdict()
    assert spread.verdict_state(p.verdict()) is None and spread.verdict_state("予想と違う：x") is False


def test_prefill_steps_count_the_decode_tokens_taken_first():
    assert sw.prefill_steps(8, 256, 2048) == (1, 0)
    # 16 x 256 = 2 x 2,048, but the 8 prefilled first take 8 then 15 decode tokens: a third step
    assert sw.prefill_steps(16, 256, 2048) == (3, 23)
    assert sw.prefill_steps(4, 64, 2048) == (1, 0)


def test_reading_prints_ranges_steps_share_and_the_upper_bound():
    sweep = {"rows": [row(8, 300, 8.0, 400, tok_s_min=380.0, tok_s_max=410.0), row(16, 500, 24.7, 395)],
             "runs": {8: [burst(8, 325, 695, 1)], 16: [burst(16, 660, 1297, 3)]}}
    lines = sw.sweep_reading(sweep, prompt_len=256, output_len=32, budget=2048).splitlines()
    assert "8.0 → 24.7 ms（3.09 倍）" in lines[0]
    assert lines[1] == "同時  8: TTFT 300.0 ms、TPOT 8.0 ms、tok/s（出力）400.0（380.0〜410.0）"
    assert "2,048 トークン" in lines[3] and "収まります" in lines[3] and "325 ms は所要時間 695 ms の 47%" in lines[3]
    sixteen = lines[4]
    assert "4,096 トークン" in sixteen and "3 ステップに分かれます" in sixteen and "23 トークン" in sixteen
    assert "660 ms は所要時間 1297 ms の 51%" in sixteen and "残り（Decode）637 ms" in sixteen
    assert "16 × 32 ÷ 1.297 s = 395" in sixteen and "上限は 16 × 32 ÷ 0.660 s = 776" in sixteen


def test_reading_counts_steps_without_them_for_a_server():
    run = burst(16, 660, 1297, 0)
    run["steps"] = []
    text = sw.sweep_reading({"rows": [row(16, 500, 24.7, 395)], "runs": {16: [run]}}, 256, 32, 2048)
    assert "3 ステップに分かれます" in text                     # from prefill_steps


def test_predictions_turn_with_a_planted_number():
    assert [p.held for p in sw.sweep_predictions(ROWS)] == [True, True, True, True]
    slow = ROWS[:-1] + [row(16, 229.5, 6.9 * 9, 828.5)]        # TPOT grows 9x for 16x requests
    assert sw.sweep_predictions(slow)[0].held is False
    five = ROWS[:-1] + [row(16, 229.5, 6.9 * 5, 828.5)]        # 5x: passed the old 16/2 bound, not 16/4
    assert sw.sweep_predictions(five)[0].held is False and "4 倍未満" in sw.sweep_predictions(five)[0].verdict()
    zigzag = ROWS[:2] + [row(4, 57.6, 5.9, 460.6)] + ROWS[3:]  # TPOT 7.0 -> 5.9 ms: falls by more than 10%
    assert [p.held for p in sw.sweep_predictions(zigzag)] == [True, False, True, True]
    assert "7.0 ms → 5.9 ms → 8.7 ms" in sw.sweep_predictions(zigzag)[1].verdict()
    noisy = ROWS[:1] + [row(2, 28.2, 7.0, 263.7, tpot_ms_min=5.0, tpot_ms_max=9.0)] + \
        [row(4, 57.6, 5.9, 460.6, tpot_ms_min=5.5, tpot_ms_max=8.0)] + ROWS[3:]   # the same fall, within the ranges
    assert sw.sweep_predictions(noisy)[1].held is None
    wobble = ROWS[:2] + [row(4, 57.6, 6.5, 460.6)] + ROWS[3:]  # 7.0 -> 6.5 ms: within the 10% noise
    assert sw.sweep_predictions(wobble)[1].held is True
    flat = ROWS[:-1] + [row(16, 30.0, 12.5, 828.5)]            # TTFT barely grows
    assert sw.sweep_predictions(flat)[2].held is False
    straight = [row(2 ** i, 10 * 2 ** i, 7, 100 * 2 ** i) for i in range(5)]  # tok/s doubles: no plateau
    assert sw.sweep_predictions(straight)[3].held is False
    assert "1,024 トークン" in sw.sweep_predictions(ROWS, prompt_len=64)[2].verdict()


def test_gain_verdict_within_noise_and_its_named_cause():
    # the saved loaded run's shape: 8 -> 16 flat because TPOT doubled, and the last point's tok/s range is wide
    loaded = ROWS[:3] + [row(8, 362.9, 32.3, 187.8, tok_s_min=183.2, tok_s_max=190.8),
                         row(16, 644.0, 68.0, 186.0, tok_s_min=159.0, tok_s_max=251.0)]
    ph = {8: {"prefill_ms": 363.0, "wall_ms": 1363.0}, 16: {"prefill_ms": 644.0, "wall_ms": 2753.0}}
    p = sw.sweep_predictions({"rows": loaded, "phases": ph})[3]
    assert p.held is True and "TPOT 32.3 → 68.0 ms（2.11 倍" in p.verdict() and "伸びを止めたのは TPOT" in p.verdict()
    assert "27% → 23%" in p.verdict()
    wide = loaded[:1] + [row(2, 28.2, 7.0, 263.7, tok_s_min=150.0, tok_s_max=270.0)] + loaded[2:]
    q = sw.sweep_predictions({"rows": wide, "phases": ph})[3]                   # first gain 1.10-1.98 vs 0.83-1.37
    assert q.held is None and "判定できません" in q.verdict() and "伸びを止めた" not in q.verdict()
    quiet = ROWS[:3] + [row(8, 300, 11.0, 700.0), row(16, 600, 14.5, 900.0)]
    text, why = sw.last_doubling(quiet, {8: {"prefill_ms": 300, "wall_ms": 700}, 16: {"prefill_ms": 600, "wall_ms": 1000}})
    assert "2 ÷ 1.32 = 1.52 倍" in text and "TPOT の伸びが人数の比を × 0.76" in why   # decode share 57% -> 40%
    assert "残りの × 0.85" in why and "測った伸び 1.29 倍 = 1.52 × 0.85" in why and "大きいのは TPOT の伸びのほう" in why
    # the saved lab run's last doubling (8 -> 16: TPOT 1.32x, prefill 27% -> 35%): TPOT removed more
    saved = ROWS[:3] + [row(8, 98.2, 8.4, 714.4), row(16, 188.4, 11.1, 960.7)]
    _, why = sw.last_doubling(saved, {8: {"prefill_ms": 98.0, "wall_ms": 358.0}, 16: {"prefill_ms": 188.0, "wall_ms": 533.0}})
    assert "× 0.76" in why and "× 0.89" in why and "大きいのは TPOT の伸びのほう" in why
    steep = quiet[:4] + [row(16, 600, 12.0, 800.0)]                              # TPOT 1.09x, gain 1.14x
    _, why = sw.last_doubling(steep, {8: {"prefill_ms": 300, "wall_ms": 700}, 16: {"prefill_ms": 600, "wall_ms": 1000}})
    assert "大きいのは Prefill の割合の増加のほう" in why


def longer_sweep(tok8, tok16, pre=(1434.0, 3012.0), wall=(2691.0, 5236.0)):
    return {"rows": [row(4, 700, 25.0, 86.0), row(8, 1400, 40.0, 95.1, **tok8), row(16, 3000, 80.0, 97.8, **tok16)],
            "phases": {8: {"prefill_ms": pre[0], "wall_ms": wall[0]}, 16: {"prefill_ms": pre[1], "wall_ms": wall[1]}}}


def test_plateau_predictions_decide_flatness_cause_and_comparison():
    tight = longer_sweep({"tok_s_min": 94.0, "tok_s_max": 96.0}, {"tok_s_min": 96.0, "tok_s_max": 99.0})
    shorter = {"rows": [row(8, 300, 11.0, 700.0, tok_s_min=690.0, tok_s_max=710.0),
                        row(16, 600, 14.5, 960.0, tok_s_min=940.0, tok_s_max=975.0)], "phases": {}}
    flat, cause, compare = sw.plateau_predictions(tight, 256, shorter=shorter, shorter_prompt=64)
    assert flat.held is True and "8 → 16" in flat.verdict() and "1.03 倍" in flat.verdict()
    assert cause.held is True and "上限 179 → 170（0.95 倍）" in cause.verdict() and "58%" in cause.verdict()
    assert compare.held is True and "プロンプト 64: 1.37 倍" in compare.verdict()
    noisy = longer_sweep({"tok_s_min": 83.0, "tok_s_max": 140.0}, {"tok_s_min": 82.0, "tok_s_max": 156.8})
    assert sw.plateau_predictions(noisy, 256)[0].held is None                # 0.59-1.89 spans 1.25
    growing = longer_sweep({}, {}, pre=(1434.0, 1600.0), wall=(2691.0, 3000.0))
    growing["rows"][-1] = row(16, 1600, 40.0, 170.0)
    flat, cause = sw.plateau_predictions(growing, 256)
    assert flat.held is False and cause.held is False                         # bound 1.79x: not the prefill
    decode_bound = longer_sweep({}, {}, pre=(1434.0, 2868.0), wall=(2691.0, 9000.0))
    assert sw.plateau_predictions(decode_bound, 256)[1].held is False         # prefill only 32% of the time


def saved_text(marker: str) -> str:
    nb = json.loads((ROOT / "labs/01_prefill_decode_lab.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


MS = r"([\d.]+) ms(?:（([\d.]+)〜([\d.]+)）)?"
NUM = r"([\d.]+)(?:（([\d.]+)〜([\d.]+)）)?"
RANGES = re.compile(rf"^同時 +(\d+): TTFT {MS}、TPOT {MS}、tok/s（出力）{NUM}$", re.M)
PHASE = re.compile(r"^同時 +(\d+): プロンプトは.*（Prefill）(\d+) ms は所要時間 (\d+) ms", re.M)


def saved_sweep(text: str) -> dict:
    rows = []
    for c, *v in RANGES.findall(text):
        r = {"concurrency": int(c)}
        for key, (med, lo, hi) in zip(("ttft_ms", "tpot_ms", "tok_s"), (v[0:3], v[3:6], v[6:9])):
            r[key] = float(med)
            if lo:
                r[f"{key}_min"], r[f"{key}_max"] = float(lo), float(hi)
        rows.append(r)
    ph = {int(c): {"prefill_ms": float(p), "wall_ms": float(w)} for c, p, w in PHASE.findall(text)}
    return {"rows": rows, "phases": ph}


def agree(text, derived):
    saved = [x for x in text.splitlines() if spread.verdict_state(x) != ""]
    assert len(saved) == len(derived), text
    for s, p in zip(saved, derived):
        assert spread.verdict_state(s) is p.held and p.text in s, (s, p)


def test_lab1_saved_sweep_verdicts_agree_with_the_saved_rows():
    sweep = saved_sweep(saved_text("sweep_predictions"))
    assert len(sweep["rows"]) >= 3 and set(sweep["phases"]) == {r["concurrency"] for r in sweep["rows"]}
    agree(saved_text("sweep_predictions"), sw.sweep_predictions(sweep, prompt_len=64))


def test_lab1_saved_plateau_verdicts_agree_with_the_saved_readings():
    shorter, longer = saved_sweep(saved_text("sweep_predictions")), saved_sweep(saved_text("plateau_predictions"))
    assert len(longer["rows"]) >= 2, saved_text("plateau_predictions")
    agree(saved_text("plateau_predictions"), sw.plateau_predictions(longer, 256, shorter=shorter, shorter_prompt=64))


DISTURBED = {"warning": "⚠ 計測のあいだ…", "disturbed": True}
QUIET = {"warning": None, "disturbed": False}


def test_a_disturbed_run_prints_every_verdict_of_the_sweep_as_undecided_with_its_numbers():
    """A planted load dict that says ``disturbed`` (course.labkit.load.LoadWatch) turns the lab's printed
    課題3/課題5 verdict lines into 判定できません, numbers kept; a quiet one leaves them as they were."""
    from course.labkit.predictions import verdicts
    shorter, longer = saved_sweep(saved_text("sweep_predictions")), saved_sweep(saved_text("plateau_predictions"))
    for preds, loads in [(sw.sweep_predictions(shorter, prompt_len=64), [shorter]),
                         (sw.plateau_predictions(longer, 256, shorter=shorter, shorter_prompt=64), [longer, shorter])]:
        quiet = verdicts(preds, *[QUIET for _ in loads]).splitlines()
        assert quiet == [p.verdict() for p in preds]
        crowded = verdicts(preds, QUIET, DISTURBED).splitlines()
        assert len(crowded) == len(preds) and all(spread.verdict_state(x) is None for x in crowded)
        for line, p in zip(crowded, preds):
            assert p.measured in line and p.text in line and "ほかのプログラム" in line


def lrow(c, tpot, tok, user, tpot_r=(), tok_r=(), user_r=()):
    r = row(c, 10.0 * c, tpot, tok)
    r["tok_s_per_user"] = user
    for key, rng in (("tpot_ms", tpot_r), ("tok_s", tok_r), ("tok_s_per_user", user_r)):
        if rng:
            r[f"{key}_min"], r[f"{key}_max"] = rng
    return r


def test_lesson_sweep_verdicts_say_when_the_run_contradicts_the_prose():
    """Blind reading 2026-12-07d ch01 #1: lesson 1's saved sweep fell from c=1 to c=2 while the prose said the
    points move up; the lesson now prints its prose as verdicts decided against the ranges."""
    good = [lrow(1, 7.0, 130.0, 140.0), lrow(2, 7.5, 250.0, 133.0), lrow(4, 9.0, 420.0, 111.0)]
    assert [p.held for p in sw.lesson_sweep_predictions(good)] == [True, True, True]
    saved = [lrow(1, 7.2, 133.5, 139.3, (6.9, 8.0), (123, 146), (125, 145)),      # the 62995ee save's first points
             lrow(2, 17.4, 112.9, 57.4, (5.0, 19.0), (79, 245), (52, 200)), lrow(4, 12.6, 272.3, 79.5, (11, 14), (236, 338), (71, 91))]
    tok, ends, tpot = sw.lesson_sweep_predictions(saved)
    assert tok.held is None and "134（123〜146） → 113（79〜245）" in tok.verdict()   # within the ranges
    assert ends.held is True and tpot.held is None
    fell = [lrow(1, 7.0, 130.0, 140.0, tok_r=(125, 135)), lrow(2, 4.0, 90.0, 250.0, (3.8, 4.2), (85, 95)),
            lrow(4, 9.0, 420.0, 111.0)]
    tok, _, tpot = sw.lesson_sweep_predictions(fell)
    assert tok.held is False and tpot.held is False and "行列積の速さが行数" in tok.verdict()
    nb = json.loads((ROOT / "lessons/01_inference_basics.ipynb").read_text(encoding="utf-8"))
    cell = next("".join(c["source"]) for c in nb["cells"] if "lesson_sweep_predictions" in "".join(c["source"]))
    assert "sweep_lab(" in cell and 'result["load"]' in cell   # warmed, interleaved repeats; the load reaches verdicts
