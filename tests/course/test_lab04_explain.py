"""Lab 4's predictions (course/labs/lab04_explain.py): planted contradicting numbers turn each verdict,
and every saved verdict in labs/04_kv_cache_memory_lab.ipynb agrees with the numbers printed above it.
Also: the lab's pool picture, at num_blocks=4 (what its やってみよう asks), preempts a request."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from course.demos import block_pool
from course.labkit.predictions import HELD, MISSED, verdicts
from course.labkit.spread import UNDECIDED
from course.labs import lab04_explain as ex

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "labs/04_kv_cache_memory_lab.ipynb"


def sweep(off, on, ranges=None):
    rows = [{"shared_len": s, "ttft_off_ms": a, "ttft_on_ms": b, "ratio": a / b}
            for s, a, b in zip((0, 64, 256, 480), off, on)]
    for row, (lo, hi) in zip(rows, ranges or []):           # per-request min-max of the cached TTFT
        row["ttft_on_ms_min"], row["ttft_on_ms_max"] = lo, hi
    return rows


def test_sweep_verdicts_follow_the_numbers():
    good = sweep((5.4, 11.7, 33.5, 64.9), (5.5, 6.2, 6.7, 7.7))
    assert [p.held for p in ex.sweep_predictions(good)] == [True, True, True]
    # planted: the cache does nothing (the cached TTFT grows like the uncached one)
    flat = sweep((5.4, 11.7, 33.5, 64.9), (5.5, 11.5, 33.0, 64.0))
    p = ex.sweep_predictions(flat)
    assert not p[0].held and p[0].verdict().startswith(MISSED) and p[2].held
    # planted: the ratio falls between two lengths
    dip = sweep((5.4, 11.7, 33.5, 40.0), (5.5, 6.2, 6.7, 8.5))          # 5.00 then 4.71: the ratio falls
    assert ex.sweep_predictions(dip)[1].held is False
    # planted: the cached TTFT does not grow at all (faster than the shared-0 prefill)
    assert ex.sweep_predictions(sweep((5.4, 11.7, 33.5, 64.9), (5.5, 5.4, 5.3, 5.2)))[2].held is False
    assert "5.50 ms → 7.70 ms（中央値で 1.40 倍）" in ex.sweep_predictions(good)[2].verdict()
    # blind reading 2026-12-07c ch04 #2: the gauge is the per-request min-max, not the shared-0 ratio's
    # distance from 1 (0.00 in the saved run, so any growth passed). Overlapping ranges: 判定できません
    ranges = [(6.4, 7.9), (7.0, 9.1), (8.0, 11.0), (7.5, 12.0)]
    overlap = ex.sweep_predictions(sweep((6.8, 17.8, 57.5, 125.1), (6.82, 7.75, 9.67, 9.93), ranges))[2]
    assert overlap.held is None and overlap.verdict().startswith("判定できません")
    assert "6.82 ms（6.40〜7.90） → 9.93 ms（7.50〜12.00）" in overlap.verdict()
    apart = ranges[:3] + [(8.5, 12.0)]
    assert ex.sweep_predictions(sweep((6.8, 17.8, 57.5, 125.1), (6.82, 7.75, 9.67, 9.93), apart))[2].held is True
    below = ranges[:3] + [(5.0, 6.0)]
    assert ex.sweep_predictions(sweep((6.8, 17.8, 57.5, 125.1), (6.82, 7.75, 9.67, 5.5), below))[2].held is False
    # a run on a loaded machine (2026-12-07: cached TTFT 20.64 -> 44.27 ms, 2.14 x): it grows, by far less
    # than without the cache
    loaded = sweep((29.41, 56.82, 209.10, 382.51), (20.64, 24.49, 33.96, 44.27))
    assert all(p.held for p in ex.sweep_predictions(loaded))


def task1(cached):
    return [{"shared_len": s, "expected": s // 16 * 16, "cached_min": lo, "cached_max": hi,
             "hit_rate": 0.0, "expected_hit_rate": 0.0} for s, (lo, hi) in zip((15, 16, 17), cached)]


def test_task1_verdict_follows_the_numbers():
    assert ex.task1_predictions(task1([(0, 0), (16, 16), (16, 16)]))[0].held
    assert "0・16・16" in ex.task1_predictions(task1([(0, 0), (16, 16), (16, 16)]))[0].text
    # planted: a partial block reused (17 shared tokens read as 17), or one request that missed
    assert not ex.task1_predictions(task1([(0, 0), (16, 16), (16, 17)]))[0].held
    assert not ex.task1_predictions(task1([(0, 0), (0, 16), (16, 16)]))[0].held


def task2(hits, expected, on):
    return [{"num_requests": n, "hit_rate": h, "expected_hit_rate": e, "ttft_on_ms": t, "ttft_off_ms": 30.0}
            for n, h, e, t in zip((2, 8, 32), hits, expected, on)]


def test_task2_verdicts_follow_the_numbers():
    exp = [(n - 1) / n * 256 / 272 for n in (2, 8, 32)]
    assert [p.held for p in ex.task2_predictions(task2(exp, exp, (6.8, 6.7, 6.9)))] == [True, True]
    # planted: the engine's hit rate off the formula (a warm cache made request 1 hit too)
    warm = task2([256 / 272] * 3, exp, (6.8, 6.7, 6.9))
    assert ex.task2_predictions(warm)[0].held is False
    # planted: the cached TTFT doubles with N
    assert ex.task2_predictions(task2(exp, exp, (6.8, 9.0, 13.6)))[1].held is False


def task3(peaks, busy_c, busy_p, means_c, means_p, pre, drain=(0.68, 0.43)):
    return [{"pool": pool, "max_model_len": 4096, "peak_contiguous": k, "busy_contiguous": bc, "busy_paged": bp,
             "mean_contiguous": c, "mean_paged": p, "drain_paged": d, "preemptions": q}
            for pool, k, bc, bp, c, p, d, q in zip((32_768, 16_384), peaks, busy_c, busy_p, means_c, means_p, drain,
                                                   pre)]


def test_task3_verdicts_follow_the_numbers():
    good = task3((8, 4), (7.97, 3.99), (51.21, 23.32), (6.9, 3.73), (23.18, 15.33), (75, 89))
    assert [p.held for p in ex.task3_predictions(good)] == [True, True, True, True]
    assert "4 件まで" in ex.task3_predictions(good)[0].text
    # planted: paging's busy count does not shrink with the pool (the busy ratio doubles)
    widened = task3((8, 4), (7.97, 3.99), (51.21, 51.0), (6.9, 3.73), (23.18, 15.33), (75, 89))
    assert ex.task3_predictions(widened)[1].held is False
    # planted: no queue ever forms in the smaller pool (NaN busy means): the busy-ratio verdict cannot hold
    nan = float("nan")
    assert ex.task3_predictions(task3((8, 4), (7.97, nan), (51.21, nan), (6.9, 3.73), (23.18, 15.33),
                                      (75, 89)))[1].held is False
    # planted: a whole-run ratio above the busy one (no drain to pull it down)
    assert ex.task3_predictions(task3((8, 4), (7.97, 3.99), (51.21, 23.32), (6.9, 3.0), (23.18, 21.0),
                                      (75, 89)))[2].held is False
    assert ex.task3_predictions(task3((8, 5), (7.97, 3.99), (51.21, 23.32), (6.9, 3.73), (23.18, 15.33),
                                      (75, 89)))[0].held is False
    assert ex.task3_predictions(task3((8, 4), (7.97, 3.99), (51.21, 23.32), (6.9, 3.73), (23.18, 15.33),
                                      (75, 60)))[3].held is False


def test_task3_on_the_lab_stream_holds():
    """課題3 is a simulation: its prediction must hold on the lab's own request stream."""
    from course.demos import kv_sim
    reqs = kv_sim.request_stream(200, seed=0, prompt_median=300, output_median=200, sigma=0.9)
    rows = ex.task3_rows({pool: kv_sim.compare(reqs, pool_tokens=pool) for pool in ex.TASK3_POOLS})
    assert all(p.held for p in ex.task3_predictions(rows)), ex.task3_table(rows)


