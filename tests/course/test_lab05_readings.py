"""Chapter 5's readings (course/labs/lab05_explain.py): each sentence follows the numbers it is given, and the
saved lab and lesson print readings that their own saved numbers re-derive (blind readings ch05 #1-#7)."""
import json
import random
import re
from pathlib import Path

from course.labkit.predictions import HELD, MISSED, UNDECIDED
from course.labkit.spread import verdict_state
from course.labs.lab05_explain import (idle_share, run_reading, step_counts, sweep_predictions, sweep_table,
                                      task2_predictions)

ROOT = Path(__file__).resolve().parents[2]
LENS = [40, 64, 42, 18, 32, 48, 20, 60]          # two groups of 4
_RNG = random.Random(0)
STREAM = [_RNG.randint(16, 64) for _ in range(16)]       # the lab's default stream (Random(0), o = 64)


def _pol(tok, lo, hi, tpot=5.0, dur=1.0):
    return {"tok_s": tok, "tok_s_min": lo, "tok_s_max": hi, "tpot_ms": tpot, "duration_s": dur}


def _run(c=4, cont=(110, 108, 112), stat=(100, 98, 102), hf=(120, 118, 122), tpot=5.0, lens=LENS):
    return {"output_lens": lens, "concurrency": c, "repeats": 3,
            "policies": {"continuous": _pol(*cont, tpot=tpot), "static": _pol(*stat, tpot=tpot, dur=2.0),
                         "hf_static": _pol(*hf)}}


def test_step_counts_include_continuous_drain():
    assert step_counts([3, 12, 4, 6, 10, 2, 5, 3], 4) == (22, 13)        # the lesson's cell 3 figure
    static, cont = step_counts(LENS, 4)
    assert (static, cont) == (64 + 60, 110) and static / cont < 1 / (1 - idle_share(LENS, 4))


def test_run_reading_follows_the_numbers_in_either_direction():
    static, cont = step_counts(LENS, 4)
    text = run_reading(_run(cont=(110, 109.5, 110.5), stat=(100, 99.5, 100.5)))   # span 1.09 .. 1.11 < 1.13
    assert "1.10 倍（繰り返しの幅は重ならない）" in text and f"{static / cont:.2f} 倍が上限です" in text
    assert "1トークンあたりの計算と Prefill" in text and "静的のほうが多く払います" in text
    # blind reading 11 ch05 #2: continuous-only step cost is the second cause, pointed at the TPOT line
    assert "候補は2つ" in text and "連続だけが払うステップの重さ" in text and "TPOT の行" in text
    # blind reading 11 ch05 #1: a span reaching the step ratio names no mechanism for the shortfall
    near = run_reading(_run())                                         # 108/102 .. 112/98 = 1.06 .. 1.14 > 1.13
    assert "1.06〜1.14 倍を取りうるので、ステップ数の比との差はばらつきの中です" in near
    assert "薄める" not in near and "連続だけが払う" not in near
    assert "同じだけある Prefill とステップごとの固定" not in text                    # ch05 second reading #1
    assert "transformers のほうが速い" in text and "0.83 倍" in text
    assert "連続で約 1.00、静的で約 0.50 件/s" in text                              # 1 / each policy's duration
    overlap = run_reading(_run(cont=(101, 97, 104)))
    assert "繰り返しの幅が重なる" in overlap and "大きいとは言えません" in overlap
    engine_wins = run_reading(_run(hf=(80, 79, 81)))
    assert "エンジンの静的バッチングのほうが速い" in engine_wins and "モデルの外の処理" in engine_wins
    assert "その分が不利" not in engine_wins                                         # ch05 second reading #3
    assert "終わった行も組の最も長い出力まで計算する分が重なっていて" in engine_wins     # one of three (2026-12-07c #2)
    static_wins = run_reading(_run(cont=(90, 89, 91)))
    assert "静的のほうが速く、幅も重なりません" in static_wins
    assert "ブロック表" in run_reading(_run(c=8))                      # transformers faster at any batch size
    over = run_reading(_run(cont=(130, 128, 132)))                     # above the step ratio, below 1/(1-idle)
    assert static / cont < 1.3 < 1 / (1 - idle_share(LENS, 4)) and "下の端もステップ数の比を超えて" in over
    assert "候補は2つ" in over and "計測のばらつきです" not in over      # final reading 2026-12-07d #4: both named
    within = run_reading(_run(cont=(118, 104, 125)))                   # apart, yet 104/102 .. 125/98 holds the step ratio
    assert "1.02〜1.28 倍を取りうるので、ステップ数の比はばらつきの中です" in within


