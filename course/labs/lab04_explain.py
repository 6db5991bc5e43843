"""Chapter 4's lab: its predictions, decided by the runs (``course.labkit.predictions``).

    runs0 = [lab04.run_prefix_lab(shared_len=s) for s in SWEEP_SHARED_LENS]   # §3's sweep (shared 0 first)
    rows = sweep_rows([lab04.add_run(history, r) for r in runs0])
    print(sweep_table(rows)); print(verdicts(sweep_predictions(rows), *(r["load"] for r in runs0)))
    runs = {s: lab04.run_prefix_lab(shared_len=s, repeats=1) for s in TASK1_SHARED_LENS}
    print(task1_table(task1_rows(runs))); print(verdicts(task1_predictions(task1_rows(runs))))

A run that other programs crowded (its ``load`` says ``disturbed``, ``course.labkit.load.LoadWatch``)
decides no timed prediction: §3's go through ``verdicts(..., *loads)``, 課題2's TTFT one through
``task2_predictions(rows, *loads)``. Counted tokens (課題1, 課題2's hit rate) and the simulation (課題3)
do not depend on the load.

The predictions take plain rows (numbers only), so a test can plant contradicting numbers and can
re-derive a saved verdict from the table printed above it. §3's sweep: without the cache TTFT grows
with the shared prefix (its prefill); with the cache each request still prefills its own 16 tokens and
attends over the cached prefix, so TTFT grows, by a small part of the uncached growth (judged against the
min-max of the per-request cached TTFTs at shared 0 and at the longest share: overlapping ranges print
判定できません; a cached TTFT that falls beyond that spread contradicts the work and is a 予想と違う;
at shared 0 both engines do the same work, so their ranges must overlap). 課題1: only full blocks are cached. 課題2: the
hit rate is (N - 1) / N times the reusable share; the TTFT of requests 2.. does not depend on N.
課題3 (``course.demos.kv_sim``, no timing): halving the pool halves the contiguous reservations; while requests
wait, paging's count shrinks about as much (the busy-phase ratio stays), and the whole-run mean, which
includes the drain (its share depends on the pool), sits below the busy-phase ratio.
"""
from __future__ import annotations

from course.labkit.predictions import Prediction, under_load
from course.labkit.spread import RETRY, decide, order, spread_text
from course.labkit.spread import span as span_of

SWEEP_SHARED_LENS = (0, 64, 256, 480)
TASK1_SHARED_LENS = (15, 16, 17)
TASK2_NUM_REQUESTS = (2, 8, 32)
TASK3_POOLS = (32_768, 16_384)
TTFT_SPREAD_MAX = 1.5          # 課題2: max / min of the cached TTFT over N
BUSY_RATIO_DRIFT = 0.2         # 課題3: the busy-phase ratio moves by at most this share when the pool halves
OFF_OVER_ON_GROWTH = 3         # §3: the uncached TTFT grows by more than this x the cached one's growth
SLOPE_GAP = 2                  # §3: a row's median growth per shared token over this x its minimum's is flagged
FELL = ("キャッシュありの TTFT が、仕事の多い長い共有のほうで、揺れの範囲を超えて短くなった。仕事の量では"
        "説明できないので、共有 0 の実行が遅く測られている。候補は2つ：その実行の間だけほかのプログラムが CPU を"
        "使っていた（負荷の警告を確かめる）か、エンジンの最初の Prefill（ウォームアップ前）が入った。この実行では"
        "どちらか区別できない。測り直す")


# ---------------------------------------------------------------- §3: the shared-prefix sweep
def sweep_rows(history: list[dict]) -> list[dict]:
    keys = ("shared_len", "ttft_off_ms", "ttft_on_ms", "ratio", "ttft_off_ms_min", "ttft_off_ms_max", "ttft_on_ms_min",
            "ttft_on_ms_max")
    return [{k: r[k] for k in keys if k in r} for r in sorted(history, key=lambda r: r["shared_len"])]


def _off_text(row: dict) -> str:
    """The uncached TTFT with its range, printed even when min = max (a test reads the range back)."""
    rng = f"（{row['ttft_off_ms_min']:.2f}〜{row['ttft_off_ms_max']:.2f}）" if "ttft_off_ms_min" in row else ""
    return f"{row['ttft_off_ms']:.2f} ms{rng}"


