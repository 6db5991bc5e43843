"""Lab 7's readings of its own run: what ``lab07.run_tp_lab``'s numbers show, and its predictions.

Each sentence that states a measured or predicted figure is printed from the data (never typed in
the notebook), and each prediction of the lab is decided by the run (``labkit.predictions``)::

    f = facts(res)                   # the numbers the verdicts are decided on (parsed back)
    print(facts_line(f)); print(verdicts(tp_predictions(f), res["load"], lab07_ping.floor_load(floor)))
    print(ratio_reading(res))        # TP=N's non-communication time / TP=1's step, against the range
                                     # rank 0's work predicts (TP=1 timed on rank 0's threads)
    print(comm_reading(res, floor))  # every rank's record of the all-reduces, beside the bare gloo call
    b = batch_facts(history); print(batch_reading(history)); print(verdicts([batch_prediction(b)], *loads))

The compute ratio: TP=N's non-communication time over TP=1's step. Rank 0 computes its matmul share
(``rank0_share``: 3 of 5 heads at TP=2, its MLP slice, the replicated lm_head) plus TP=1's fixed per-layer time
on one rank's threads, so the ratio's expected range runs from that share to all of TP=1's time on the same
threads (``tp1_own_*``, measured). Above it: not the split of work (candidates named, not separated).
Load: a load warning (before or during the run), or TP=1 with its threads over 10% slower than with one rank's
(``undecidable``), turns timing verdicts and readings into 「判定できない（負荷）」; the notebooks also pass the runs'
``load`` to ``verdicts`` (判定できません on a disturbed run). The GPU contrast is in ``lab07_gpu``.
"""
from __future__ import annotations

import math
import os
import re

from course.labkit.predictions import Prediction
from course.labkit.spread import RETRY, decide as spread_decide
from course.labkit.tp_calls import WAIT_MOSTLY, calls_reading
# the batch sweep and the constants it shares: course.labkit.tp_sweep (re-exported here)
from course.labkit.tp_sweep import (PER_CALL_GROWTH, SAME_EXPERIMENT, SLOW_TP1, UNDECIDED, Undecided, batch_facts,
                                     batch_prediction, batch_reading)

BUSY = "ほかのプログラムが CPU を使っている（負荷の警告を確かめ、繰り返しを増やして測り直す）"


def facts(res: dict, floor: dict | None = None) -> dict:
    """The numbers the lab's predictions are decided on. floor: ``lab07_ping.bare_allreduce_us`` at the decode and
    prefill per-call sizes (the idle two-process all-reduce); its medians decide the per-call prediction."""
    n, calls = res["tp"], res["allreduces_per_step"]
    one, many = res["runs"][1], res["runs"][n]
    own = res.get("tp1_own_decode_ms", one["decode_ms"])
    return {"tp": n, "tp1_decode_ms": one["decode_ms"], "tp1_own_decode_ms": own,
            "load_warned": bool(res.get("load_warned", False)), "tpn_decode_ms": many["decode_ms"],
            "decode_comm_share": many["decode_comm_share"],
            "prefill_comm_share": many["prefill_comm_share"],
            "decode_call_ms": many["decode_comm_ms"] / calls,
            "prefill_call_ms": many["prefill_comm_ms"] / calls,
            "bytes_ratio": res["prefill_allreduce_bytes"] / res["decode_allreduce_bytes"],
            "same_tokens": bool(res["same_tokens"]),
            **{k: many[k] for k in ("decode_comm_share_min", "decode_comm_share_max", "prefill_comm_share_min",
                                    "prefill_comm_share_max") if k in many},
            **({"ping_small_us": floor[min(floor)]["median_us"], "ping_large_us": floor[max(floor)]["median_us"],
                "ping_bytes_ratio": max(floor) / min(floor)} if floor and len(floor) > 1 else {})}


def facts_line(f: dict) -> str:
    """One line with every number of ``facts`` (tests parse it back from the saved notebook)."""
    return "判定に使った値: " + "、".join(
        f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in f.items())


def parse_facts_line(line: str) -> dict:
    """The inverse of ``facts_line``."""
    out = {}
    for key, value in re.findall(r"(\w+)=([^、\s]+)", line.split(": ", 1)[1]):
        out[key] = value == "True" if value in ("True", "False") else float(value)
    out["tp"] = int(out["tp"])
    return out