def test_run_reading_says_whether_the_tpot_slo_bound():
    res = dict(_run(), tpot_slo_ms=200)
    for k in ("continuous", "static"):
        res["policies"][k]["tpot_ms_list"] = [5.0, 9.0]
    assert "グッドプットの差は TTFT の SLO だけで決まっています" in run_reading(res)
    res["policies"]["static"]["tpot_ms_list"] = [5.0, 250.0]
    assert "TPOT の SLO（200 ms）を破ったリクエストがあります" in run_reading(res)


def _sweep(ratios=(1.0, 1.1, 1.12, 1.1), tpots=(4.8, 5.2, 5.6, 6.4)):
    return {c: _run(c=c, cont=(100 * r, 100 * r - 1, 100 * r + 1), stat=(100, 99.5, 100.5), tpot=t, lens=STREAM)
            for c, r, t in zip((1, 2, 4, 8), ratios, tpots)}


def test_sweep_predictions_turn_on_a_planted_number():
    good = sweep_predictions(_sweep())
    assert [p.held for p in good] == [True, True] and good[0].verdict().startswith(HELD)
    # blind reading 11 ch05 #5: a median below the step ratio whose span reaches it is not 'below' (undecided)
    wide = _sweep()
    wide[4]["policies"]["continuous"] = _pol(112, 111, 125)            # 111/100.5 .. 125/99.5 = 1.10 .. 1.26 > 1.22
    assert sweep_predictions(wide)[0].held is None
    no_gap = sweep_predictions(_sweep(ratios=(1.0, 1.1, 0.99, 1.1)))              # 0.99: ranges overlap, noise
    assert [p.held for p in no_gap] == [None, True] and no_gap[0].verdict().startswith(UNDECIDED)
    below = sweep_predictions(_sweep(ratios=(1.0, 1.1, 0.9, 1.1)))                # 0.9 beyond the ranges
    assert [p.held for p in below] == [False, True] and below[0].verdict().startswith(MISSED)
    steep = sweep_predictions(_sweep(tpots=(4.8, 9.0, 18.0, 36.0)))
    assert [p.held for p in steep] == [True, False] and "7.50 倍" in steep[1].verdict()
    # ch05 third reading #3: growth under k/2 is not enough; the fitted fixed share must stay >= 50 %
    n8 = sum(STREAM) / step_counts(STREAM, 8)[0]
    loose = sweep_predictions(_sweep(tpots=(4.8, 5.4, 6.5, 9.0)))                  # 1.9x < 4x, yet mostly per-request
    fixed = 4.8 - (9.0 - 4.8) / (n8 - 1)
    assert fixed / 9.0 < 0.5 and not loose[1].held and f"固定の割合 {100 * fixed / 9.0:.0f} %" in loose[1].verdict()
    fell = sweep_predictions(_sweep(tpots=(9.4, 6.6, 5.9, 7.2)))           # ch05 second reading #4
    assert not fell[1].held and "カーネルが行数によって速さを変える" in fell[1].verdict()   # no kernel times: both
    # final reading 2026-12-07c ch05 #1: a falling step time is read against the kernels timed in the same runs
    bent = _sweep(tpots=(9.4, 6.6, 5.9, 7.2))
    bent[8]["linear_ms"] = {1: {"min": 3.47, "median": 3.83}, 2: {"min": 3.68, "median": 4.03},
                            4: {"min": 2.95, "median": 3.25}, 8: {"min": 3.83, "median": 4.09}}
    why = sweep_predictions(bent)[1].verdict()
    assert "カーネル自体が、行の多いほうで速く" in why and "4 行が 2 行より速い" in why and "混み具合に左右" not in why
    bent[8]["linear_ms"] = {r: {"min": r, "median": r + 0.5} for r in (1, 2, 4, 8)}
    why = sweep_predictions(bent)[1].verdict()
    assert "速くなってはいません" in why and "混み具合に左右されています" in why
    assert "速いのは transformers" in sweep_table(_sweep())
    # reviews6 ch05 #1: concurrency 1 vs >= 2 through the repeats' ranges (course.labkit.hf_gap), no Python-loop claim
    assert "同時リクエスト数 1 では、transformers が幅の外で速く" in sweep_table(_sweep())
    assert "ステップごとの処理の重さの差です" not in sweep_table(_sweep())
    slow_hf = _sweep()
    for r in slow_hf.values():
        r["policies"]["hf_static"] = _pol(80, 79, 81)
    assert "速いのはエンジン" in sweep_table(slow_hf) and "速いのは エンジン" not in sweep_table(slow_hf)  # #10