def sweep_table(rows: list[dict]) -> str:
    base = rows[0]["ttft_on_ms"]
    return "\n".join([f"共有 {r['shared_len']:>3}: キャッシュなし {_off_text(r)}、あり "
                      f"{spread_text(r, 'ttft_on_ms', ' ms', '{:.2f}')}"
                      f"（ありは共有 {rows[0]['shared_len']} の {r['ttft_on_ms'] / base:.2f} 倍）、比（なし / あり）"
                      f"{r['ratio']:.2f} 倍" for r in rows] + growth_lines(rows))


def growth_lines(rows: list[dict]) -> list[str]:
    """The cached TTFT's growth per shared token, from the minimums and from the medians (blind reading 10,
    ch04 #1). The cached path's extra work (reading the cached K/V, 16 queries over it) grows linearly with
    the shared length, so a row whose median grows far faster than its minimum has a median pulled up by
    slow requests: the line says so and names the candidates the run cannot separate (no load blamed)."""
    lo = rows[0]
    if lo["shared_len"] != 0 or "ttft_on_ms_min" not in lo or len(rows) < 2:
        return []
    parts, lines = [], []
    for r in rows[1:]:
        by_min = (r["ttft_on_ms_min"] - lo["ttft_on_ms_min"]) / r["shared_len"] * 1e3     # µs per shared token
        by_med = (r["ttft_on_ms"] - lo["ttft_on_ms"]) / r["shared_len"] * 1e3
        parts.append(f"共有 {r['shared_len']} は最小値 {by_min:.1f}・中央値 {by_med:.1f} µs")
        gap = (by_med - by_min) * r["shared_len"] / 1e3        # ms the median adds beyond the minimum's growth
        if by_min > 0 and by_med > SLOPE_GAP * by_min and gap > lo["ttft_on_ms_max"] - lo["ttft_on_ms_min"]:
            lines.append(
                f"共有 {r['shared_len']} の行は、キャッシュありの中央値の伸びが、最小値の伸びの {by_med / by_min:.1f} 倍"
                "です。キャッシュありで増える仕事（キャッシュした K と V の読み出しと、それへの Attention）は、"
                "共有の長さに比例します。この差は仕事の量では説明できず、一部のリクエストが遅く測られています。"
                "候補は、直前の長い Prefill（各繰り返しの1件目）のあとしばらく遅くなること（メモリの確保し直しや、"
                "CPU キャッシュの入れ替え）と、CPU のクロックの変化です。この実行ではどれか区別できません。"
                "この行の「共有 0 の何倍」は伸びを大きく見せているので、伸びは最小値どうしで読みます")
    return [f"キャッシュありの伸び（共有 0 から、共有トークン1つあたり）：{'、'.join(parts)}"] + lines


def _ratio_range(row: dict) -> tuple[float, float]:
    """The ratio (without / with) the per-request ranges allow: off min / on max .. off max / on min."""
    (a0, a1), (b0, b1) = span_of(row, "ttft_off_ms"), span_of(row, "ttft_on_ms")
    return a0 / b1, a1 / b0


def _step(lo: tuple[float, float], hi: tuple[float, float]) -> int:
    """+1: hi's range above lo's; -1: below (or equal single values); 0: the ranges overlap."""
    return 1 if hi[0] > lo[1] else -1 if hi[1] < lo[0] or (lo[0] == lo[1] and hi[0] == hi[1]) else 0