def undecidable(f: dict) -> str:
    """Why this run's timings cannot decide a mechanism ('' when they can): the load check fired, or
    TP=1 with all its threads was slower than with one rank's threads (its threads waited on each other)."""
    why = []
    if f.get("load_warned"):
        why.append("計測の前か計測のあいだに、上の ⚠ の負荷の警告が出ました")
    if f["tp1_decode_ms"] > SLOW_TP1 * f["tp1_own_decode_ms"]:
        why.append(f"TP=1 が自分の 1 ランク分のスレッドのとき（{f['tp1_own_decode_ms']:.1f} ms）より遅くなりました"
                   f"（{f['tp1_decode_ms']:.1f} ms。スレッドがコアを待っている）")
    return "。また、".join(why)


def _decide(f: dict, p: Prediction) -> Prediction:
    why = undecidable(f)
    if not why:
        return p
    return Undecided(p.text, False, p.measured, f"{why}。ほかのプログラムを止めて測り直してください")


def _share_prediction(f: dict) -> Prediction:
    """Decode's communication share above Prefill's; 判定できません when the repeats' ranges overlap (blind reading
    2026-12-07d ch07 #1: a 5-point gap, the size of the lab's own spread, decided it)."""
    d, p = f["decode_comm_share"], f["prefill_comm_share"]
    d0, d1, p0, p1 = (f.get(f"{k}_comm_share_{m}", v) for k, v in (("decode", d), ("prefill", p)) for m in ("min", "max"))
    rng = f"（繰り返しの幅 Decode {100 * d0:.0f}〜{100 * d1:.0f}%、Prefill {100 * p0:.0f}〜{100 * p1:.0f}%）"
    return spread_decide(d > p, "decode_comm_share_min" in f and d0 <= p1 and p0 <= d1,
                         "Decode のほうが Prefill より、1ステップに占める通信の割合が大きい",
                         f"Decode {100 * d:.0f}%、Prefill {100 * p:.0f}%" + (rng if "decode_comm_share_min" in f else ""),
                         "プロンプトが短いと Prefill の計算も小さくなります。プロンプト長を 256 以上にしてください。" + BUSY, RETRY)


def _per_call_prediction(f: dict, calls: str) -> Prediction:
    """Per-call time grows < PER_CALL_GROWTH x for the bytes ratio: the idle ping's medians when ``facts`` has them
    (blind reading 2026-12-07d ch07 #2: 'less than half the bytes ratio' could not fail), else the run's mean per call."""
    if "ping_small_us" in f:
        a, b = f["ping_small_us"], f["ping_large_us"]
        return Prediction(f"何もしない2プロセスの all-reduce の1回の時間（中央値）は、運ぶバイト数が {f['ping_bytes_ratio']:.0f} 倍"
                          f"になっても {PER_CALL_GROWTH:.0f} 倍未満しか増えない（1回の時間の大半がバイト数によらない）",
                          b < PER_CALL_GROWTH * a, f"中央値 {a:.0f} µs → {b:.0f} µs（{b / a:.2f} 倍）",
                          "このマシンでは、ループバックの受け渡しがバイト数とともに伸びます（1回の固定の時間が短いマシン）")
    a, b = f["decode_call_ms"], f["prefill_call_ms"]
    return _decide(f, Prediction(f"1回の all-reduce の時間は、運ぶバイト数が {f['bytes_ratio']:.0f} 倍になっても "
                                 f"{PER_CALL_GROWTH:.0f} 倍未満しか増えない", b < PER_CALL_GROWTH * a, calls,
                                 "空いたコアがあるとバイト数の分が見えます。時間のかかった回が平均を押し上げることもあります"))


def tp_predictions(f: dict) -> list[Prediction]:
    """The lab's predictions (「予想を確かめる」 and 課題1), decided by ``facts(res)``; the timing ones
    read 「判定できない（負荷）」 on a busy run (``undecidable``)."""
    n = f["tp"]
    best = min(f["tp1_decode_ms"], f["tp1_own_decode_ms"])
    calls = (f"1回あたり Decode {1000 * f['decode_call_ms']:.0f} µs、"
             f"Prefill {1000 * f['prefill_call_ms']:.0f} µs、バイト数の比 {f['bytes_ratio']:.0f} 倍")
    return [
        _decide(f, Prediction(f"このマシンでは、バッチ 1 の Decode は TP={n} のほうが TP=1（速いほうのスレッド数）より遅い",
                   f["tpn_decode_ms"] > best,
                   f"TP=1 {f['tp1_decode_ms']:.1f} ms（1 ランク分のスレッドでは {f['tp1_own_decode_ms']:.1f} ms）、"
                   f"TP={n} {f['tpn_decode_ms']:.1f} ms",
                   "空いているコアが多いマシンでは、TP=N の各プロセスが待たされにくく、重みの読み出しも"
                   "分かれるので速くなることがあります")),
        _decide(f, _share_prediction(f)),
        _per_call_prediction(f, calls),
        Prediction(f"TP={n} の貪欲トークンは TP=1 と同じ（float32）", f["same_tokens"],
                   "一致" if f["same_tokens"] else "不一致",
                   "TP は部分和を all-reduce で足すので、float32 でも足し算の順序が変わり、logit がわずかに"
                   "（float32 の丸め誤差ほど）違います。1位と2位の logit がほぼ同じ位置では、トークンが入れ替わることがあります。"
                   "まずその位置の1位と2位の差を確かめ、差が大きいのに違うときはテスト tests/features を実行してください"),
    ]