# ---------------------------------------------------------------- the saved notebook
def _saved(marker: str) -> tuple[str, list[str]]:
    nb = json.loads(LAB.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    return text, [x for x in text.splitlines() if x.startswith((HELD, MISSED, UNDECIDED))]


def _agree(lines, predictions):
    assert len(lines) == len(predictions), lines
    for line, p in zip(lines, predictions):
        assert line.startswith({True: HELD, False: MISSED, None: UNDECIDED}[p.held]), (line, p)
        assert p.text in line, (line, p.text)


SWEEP = re.compile(r"共有\s*(\d+): キャッシュなし ([\d.]+) ms(?:（([\d.]+)〜([\d.]+)）)?、あり ([\d.]+) ms"
                   r"(?:（([\d.]+)〜([\d.]+)）)?.*比（なし / あり）([\d.]+) 倍")


def _sweep_agrees(text, lines):
    rows = []
    for s, a, a0, a1, b, b0, b1, r in SWEEP.findall(text):
        row = {"shared_len": int(s), "ttft_off_ms": float(a), "ttft_on_ms": float(b), "ratio": float(r)}
        for key, lo, hi in (("ttft_off_ms", a0, a1), ("ttft_on_ms", b0, b1)):
            if lo:
                row[f"{key}_min"], row[f"{key}_max"] = float(lo), float(hi)
        rows.append(row)
    assert len(rows) >= 2 and rows[0]["shared_len"] == 0, text
    _agree(lines, ex.sweep_predictions(rows))


def test_saved_sweep_verdicts_agree_with_the_saved_numbers():
    _sweep_agrees(*_saved("sweep_predictions"))


def test_fresh_sweep_printout_reads_back():
    """The cell's printout as fresh code prints it (off ranges, four verdicts) re-derives the same verdicts."""
    rows = sweep((7.14, 16.98, 56.61, 126.69), (6.82, 7.34, 8.04, 8.71),
                 [(6.26, 8.03), (7.09, 7.57), (7.71, 9.29), (8.20, 11.89)])
    for row, (lo, hi) in zip(rows, [(6.9, 7.6), (16.5, 17.9), (53.0, 65.5), (120.0, 131.0)]):
        row["ttft_off_ms_min"], row["ttft_off_ms_max"] = lo, hi
    text = ex.sweep_table(rows) + "\n" + verdicts(ex.sweep_predictions(rows))
    lines = [x for x in text.splitlines() if x.startswith((HELD, MISSED, UNDECIDED))]
    assert len(lines) == 4 and all(x.startswith(HELD) for x in lines), text
    _sweep_agrees(text, lines)


def test_a_disturbed_run_decides_no_timed_verdict():
    """LoadWatch's planted load (disturbed) turns the lab's timed verdict lines into 判定できません, numbers kept;
    the counted hit rate (課題2) and an undisturbed load leave them as they were."""
    rows = sweep((7.14, 16.98, 56.61, 126.69), (6.82, 7.34, 8.04, 8.71))
    calm, bad = {"disturbed": False, "warning": None}, {"disturbed": True, "warning": "⚠"}
    plain = verdicts(ex.sweep_predictions(rows)).splitlines()
    assert verdicts(ex.sweep_predictions(rows), calm, None).splitlines() == plain
    crowded = verdicts(ex.sweep_predictions(rows), calm, bad).splitlines()
    assert len(crowded) == len(plain) and all(x.startswith(UNDECIDED) for x in crowded)
    assert "126.69" in crowded[0] and "14.55" in crowded[1]
    exp = [(n - 1) / n * 256 / 272 for n in (2, 8, 32)]
    t2 = task2(exp, exp, (6.8, 6.7, 6.9))
    assert [p.held for p in ex.task2_predictions(t2, calm)] == [True, True]
    hit, ttft = (p.verdict() for p in ex.task2_predictions(t2, calm, bad))
    assert hit.startswith(HELD) and ttft.startswith(UNDECIDED) and "6.80 → 6.70 → 6.90 ms" in ttft


TASK1 = re.compile(r"共有プロンプト長 (\d+): 再利用できるトークン（満杯のブロック）(\d+)、2件目以降が再利用したトークン "
                   r"最小 (\d+)・最大 (\d+)")


def test_saved_task1_verdict_agrees_with_the_saved_numbers():
    text, lines = _saved("task1_predictions")
    rows = [{"shared_len": int(s), "expected": int(e), "cached_min": int(lo), "cached_max": int(hi)}
            for s, e, lo, hi in TASK1.findall(text)]
    assert [r["shared_len"] for r in rows] == list(ex.TASK1_SHARED_LENS), text
    _agree(lines, ex.task1_predictions(rows))


TASK2 = re.compile(r"リクエスト数\s*(\d+): ヒット率 エンジン ([\d.]+) % / 計算 ([\d.]+) %、2件目以降の TTFT "
                   r"キャッシュあり ([\d.]+) ms・なし ([\d.]+) ms")


def test_saved_task2_verdicts_agree_with_the_saved_numbers():
    text, lines = _saved("task2_predictions")
    rows = [{"num_requests": int(n), "hit_rate": float(h) / 100, "expected_hit_rate": float(e) / 100,
             "ttft_on_ms": float(on), "ttft_off_ms": float(off)} for n, h, e, on, off in TASK2.findall(text)]
    assert [r["num_requests"] for r in rows] == list(ex.TASK2_NUM_REQUESTS), text
    _agree(lines, ex.task2_predictions(rows))


TASK3 = re.compile(r"プール ([\d,]+) トークン: 連続確保（max_model_len）最大 (\d+) 件・待ちがある間 ([\d.]+) 件、"
                   r"ページング 待ちがある間 ([\d.]+) 件.*?全体の平均 連続確保 ([\d.]+) 件・ページング ([\d.]+) 件"
                   r".*?ページングのドレイン (\d+) %.*?プリエンプション (\d+) 回")


def test_saved_task3_verdicts_agree_with_the_saved_numbers():
    text, lines = _saved("task3_predictions")
    rows = [{"pool": int(p.replace(",", "")), "max_model_len": 4096, "peak_contiguous": int(k),
             "busy_contiguous": float(bc), "busy_paged": float(bp), "mean_contiguous": float(c),
             "mean_paged": float(m), "drain_paged": int(d) / 100, "preemptions": int(q)}
            for p, k, bc, bp, c, m, d, q in TASK3.findall(text)]
    assert [r["pool"] for r in rows] == sorted(ex.TASK3_POOLS, reverse=True), text
    _agree(lines, ex.task3_predictions(rows))


# ---------------------------------------------------------------- the pool picture's やってみよう
def _lab_pool_requests():
    rng = random.Random(0)                      # as the lab's cell: 8 shared tokens, 2 of each request's own
    system = [rng.randrange(100, 1000) for _ in range(8)]
    return [{"prompt": system + [rng.randrange(100, 1000) for _ in range(2)], "max_tokens": m, "at_step": s}
            for m, s in ((5, 0), (3, 1), (4, 4), (4, 9))]


def _preempted(snaps) -> set[int]:
    """Requests whose blocks vanished before they finished."""
    out, done = set(), set()
    for a, b in zip(snaps, snaps[1:]):
        done |= set(a["finished"])
        held_a = {i for h in a["holders"] for i in h}
        held_b = {i for h in b["holders"] for i in h}
        out |= {i for i in held_a - held_b if i not in done and i not in b["finished"]}
    return out


@pytest.mark.parametrize("num_blocks, preempted", [(12, set()), (8, set()), (4, {1})])
def test_lab_pool_runs_short_only_at_four_blocks(num_blocks, preempted):
    snaps = block_pool.pool_steps(_lab_pool_requests(), block_size=4, num_blocks=num_blocks)
    assert _preempted(snaps) == preempted
    assert sorted(i for s in snaps for i in s["finished"]) == [0, 1, 2, 3]


def test_growth_lines_flag_a_median_far_above_the_linear_minimum():
    """blind reading 10, ch04 #1: the cached path's work is linear in the shared length, so a row whose median
    grows > SLOPE_GAP x its minimum (by more than shared 0's spread) is flagged, naming candidates, not load."""
    rows = sweep((6.92, 17.45, 55.63, 135.07), (6.66, 7.26, 8.40, 14.39),
                 [(6.35, 8.24), (6.79, 10.09), (7.95, 12.13), (9.44, 27.44)])
    lines = ex.growth_lines(rows)
    assert len(lines) == 2 and "共有 480 は最小値 6.4・中央値 16.1 µs" in lines[0], lines
    assert lines[1].startswith("共有 480 の行") and "2.5 倍" in lines[1] and "負荷" not in lines[1]
    assert "最小値で 1.49 倍" in ex.sweep_predictions(rows)[2].verdict()
    calm = sweep((7.14, 16.98, 56.61, 126.69), (6.82, 7.34, 8.04, 8.71),
                 [(6.26, 8.03), (7.09, 7.57), (7.71, 9.29), (8.20, 11.89)])
    assert len(ex.growth_lines(calm)) == 1
    assert ex.growth_lines(sweep((5.4, 11.7, 33.5, 64.9), (5.5, 6.2, 6.7, 7.7))) == []   # no ranges: no line