def sweep_predictions(rows: list[dict]) -> list[Prediction]:
    """§3's predictions, from the sweep's rows sorted by shared length (the first is shared 0). The caller
    passes the runs' loads to ``verdicts`` (a disturbed run decides none of them)."""
    lo, hi = rows[0], rows[-1]
    span = f"共有部分 {lo['shared_len']} → {hi['shared_len']}"
    off_up, on_up = hi["ttft_off_ms"] - lo["ttft_off_ms"], hi["ttft_on_ms"] - lo["ttft_on_ms"]
    grow = hi["ttft_on_ms"] / lo["ttft_on_ms"]
    side = order(lo, hi, "ttft_on_ms")   # +1: every later request at hi slower than every one at lo; 0: overlap
    fell = side < 0 and on_up < 0        # the cached TTFT fell beyond the spread: more work, less time
    # a fall within the spread is no growth we can see: judge against the largest growth the ranges allow
    on_bound = on_up if on_up >= 0 else span_of(hi, "ttft_on_ms")[1] - span_of(lo, "ttft_on_ms")[0]
    ratios = [r["ratio"] for r in rows]
    steps = [_step(_ratio_range(a), _ratio_range(b)) for a, b in zip(rows, rows[1:])]
    on_text = f"あり {spread_text(lo, 'ttft_on_ms', ' ms', '{:.2f}')} → {spread_text(hi, 'ttft_on_ms', ' ms', '{:.2f}')}"
    preds = [
        decide(not fell and off_up > OFF_OVER_ON_GROWTH * on_bound, not fell and on_up < 0
               and off_up <= OFF_OVER_ON_GROWTH * on_bound,
               f"{span} で、キャッシュなしの TTFT の伸びは、キャッシュありの伸びの {OFF_OVER_ON_GROWTH} 倍を超える",
               f"なし {lo['ttft_off_ms']:.2f} → {hi['ttft_off_ms']:.2f} ms（+{off_up:.2f}）、{on_text}（{on_up:+.2f}"
               + (f"。下がった分は揺れの範囲内なので、範囲が許す最大の伸び {on_bound:.2f} ms と比べる）" if on_up < 0 and not fell
                  else "）"),
               FELL if fell else "キャッシュが効いていない（ヒット率（エンジン）が 0 % でないかを確かめる）か、ほかの"
               "プログラムが CPU を使っている。負荷の警告を確かめ、繰り返しを増やして測り直す", RETRY),
        decide(all(s > 0 for s in steps), all(s >= 0 for s in steps) and 0 in steps,
               "比（なし / あり）は共有部分が長いほど大きい（隣どうしの比の範囲が重ならないほど）",
               "比 " + " → ".join(f"{x:.2f}" for x in ratios) + " 倍（範囲 "
               + "、".join(f"{a:.2f}〜{b:.2f}" for a, b in map(_ratio_range, rows)) + "）",
               "比が共有の長いほうで、範囲を超えて小さくなった。その実行の間だけほかのプログラムが CPU を使って"
               "いたかを負荷の警告で確かめ、繰り返しを増やして測り直す", RETRY),
        decide(side > 0, side == 0,
               f"キャッシュありの TTFT も、共有 {hi['shared_len']} では共有 {lo['shared_len']}（各自の 16 トークン"
               "だけの Prefill）より伸びる（2件目以降の TTFT の最小〜最大が重ならないほど）",
               f"{on_text}（中央値で {grow:.2f} 倍" + (f"、最小値で {span_of(hi, 'ttft_on_ms')[0] / span_of(lo, 'ttft_on_ms')[0]:.2f} 倍"
                                                    if "ttft_on_ms_min" in hi else "") + "）", FELL, RETRY),
    ]
    if lo["shared_len"] == 0 and "ttft_off_ms_min" in lo:        # the lab's rows; planted ones may lack it
        off, on = span_of(lo, "ttft_off_ms"), span_of(lo, "ttft_on_ms")
        apart = off[0] > on[1] or on[0] > off[1]
        preds.append(decide(
            not apart, off[0] == off[1] or on[0] == on[1],
            "共有 0 では、キャッシュなしとありは同じ仕事（各自の 16 トークンの Prefill）なので、2件目以降の TTFT の"
            "最小〜最大が重なる（比は 1 に近い）",
            f"共有 0: なし {spread_text(lo, 'ttft_off_ms', ' ms', '{:.2f}')}、あり "
            f"{spread_text(lo, 'ttft_on_ms', ' ms', '{:.2f}')}（比 {lo['ratio']:.2f} 倍）",
            "同じ仕事の2つのエンジンの時間が離れている。どちらかを測っている間だけほかのプログラムが CPU を使って"
            "いたか、どちらかのエンジンの最初の Prefill（ウォームアップ前）が入った。この実行ではどちらか区別"
            "できない。この表の比はその分ずれているので、負荷の警告を確かめて測り直す",
            "2件目以降のリクエストが1件だけで、範囲がない。リクエスト数か繰り返しを増やす"))
    return preds


# ---------------------------------------------------------------- 課題1: 15, 16, 17 shared tokens
def task1_rows(runs: dict[int, dict]) -> list[dict]:
    rows = []
    for s, res in sorted(runs.items()):
        later = res["cached_tokens"][1:]
        rows.append({"shared_len": s, "expected": s // res["block_size"] * res["block_size"],
                     "cached_min": min(later), "cached_max": max(later),
                     "hit_rate": res["hit_rate"], "expected_hit_rate": res["expected_hit_rate"]})
    return rows