def ratio_reading(res: dict) -> str:
    """Why TP=N's non-communication time over TP=1's step differs from 1, with this run's numbers: the range
    that rank 0's work predicts (``res["*_expected_range"]``: rank 0's matmul share to all of TP=1's time on
    rank 0's thread count, measured), then, per phase, whether the measured ratio is above, within or below it."""
    n, (per_rank, _) = res["tp"], res["threads_per_config"][res["tp"]]
    tp1_threads, r0 = res["threads_per_config"][1][0], res["rank0"]
    lo_d, hi_d = res["decode_expected_range"]
    lines = [
        f"TP={n} の通信以外の時間 ÷ TP=1（{tp1_threads} スレッド）の1ステップ: Prefill {res['prefill_compute_ratio']:.2f}、"
        f"Decode {res['decode_compute_ratio']:.2f}。",
        f"ランク 0 が持つもの: {r0['num_heads']} ヘッドのうち {r0['heads']} つ、中間次元の約 1/{n}、複製した lm_head"
        f"（1トークンの行列積の重みの {100 * res['lm_head_share']:.0f}%）。Decode では、TP=1 の {100 * r0['share']:.0f}% の"
        f"行列積を {per_rank} スレッドで計算します。lm_head とサンプリングは TP=1 も同じだけ払います。",
        f"ランク 0 の計算の時間の見込み: 下限は、同じ {per_rank} スレッドの TP=1 の1ステップ（Prefill "
        f"{res['tp1_own_prefill_ms']:.1f} ms、Decode {res['tp1_own_decode_ms']:.1f} ms）に、ランク 0 の行列積の割合"
        f"（Prefill {100 * res['prefill_rank0_share']:.0f}%、Decode {100 * r0['share']:.0f}%）を掛けた時間です"
        "（すべてが行列積のとき）。上限は、その1ステップの時間そのものです（すべてが層ごとの固定の時間のとき）。",
        f"TP=1（{tp1_threads} スレッド）の1ステップで割った比の見込み: Prefill {res['prefill_expected_range'][0]:.2f}〜"
        f"{res['prefill_expected_range'][1]:.2f}、Decode {lo_d:.2f}〜{hi_d:.2f}。スレッドの効き方は測った値です"
        f"（Decode では、{per_rank} スレッドの TP=1 が {tp1_threads} スレッドの TP=1 の {hi_d:.2f} 倍の時間）。"
        "相手のランクを待つ時間は通信に入れて、すでに引いてあります。",
    ]
    why = undecidable(facts(res))
    if why:
        lines.append(f"- {UNDECIDED}：{why}。この実行の比からは原因を判定できません（ほかのプログラムを止めて測り直してください）。")
        return "\n".join(lines)
    for kind in ("Prefill", "Decode"):
        m, (lo, hi) = res[f"{kind.lower()}_compute_ratio"], res[f"{kind.lower()}_expected_range"]
        if m > hi + 0.05:
            lines.append(f"- {kind} {m:.2f} は見込みの上限 {hi:.2f} を超えています。ランク 0 は、同じスレッド数の TP=1 が"
                         "モデル全体を計算するより長くかかっていて、仕事の分け方では説明できません。この計測では原因を"
                         f"分けられません。候補は、{n} つのプロセスのスレッド（PyTorch と gloo）がこのマシンの "
                         f"{os.cpu_count()} コアを分け合うことと、キャッシュの影響です。")
        elif m >= lo - 0.05:
            lines.append(f"- {kind} {m:.2f} は見込み {lo:.2f}〜{hi:.2f} の中です。ランク 0 の仕事の割合（多めのヘッドと"
                         " lm_head）と、測った TP=1 のスレッドの効き方で説明できます。")
        else:
            lines.append(f"- {kind} {m:.2f} は見込みの下限 {lo:.2f} より小さく、ランク 0 が行列積の割合から見込むより速く"
                         "計算しました。TP=1 の測定が遅れた（ほかのプログラムがコアを使っていた）かもしれません。"
                         "負荷の警告を確かめて測り直してください。")
    return "\n".join(lines)