def test_tpot_sentence_names_the_mixed_steps_and_follows_the_ranges():
    """ch05 third reading #1: static's shorter TPOT is put on continuous's prefill-carrying decode steps, and
    the sentence follows the repeats' TPOT ranges (none, overlapping, or the opposite direction)."""
    def res(c_tpot, s_tpot):
        r = _run()
        for k, (lo, mid, hi), share in (("continuous", c_tpot, 0.07), ("static", s_tpot, 0.0)):
            r["policies"][k].update(tpot_ms=mid, tpot_ms_min=lo, tpot_ms_max=hi, prefill_step_share=share)
        return run_reading(r)
    static_short = res((8.5, 8.7, 9.0), (7.3, 7.5, 7.8))
    assert "連続 8.7・静的 7.5 ms（繰り返しの幅は重ならない）" in static_short and "7 % に新しいリクエストの Prefill" in static_short
    assert "候補は4つ" in static_short and "計測の偏り" in static_short and "主に" not in static_short        # final reading 2026-12-07d #8
    overlap = res((8.5, 8.9, 9.6), (8.7, 9.3, 9.8))
    assert "繰り返しの幅が重なる" in overlap and "ばらつきより大きいとは言えません" in overlap
    assert "逆向き" in res((8.0, 8.1, 8.2), (9.0, 9.3, 9.6))


def _task2_res(cont_ttft, stat_ttft):
    pol = lambda t, d: {"ttft_ms_list": t, "tpot_ms_list": [5.0] * len(t), "duration_s": d}  # noqa: E731
    return {"ttft_slo_ms": 1000, "tpot_slo_ms": 200,
            "policies": {"continuous": pol(cont_ttft, 2.0), "static": pol(stat_ttft, 2.5)}}


def test_task2_prediction_turns_on_a_planted_number():
    ok = task2_predictions(_task2_res([50, 60, 250, 400, 900], [50, 60, 700, 800, 1200]))
    assert ok[0].held and "連続 2.50 → 1.50" in ok[0].verdict() and "静的 1.60 → 0.80" in ok[0].verdict()
    assert "割合で大きく下がったのは静的" in ok[0].verdict()                      # printed, not predicted
    bad = task2_predictions(_task2_res([350, 360, 400, 400, 900], [50, 60, 700, 800, 1200]))
    assert not bad[0].held and bad[0].verdict().startswith(MISSED)