def task1_table(rows: list[dict]) -> str:
    return "\n".join(f"共有プロンプト長 {r['shared_len']}: 再利用できるトークン（満杯のブロック）{r['expected']}、"
                     f"2件目以降が再利用したトークン 最小 {r['cached_min']}・最大 {r['cached_max']}、ヒット率 "
                     f"エンジン {100 * r['hit_rate']:.2f} % / 計算 {100 * r['expected_hit_rate']:.2f} %"
                     for r in rows)


def task1_predictions(rows: list[dict]) -> list[Prediction]:
    lens = "・".join(str(r["shared_len"]) for r in rows)
    return [Prediction(f"共有プロンプト長 {lens} で、2件目以降が再利用するトークンは "
                       + "・".join(str(r["expected"]) for r in rows) + "（満杯のブロックの分だけ）",
                       all(r["cached_min"] == r["cached_max"] == r["expected"] for r in rows),
                       "、".join(f"{r['shared_len']}: {r['cached_min']}〜{r['cached_max']}" for r in rows),
                       "エンジンのブロックサイズが違う、またはプレフィックスキャッシュが無効になっている。"
                       "パネルの「再利用できるトークン（計算）」の行のブロックサイズを確かめる")]


# ---------------------------------------------------------------- 課題2: more requests
def task2_rows(runs: dict[int, dict]) -> list[dict]:
    return [{"num_requests": n, "hit_rate": r["hit_rate"], "expected_hit_rate": r["expected_hit_rate"],
             "ttft_on_ms": r["ttft_on_ms"], "ttft_off_ms": r["ttft_off_ms"]} for n, r in sorted(runs.items())]


def task2_table(rows: list[dict]) -> str:
    return "\n".join(f"リクエスト数 {r['num_requests']:>2}: ヒット率 エンジン {100 * r['hit_rate']:.2f} % / 計算 "
                     f"{100 * r['expected_hit_rate']:.2f} %、2件目以降の TTFT キャッシュあり {r['ttft_on_ms']:.2f} ms・"
                     f"なし {r['ttft_off_ms']:.2f} ms" for r in rows)


def task2_predictions(rows: list[dict], *loads: dict | None) -> list[Prediction]:
    """The hit rate is counted (no timing) and stands whatever the load; the TTFT prediction is timed, so a
    disturbed run among ``loads`` (the runs' ``load``) turns it into 判定できません."""
    ns = " → ".join(str(r["num_requests"]) for r in rows)
    hits = [r["hit_rate"] for r in rows]
    on = [r["ttft_on_ms"] for r in rows]
    return [
        Prediction(f"リクエスト数 {ns} で、ヒット率（エンジン）は計算（(N − 1) / N に比例）と一致して上がる",
                   all(abs(r["hit_rate"] - r["expected_hit_rate"]) < 5e-4 for r in rows)
                   and all(b > a for a, b in zip(hits, hits[1:])),
                   "エンジン " + " → ".join(f"{100 * h:.2f}" for h in hits) + " %、計算 "
                   + " → ".join(f"{100 * r['expected_hit_rate']:.2f}" for r in rows) + " %",
                   "前の実行のキャッシュが残っている（1件目が 0 でない）か、キャッシュの容量が足りずに追い出された。"
                   "ラボのカーネルを再起動して測り直す"),
        *under_load([Prediction(
                   f"2件目以降の TTFT（キャッシュあり）は、リクエスト数を変えても最大 / 最小が {TTFT_SPREAD_MAX} 倍未満",
                   max(on) / min(on) < TTFT_SPREAD_MAX,
                   "キャッシュあり " + " → ".join(f"{x:.2f}" for x in on) + f" ms（最大 / 最小 {max(on) / min(on):.2f} 倍）",
                   "リクエスト数 2 では2件目以降が繰り返しごとに1件しかなく、中央値がぶれやすい。ほかのプログラムが "
                   "CPU を使っていないかを負荷の警告で確かめ、繰り返しを増やす")], *loads),
    ]


