"""Chapter 5's readings (course/labs/lab05_explain.py): each sentence follows the numbers it is given, and the
saved lab and lesson print readings that their own saved numbers re-derive (blind reading ch05 #1-#3, #7)."""
import json
import re
from pathlib import Path

from course.labkit.predictions import HELD, MISSED
from course.labs.lab05_explain import idle_share, run_reading, sweep_predictions, sweep_table

ROOT = Path(__file__).resolve().parents[2]
LENS = [40, 64, 42, 18, 32, 48, 20, 60]          # two groups of 4


def _pol(tok, lo, hi, tpot=5.0, dur=1.0):
    return {"tok_s": tok, "tok_s_min": lo, "tok_s_max": hi, "tpot_ms": tpot, "duration_s": dur}


def _run(c=4, cont=(110, 108, 112), stat=(100, 98, 102), hf=(120, 118, 122), tpot=5.0, lens=LENS):
    return {"output_lens": lens, "concurrency": c, "repeats": 3,
            "policies": {"continuous": _pol(*cont, tpot=tpot), "static": _pol(*stat, tpot=tpot, dur=2.0),
                         "hf_static": _pol(*hf)}}


def test_run_reading_follows_the_numbers_in_either_direction():
    bound = 1 / (1 - idle_share(LENS, 4))
    text = run_reading(_run())
    assert "1.10 倍（繰り返しの幅は重ならない）" in text and f"{bound:.2f} 倍まで開きます" in text
    assert "Prefill とステップごとの固定の処理" in text
    assert "transformers のほうが速い" in text and "0.83 倍" in text
    assert "約 0.50 件/s" in text                                       # 1 / the static run's duration
    overlap = run_reading(_run(cont=(101, 97, 104)))
    assert "繰り返しの幅が重なる" in overlap and "大きいとは言えません" in overlap
    engine_wins = run_reading(_run(hf=(80, 79, 81)))
    assert "エンジンの静的バッチングのほうが速い" in engine_wins and "終わった行" in engine_wins
    static_wins = run_reading(_run(cont=(90, 89, 91)))
    assert "静的のほうが速く、幅も重なりません" in static_wins
    assert "ブロック表" in run_reading(_run(c=8))                      # transformers faster at any batch size
    over = run_reading(_run(cont=(200, 198, 202)))
    assert "上限以上" in over


def _sweep(ratios=(1.0, 1.1, 1.12, 1.1), tpots=(4.8, 5.4, 6.5, 9.0)):
    return {c: _run(c=c, cont=(100 * r, 100 * r - 1, 100 * r + 1), stat=(100, 99.5, 100.5), tpot=t)
            for c, r, t in zip((1, 2, 4, 8), ratios, tpots)}


def test_sweep_predictions_turn_on_a_planted_number():
    good = sweep_predictions(_sweep())
    assert [p.held for p in good] == [True, True] and good[0].verdict().startswith(HELD)
    no_gap = sweep_predictions(_sweep(ratios=(1.0, 1.1, 0.99, 1.1)))
    assert [p.held for p in no_gap] == [False, True] and no_gap[0].verdict().startswith(MISSED)
    steep = sweep_predictions(_sweep(tpots=(4.8, 9.0, 18.0, 36.0)))
    assert [p.held for p in steep] == [True, False] and "7.50 倍" in steep[1].verdict()
    assert "速いのは transformers" in sweep_table(_sweep())


def _outputs(path, marker):
    cells = json.loads((ROOT / path).read_text("utf-8"))["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell["outputs"] if o.get("output_type") == "stream")


def test_saved_sweep_verdicts_agree_with_the_saved_table():
    text = _outputs("labs/05_batching_lab.ipynb", "sweep_predictions")
    rows = re.findall(r"同時リクエスト数\s*(\d+): 連続 ÷ 静的 ([\d.]+) 倍（(繰り返しの幅[^、]*|繰り返し1回)、空き枠 \d+ % "
                      r"からの上限 ([\d.]+) 倍）、静的 ÷ transformers ([\d.]+) 倍（速いのは (\S+)）、静的の TPOT 中央値 "
                      r"([\d.]+) ms", text)
    assert len(rows) >= 2, text
    for r in rows:
        assert (r[5] == "エンジン") == (float(r[4]) > 1), r
    multi = [r for r in rows if int(r[0]) >= 2]
    gap_held = all(1 < float(r[1]) < float(r[3]) and "重なる" not in r[2] for r in multi)
    k = int(rows[-1][0]) / int(rows[0][0])
    step_held = float(rows[-1][6]) / float(rows[0][6]) < k / 2
    saved = [line for line in text.splitlines() if line.startswith((HELD, MISSED))]
    assert [line.startswith(HELD) for line in saved] == [gap_held, step_held], text


def test_saved_lesson_reading_agrees_with_its_printed_ranges():
    text = _outputs("lessons/05_batching.ipynb", "run_reading")
    m = re.search(r"連続 ÷ 静的の出力 tok/s: ([\d.]+) 倍（連続 (\d+)〜(\d+)、静的 (\d+)〜(\d+) tok/s）", text)
    assert m, text
    c_lo, c_hi, s_lo, s_hi = map(int, m.groups()[1:])
    apart = c_hi < s_lo or s_hi < c_lo
    assert ("繰り返しの幅は重ならない" in text) == apart, text
    q = re.search(r"静的（エンジン）÷ transformers の出力 tok/s: ([\d.]+) 倍", text)
    assert ("エンジンの静的バッチングのほうが速い" in text) == (float(q.group(1)) > 1), text