def _outputs(path, marker):
    cells = json.loads((ROOT / path).read_text("utf-8"))["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell["outputs"] if o.get("output_type") == "stream")


def test_saved_sweep_verdicts_agree_with_the_saved_table():
    text = _outputs("labs/05_batching_lab.ipynb", "sweep_predictions")
    rows = re.findall(r"同時リクエスト数\s*(\d+): 連続 ÷ 静的 ([\d.]+) 倍（(繰り返しの幅[^、]*|繰り返し1回)、ステップ数の比 "
                      r"([\d.]+) 倍、空き枠 \d+ % からの [\d.]+ 倍）、静的 ÷ transformers ([\d.]+) 倍（(?:速いのは ?(\S+)|繰り返しの幅が"
                      r"重なり[^）]*)）、静的の TPOT 中央値 ([\d.]+) ms", text)
    assert len(rows) >= 2, text
    for r in rows:
        assert not r[5] or (r[5] == "エンジン") == (float(r[4]) > 1), r
    states = [verdict_state(line) for line in text.splitlines() if verdict_state(line) != ""]
    assert "繰り返しの組み合わせで" in text, "the floor line of concurrency 1's ratio range is missing: " + text
    multi = [r for r in rows if int(r[0]) >= 2]
    spans = {int(c): (float(a), float(b)) for c, a, b in re.findall(r"(\d+): [\d.]+（繰り返しの組み合わせで ([\d.]+)〜([\d.]+)、", text)}
    one = re.search(r"繰り返しの組み合わせで ([\d.]+)〜([\d.]+) 倍の幅", text)
    d1 = ([max(abs(float(x) - 1) for x in one.groups())] if one else
          [abs(float(r[1]) - 1) for r in rows if int(r[0]) == 1])
    def state(r):                                          # lab05_explain._gap_state on the printed (rounded) numbers
        ratio, step, (lo, hi) = float(r[1]), float(r[3]), spans[int(r[0])]
        if (ratio <= 1 and "重なる" not in r[2]) or (ratio >= step and lo >= step):
            return False
        near = lo - 1 if ratio >= 1 else 1 - hi               # blind reading 10 ch05 #5: the range's end nearest 1
        return None if "重なる" in r[2] or (d1 and near <= d1[0]) or ratio >= step or hi >= step else True
    got = [state(r) for r in multi]
    assert states[0] == (False if False in got else None if None in got else True), text
    tp = [float(r[6]) for r in rows]
    n = [sum(STREAM) / step_counts(STREAM, int(r[0]))[0] for r in (rows[0], rows[-1])]   # static's mean batch
    fixed = tp[0] - (tp[-1] - tp[0]) / (n[1] - n[0]) * n[0]
    share = re.search(r"固定の割合 (\d+) %", text)          # computed from unrounded TPOTs: allow the 0.1 ms rounding
    assert share and abs(int(share.group(1)) - 100 * fixed / tp[-1]) <= 2, text
    fell = {any(b + e < 0.95 * (a - e) for a, b in zip(tp, tp[1:])) for e in (0.05, -0.05)}   # TPOTs printed to 0.1 ms
    if fell == {True, False}:
        assert states[1] is not True or fixed / tp[-1] >= 0.5, text
    elif fell == {False}:
        assert states[1] == (tp[-1] / tp[0] >= 0.95 and fixed / tp[-1] >= 0.5), text
    else:                                                  # a fall: missed, or undecided when within the TPOT ranges
        assert states[1] in (False, None), text


def test_saved_task2_verdict_agrees_with_its_numbers():
    text = _outputs("labs/05_batching_lab.ipynb", "task2_predictions")
    m = re.search(r"連続 ([\d.]+) → ([\d.]+)（\d+ % 減.*?静的 ([\d.]+) → ([\d.]+) 件/s", text)
    assert m, text
    c0, c1, s0, s1 = map(float, m.groups())
    assert text.startswith(HELD) == (c1 <= c0 and s1 <= s0 and c1 >= s1), text


def test_saved_lesson_reading_agrees_with_its_printed_ranges():
    text = _outputs("lessons/05_batching.ipynb", "run_reading")
    m = re.search(r"連続 ÷ 静的の出力 tok/s: ([\d.]+) 倍（連続 (\d+)〜(\d+)、静的 (\d+)〜(\d+) tok/s）", text)
    assert m, text
    c_lo, c_hi, s_lo, s_hi = map(int, m.groups()[1:])
    apart = c_hi < s_lo or s_hi < c_lo
    tok_s_part = text.split("TPOT の中央値は")[0]          # the TPOT sentence has its own 'ranges apart' words
    assert ("繰り返しの幅は重ならない" in tok_s_part) == apart, text
    q = re.search(r"静的（エンジン）÷ transformers の出力 tok/s: ([\d.]+) 倍", text)
    assert "どちらが速いとは言えません" in text or ("エンジンの静的バッチングのほうが速い" in text) == (float(q.group(1)) > 1), text
    step = re.search(r"([\d.]+) 倍が上限です", text)
    assert step, text
    if "ステップ数の比以上" in text:
        assert float(m.group(1)) >= float(step.group(1)), text
    span = re.search(r"比は ([\d.]+)〜([\d.]+) 倍を取りうるので、ステップ数の比との差はばらつきの中", text)
    if "測定はステップ数の比より小さいですが" in text:        # blind reading 11 ch05 #1: the mechanism only below the span
        assert span and float(span.group(2)) >= float(step.group(1)), text
    if "上の端もステップ数の比より小さい" in text:
        hi = re.search(r"比は [\d.]+〜([\d.]+) 倍で、上の端も", text)
        assert hi and float(hi.group(1)) < float(step.group(1)), text


def test_task1_table_prints_each_lengths_step_ratio():
    """Final reading 2026-12-07c ch05 #3: the ratio follows the drawn lengths' step ratio, printed per length."""
    from course.labs.lab05_explain import task1_table
    run = {"output_lens": STREAM, "concurrency": 4,
           "policies": {"continuous": {"tok_s": 119.0}, "static": {"tok_s": 100.0}}}
    static, cont = step_counts(STREAM, 4)
    assert f"ステップ数の比 {static / cont:.2f} 倍、連続 ÷ 静的の出力 tok/s 1.19 倍" in task1_table({64: run})


def test_concurrency_one_is_the_noise_floor():
    # blind reading 8 ch05 #3: at 1 both policies do the same work, so their ratio is the run's noise
    from course.labkit.policy_floor import floor_line
    rows = [{"concurrency": 1, "ratio": 1.11}, {"concurrency": 4, "ratio": 1.11}, {"concurrency": 8, "ratio": 1.30}]
    text = floor_line(rows)
    assert "1.11 倍は、2つの計測に偏りがないかの確かめ" in text and "4 の 1.11 倍（1 に近い端 1.110）は" in text
    assert "8 の" not in text and "1 から ±0.110 以内" in text          # blind reading 11 ch05 #4: the criterion stated
    assert "言い切れません" in text
    noisy = _sweep()                                       # final reading 2026-12-07d #1: the range, not one ratio
    noisy[1]["policies"]["continuous"] = _pol(100, 80, 125)          # median 1.00, yet 0.80 .. 1.26 over the repeats
    assert sweep_predictions(noisy)[0].held is None and "0.80〜1.26 倍の幅" in sweep_table(noisy)
    assert sweep_predictions(_sweep())[0].held


def test_task1_names_both_dilutions_and_the_one_the_run_shows():
    # blind reading 8 ch05 #4: measured ÷ step ratio 0.915 at 16 against 0.883 at 128 in the saved run
    from course.labs.lab05_explain import task1_table
    short, long_ = _run(lens=[16, 4, 12, 9] * 4), _run(cont=(95, 94, 96), lens=[128, 32, 96, 70] * 4)
    text = task1_table({16: short, 128: long_})
    assert text.splitlines()[-1].startswith("測った比 ÷ ステップ数の比: 16 で ") and "出力長とともに下がりました" in text
    wide = _run(cont=(106, 90, 120), lens=[128, 32, 96, 70] * 4)
    assert "判定できません" in task1_table({16: short, 128: wide})


def test_a_disturbed_run_decides_nothing():
    """A run that other programs crowded (course.labkit.load.LoadWatch: disturbed) prints every verdict of the
    lab's three tasks as 判定できません, numbers still shown; a quiet run's lines are unchanged."""
    from course.labkit.predictions import UNDECIDED, verdicts
    from course.labs.lab05_explain import task1_predictions
    quiet, busy = {"disturbed": False, "warning": None}, {"disturbed": True, "warning": "⚠"}
    sweep = _sweep()
    t1 = {16: _run(lens=[16, 4, 12, 9] * 4), 128: _run(lens=[128, 32, 96, 70] * 4)}
    t2 = _task2_res([50, 60, 250, 400, 900], [50, 60, 700, 800, 1200])
    for preds in (sweep_predictions(sweep), task1_predictions(t1), task2_predictions(t2)):
        plain = verdicts(preds)
        assert verdicts(preds, quiet, None) == plain
        lines = verdicts(preds, quiet, busy).splitlines()
        assert len(lines) == len(preds) and all(line.startswith(UNDECIDED) for line in lines)
        for p, line in zip(preds, lines):
            assert p.measured in line
    assert not run_reading(dict(_run(), load=quiet)).startswith(UNDECIDED)
    assert run_reading(dict(_run(), load=busy)).startswith(UNDECIDED)
