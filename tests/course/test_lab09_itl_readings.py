"""Lab 9's ITL readings (course/labs/lab09_explain.py ``mean_reading``, ``disagg_itl_reading``): the mean (TPOT)
is said to rise only when the long gaps lift it, the Disaggregation window is named as core sharing only when its
median is above the rest's; planted contradicting numbers turn each sentence, and the lines saved in lesson 9 and
lab 9 agree with the numbers printed in them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course.labs import lab09_explain as ex

ROOT = Path(__file__).resolve().parents[2]
NUM = r"([-+]?[\d.]+)"


def setup(budget, gaps, times=None, **extra):
    times = times if times is not None else [0.01 * i for i in range(len(gaps))]
    srt = sorted(gaps)
    return {"budget": budget, "label": str(budget), "median_itl_ms": srt[len(srt) // 2], "p99_itl_ms": srt[-1],
            "max_itl_ms": srt[-1], "itl_points": list(zip(times, gaps)), **extra}


def run(*rows):
    return {"setups": {("disagg" if r["budget"] is None else f"chunk_{r['budget']}"): r for r in rows}}


def test_mean_reading_says_the_mean_rises_only_when_long_gaps_lift_it():
    # the blind reading's lesson run: 180 gaps of 23.5 ms and 8 stalled gaps near 300 ms
    stalled = run(setup(16, [20.0] * 50), setup(512, [23.5] * 180 + [300.0] * 8))
    text = ex.mean_reading(stalled)
    assert "中央値 23.5 ms" in text and "長い間隔 8 個を除くと平均は 23.5 ms" in text and "TPOT" in text
    quiet = run(setup(16, [20.0] * 50), setup(512, [23.5] * 187 + [60.0]))      # planted: one short long gap
    assert "ほとんど上がっていません" in ex.mean_reading(quiet)


def test_disagg_reading_names_core_sharing_only_when_the_window_is_slower():
    times = [0.01 * i for i in range(100)]
    # long prompt arrives at 0.30 s, first token at 0.60 s; the first gap at/after 0.60 is the admission step
    slow = [20.0] * 30 + [45.0] * 30 + [65.0] + [20.0] * 39
    res = run(setup(512, [20.0] * 100), setup(None, slow, times, long_arrivals_s=[0.30], long_first_token_s=[0.60]))
    text = ex.disagg_itl_reading(res)
    assert "中央値 45.0 ms（29 個）、それ以外 20.0 ms（70 個）で 2.25 倍" in text and "同じコア" in text
    assert "最大 65.0 ms" in text and "最大値はこの間隔です" in text
    flat = [20.0] * 60 + [65.0] + [20.0] * 39                                    # planted: no slowdown in the window
    res = run(setup(512, [20.0] * 100), setup(None, flat, times, long_arrivals_s=[0.30], long_first_token_s=[0.60]))
    assert "同じコア" not in ex.disagg_itl_reading(res) and "1.00 倍で、しきい値の 1.2 倍を下回りました" in ex.disagg_itl_reading(res)
    late = [20.0] * 60 + [30.0] + [20.0] * 20 + [90.0] + [20.0] * 18           # planted: the max elsewhere
    res = run(setup(512, [20.0] * 100), setup(None, late, times, long_arrivals_s=[0.30], long_first_token_s=[0.60]))
    assert "この間隔ではなく、どの区間の理由でもありません。この実行では原因を区別できません" in ex.disagg_itl_reading(res)
    inside = [20.0] * 30 + [45.0] * 10 + [90.0] + [45.0] * 19 + [65.0] + [20.0] * 39   # planted: the max in the window
    res = run(setup(512, [20.0] * 100), setup(None, inside, times, long_arrivals_s=[0.30], long_first_token_s=[0.60]))
    assert "この間隔ではなく、破線〜点線の区間の中の間隔です（Prefill の計算中か" in ex.disagg_itl_reading(res)
    # the max (90 ms ending at 0.40 s, so from 0.31 s) against the prefill's end: after it, before it, across it
    where = {done: ex.disagg_itl_reading(run(setup(512, [20.0] * 100), setup(
        None, inside, times, long_arrivals_s=[0.30], long_first_token_s=[0.60], long_prefill_done_s=[done])))
        for done in (0.30, 0.45, 0.35)}
    assert "KV の受け渡しのあいだの間隔です" in where[0.30] and "Prefill のプロセスが計算" not in where[0.30]
    assert "Prefill のプロセスが計算していたあいだ（Prefill の完了は開始から 0.450 s）" in where[0.45]
    assert "Prefill の完了（開始から 0.350 s）をまたぐ間隔" in where[0.35]
    two = ex.disagg_itl_reading(run(setup(512, [20.0] * 100), setup(None, inside, times, long_arrivals_s=[0.30, 0.35],
                                                                long_first_token_s=[0.60, 0.70],
                                                                long_prefill_done_s=[0.32, 0.65])))
    assert "2 件の長いプロンプトの区間が重なるところの間隔" in two
    assert "区間には分けません" in ex.disagg_itl_reading(run(setup(512, [20.0] * 10)))


def test_disagg_reading_compares_the_idle_gaps_with_the_one_engine():
    """The blind reading's lesson run: Disaggregation's gaps outside the windows 10.8 ms against the one engine's
    decode-only steps 6.1 ms. The prefill process and the receive thread wait in poll then, so the reading must not
    name them; with the load watch quiet it must not blame other programs either."""
    times = [0.01 * i for i in range(100)]
    single = setup(512, [6.1] * 60 + [80.0] * 4 + [6.1] * 36, times, long_arrivals_s=[0.58], long_first_token_s=[0.63])
    gaps = [10.8] * 30 + [13.4] * 30 + [20.4] + [10.8] * 39
    dis = setup(None, gaps, times, long_arrivals_s=[0.30], long_first_token_s=[0.60])
    text = ex.disagg_itl_reading({**run(single, dis), "load": {"disturbed": False}})
    assert "区間の外の中央値 10.8 ms は、予算 512 の1エンジンの Decode だけのステップの中央値 6.1 ms の 1.77 倍です" in text
    assert "`control.poll`" in text and "区別できません" in text and "ほかのプログラムの負荷" not in text
    assert "負荷の監視にかからない短い負荷" in text
    even = setup(None, [6.3] * 30 + [8.0] * 30 + [9.0] + [6.3] * 39, times, long_arrivals_s=[0.30],
                 long_first_token_s=[0.60])
    text = ex.disagg_itl_reading(run(single, even))
    assert "6.1 ms の 1.03 倍です。" in text and "`control.poll`" not in text and "ほかのプログラムの負荷" in text


def saved_text(rel: str, cell_id: str) -> str:
    nb = json.loads((ROOT / rel).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c.get("id") == cell_id)
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("rel,cell_ids", [("labs/09_disaggregation_lab.ipynb", ("5d0a7c10",)),
                                          ("lessons/09_disaggregation.ipynb", ("dba79d7d", "d9a1ed01"))])
def test_saved_itl_readings_agree_with_their_numbers(rel, cell_ids):
    text = "".join(saved_text(rel, cell_id) for cell_id in cell_ids)   # lesson: the Disaggregation ITL line is in 4 節
    m = re.search(rf"平均 {NUM} ms（中央値の.*?を除くと平均は {NUM} ms", text)
    assert m, text
    mean, base = map(float, m.groups())
    if abs(mean - 1.1 * base) > 0.2:
        assert ("TPOT も" in text) == (mean > 1.1 * base), text
    m = re.search(rf"（破線〜点線[^）]*）の中央値 {NUM} ms（\d+ 個）、それ以外 {NUM} ms", text)
    assert m, text
    md, mr = map(float, m.groups())
    if abs(md - 1.2 * mr) > 0.2:
        assert ("同じコアと" in text) == (md > 1.2 * mr), text