def comm_reading(res: dict, floor: dict | None = None) -> str:
    """Per-call time, every rank's record (``tp_calls``) beside the idle ping (``floor``); busy: no mechanism."""
    f, calls = facts(res), res["allreduces_per_step"]
    dec_b, pre_b = res["decode_allreduce_bytes"] // calls, res["prefill_allreduce_bytes"] // calls
    text = (f"1ステップの通信 ÷ all-reduce の回数: Decode {1000 * f['decode_call_ms']:.0f} µs（{dec_b:,} B）、Prefill "
            f"{1000 * f['prefill_call_ms']:.0f} µs（{pre_b:,} B）（1回あたりの平均で、入力の送信と時間のかかった回を含みます。1回ごとの中央値は下の行）。")
    floor = floor or {}
    if floor:
        text += ("\n何もしない2プロセスの all-reduce（計算なし、" f"{next(iter(floor.values()))['calls']} 回。最後に来たランクの"
                 "中の時間）: " + "、".join(f"{b:,} B で中央値 {floor[b]['median_us']:.0f} µs（p90 {floor[b]['p90_us']:.0f} µs）"
                                           for b in sorted(floor)) + "。")
    else:
        text += "\n何もしない2プロセスの all-reduce（lab07_ping.bare_allreduce_us）を測ると、そろってからの受け渡しと比べられます。"
    ping_load = (next(iter(floor.values())).get("load") if floor else None) or {}     # lab07_ping.floor_load
    steal = (ping_load.get("during") or {}).get("steal_cores")
    why = "。また、".join(w for w in (undecidable(f), "何もしない2プロセスの all-reduce を測るあいだに、ほかのプログラムが "
                                   "CPU を使っていました" if ping_load.get("disturbed") else "") if w)
    busy = (f"{UNDECIDED}：{why}。ほかのプログラムがコアを使っていたかもしれず、何もしない2プロセスの all-reduce も"
            "別の時刻に測ったので、この記録からは all-reduce の時間の原因を判定できません（ほかのプログラムを止めて"
            "測り直してください）。") if why else ""
    for kind, size in (("Decode", dec_b), ("Prefill", pre_b)):
        s = res.get("calls", {}).get(kind.lower())
        if s and s["calls"]:
            text += "\n" + calls_reading(s, floor.get(size, {}).get("median_us"), kind, busy,
                                          floor.get(size, {}).get("p90_us"), steal)
    return text


def tp_dp_reading(rows: list[dict]) -> str:
    """The simulator's figures the lab reads (TP=4 vs TP=8 on one replica; 8 GPUs two ways)."""
    at = {(r["num_gpus"], r["tp"]): r for r in rows}
    lines = []
    if (4, 4) in at and (8, 8) in at:
        lines.append(f"1つのレプリカで処理する行の TPOT（予測）: TP=4 {at[4, 4]['tpot_ms']:.1f} ms"
                     f" → TP=8 {at[8, 8]['tpot_ms']:.1f} ms")
    if (8, 8) in at and (8, 4) in at:
        lines.append("GPU 8 枚の出力 tok/s/GPU（予測）: "
                     f"TP=8 {at[8, 8]['output_tok_s_per_gpu']:.1f}、"
                     f"TP=4 × DP=2 {at[8, 4]['output_tok_s_per_gpu']:.1f}"
                     + (f"、TP=1 × DP=8 {at[8, 1]['output_tok_s_per_gpu']:.1f}（TP=8 はその "
                        f"{at[8, 8]['output_tok_s_per_gpu'] / at[8, 1]['output_tok_s_per_gpu']:.2f} 倍、差は "
                        f"{at[8, 8]['output_tok_s_per_gpu'] - at[8, 1]['output_tok_s_per_gpu']:.0f}）"
                        if math.isfinite(at.get((8, 1), {}).get("output_tok_s_per_gpu") or math.nan)
                        else ""))
    return "\n".join(lines)


__all__ = ["PER_CALL_GROWTH", "SAME_EXPERIMENT", "SLOW_TP1", "UNDECIDED", "Undecided", "WAIT_MOSTLY", "batch_facts", "batch_prediction", "batch_reading", "comm_reading",
           "facts", "facts_line", "parse_facts_line", "undecidable", "ratio_reading", "tp_dp_reading", "tp_predictions"]