# ---------------------------------------------------------------- 課題3: half the pool (simulation, no timing)
def task3_rows(sims: dict[int, dict], max_model_len: int = 4096) -> list[dict]:
    """From the larger pool to the smaller. ``busy_*``: the mean over the steps with requests still waiting
    (the steady state); ``mean_*``: over every step, the drain included (``drain_paged``: its share of paging's
    steps)."""
    rows = []
    for pool, sim in sorted(sims.items(), reverse=True):
        c, p = sim["contiguous_max_model_len"]["summary"], sim["paged"]["summary"]
        rows.append({"pool": pool, "max_model_len": max_model_len, "peak_contiguous": c["peak_running"],
                     "mean_contiguous": c["mean_running"], "mean_paged": p["mean_running"],
                     "busy_contiguous": c["busy_running"], "busy_paged": p["busy_running"],
                     "drain_paged": 1 - p["busy_steps"] / p["steps"], "preemptions": p["preemptions"]})
    return rows


def task3_table(rows: list[dict]) -> str:
    return "\n".join(f"プール {r['pool']:,} トークン: 連続確保（max_model_len）最大 {r['peak_contiguous']} 件・"
                     f"待ちがある間 {r['busy_contiguous']:.2f} 件、ページング 待ちがある間 {r['busy_paged']:.2f} 件"
                     f"（比 {r['busy_paged'] / r['busy_contiguous']:.2f} 倍）／全体の平均 連続確保 "
                     f"{r['mean_contiguous']:.2f} 件・ページング {r['mean_paged']:.2f} 件（比 "
                     f"{r['mean_paged'] / r['mean_contiguous']:.2f} 倍、ページングのドレイン {100 * r['drain_paged']:.0f} %）、"
                     f"ページングのプリエンプション {r['preemptions']} 回" for r in rows)


def task3_predictions(rows: list[dict]) -> list[Prediction]:
    """Rows from the larger pool to the smaller one."""
    big, small = rows[0], rows[-1]
    fit = small["pool"] // small["max_model_len"]
    b_big, b_small = (r["busy_paged"] / r["busy_contiguous"] for r in (big, small))
    m_big, m_small = (r["mean_paged"] / r["mean_contiguous"] for r in (big, small))
    why = "リクエストの流れ（長さの中央値、sigma、件数）を変えていれば、流れが違う。2節のセルを既定に戻す"
    return [
        Prediction(f"プール {small['pool']:,} では、連続確保（max_model_len）は同時に {fit} 件までしか入らない",
                   small["peak_contiguous"] == fit, f"最大 {small['peak_contiguous']} 件", why),
        Prediction(f"待ちがある間の比（ページング / 連続確保（max_model_len））は、プールを半分にしても "
                   f"{100 * BUSY_RATIO_DRIFT:.0f} % 以内しか変わらない（どちらの同時リクエスト数もプールにほぼ比例する）",
                   b_big == b_big and b_small == b_small and abs(b_small / b_big - 1) <= BUSY_RATIO_DRIFT,
                   f"比 {b_big:.2f} → {b_small:.2f} 倍",
                   why + "。流れが短いと待ちのある時間が短く、比がぶれる（件数を増やす）"),
        Prediction("全体の平均の比は、どちらのプールでも待ちがある間の比より小さい（ドレインの間は待ちがなく、"
                   "同時リクエスト数はメモリではなく残りのリクエスト数で決まる）",
                   m_big < b_big and m_small < b_small,
                   f"全体の平均 {m_big:.2f}・{m_small:.2f} 倍、待ちがある間 {b_big:.2f}・{b_small:.2f} 倍"
                   f"（ページングのドレイン {100 * big['drain_paged']:.0f} % → {100 * small['drain_paged']:.0f} %）", why),
        Prediction("ページングのプリエンプションが増える", small["preemptions"] > big["preemptions"],
                   f"{big['preemptions']} → {small['preemptions']} 回", why),
    ]


__all__ = ["BUSY_RATIO_DRIFT", "OFF_OVER_ON_GROWTH", "SWEEP_SHARED_LENS", "TASK1_SHARED_LENS", "TASK2_NUM_REQUESTS", "TASK3_POOLS",
           "TTFT_SPREAD_MAX", "sweep_predictions", "sweep_rows", "sweep_table", "task1_predictions", "task1_rows",
           "task1_table", "task2_predictions", "task2_rows", "task2_table", "task3_predictions", "task3_rows",
           "task3_table"]
