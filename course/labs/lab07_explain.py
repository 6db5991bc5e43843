"""Lab 7's readings of its own run: what ``lab07.run_tp_lab``'s numbers show, and its predictions.

Each sentence that states a measured or predicted figure is printed from the data (never typed in
the notebook), and each prediction of the lab is decided by the run (``labkit.predictions``)::

    f = facts(res)                   # the numbers the verdicts are decided on (parsed back)
    print(facts_line(f)); print(verdicts(tp_predictions(f)))
    print(ratio_reading(res))        # TP=N's non-communication time / TP=1's step, against what
                                     # rank 0's share of the matmuls predicts
    print(comm_reading(res, floor))  # time per all-reduce, beside the bare gloo call (lab07_ping)
    b = batch_facts(history); print(batch_reading(history)); print(batch_prediction(b).verdict())
    print(tp_dp_reading(rows))       # the simulator's TPOT and tok/s/GPU quoted by the lab

The compute ratio (the lab's main explanation): a fixed per-layer time is paid once by TP=1 and once
by TP=N's rank 0 (the other ranks run at the same time), and waiting for another rank is inside the
subtracted communication time, so neither can raise it. Rank 0's share of the matmuls can: it holds
more heads on an uneven split (3 of 5 for TP=2), its slice of the MLP and the whole replicated
lm_head, with 1/N of TP=1's threads; ``lab07.rank0_share`` gives the ratio this alone predicts with
perfectly scaling threads (about 1.3 for decode on the default model). A measured ratio above that
is time rank 0 loses to the other processes while computing (N processes and gloo's threads share
few cores) and cold caches; below 1 means TP=1's threads did not scale (small matrices) or load.

Load: when the load check fired, or TP=1 with its threads was more than 10% slower than TP=1 with one
rank's threads (OpenMP threads waiting for a descheduled one), the timing verdicts print 「判定できない
（負荷）」 instead of naming a mechanism (``undecidable``). The GPU contrast is in ``lab07_gpu``.
"""
from __future__ import annotations

import math
import os
import re

from course.labkit.predictions import Prediction

UNDECIDED = "判定できない（負荷）"
SLOW_TP1 = 1.10        # TP=1 with its threads this much slower than with one rank's: its threads collapsed


class Undecided(Prediction):
    """A prediction the run cannot decide because the machine was busy (``undecidable``)."""

    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"

BUSY = "ほかのプログラムが CPU を使っている（負荷の警告を確かめ、繰り返しを増やして測り直す）"


def facts(res: dict) -> dict:
    """The numbers the lab's predictions are decided on."""
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
            "same_tokens": bool(res["same_tokens"])}


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
        why.append("計測の直前に負荷の警告が出ました")
    if f["tp1_decode_ms"] > SLOW_TP1 * f["tp1_own_decode_ms"]:
        why.append(f"TP=1 が自分の 1 ランク分のスレッドのとき（{f['tp1_own_decode_ms']:.1f} ms）より遅くなりました"
                   f"（{f['tp1_decode_ms']:.1f} ms。スレッドがコアを待っている）")
    return "、".join(why)


def _decide(f: dict, p: Prediction) -> Prediction:
    why = undecidable(f)
    if not why:
        return p
    return Undecided(p.text, False, p.measured, f"{why}。ほかのプログラムを止めて測り直してください")


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
        _decide(f, Prediction("Decode のほうが Prefill より、1ステップに占める通信の割合が大きい",
                   f["decode_comm_share"] > f["prefill_comm_share"],
                   f"Decode {100 * f['decode_comm_share']:.0f}%、"
                   f"Prefill {100 * f['prefill_comm_share']:.0f}%",
                   "プロンプトが短いと Prefill の計算も小さくなります。プロンプト長を 256 以上に"
                   "してください。" + BUSY)),
        _decide(f, Prediction("1回の all-reduce の時間は、運ぶバイト数の比の半分も増えない",
                   f["prefill_call_ms"] < f["decode_call_ms"] * f["bytes_ratio"] / 2, calls,
                   "プロンプトが長く、プロセスがすぐ動ける（空いたコアがある）と、バイト数の分の"
                   "時間が見えてきます")),
        Prediction(f"TP={n} の貪欲トークンは TP=1 と同じ（float32）", f["same_tokens"],
                   "一致" if f["same_tokens"] else "不一致",
                   "float32 以外の dtype か、エンジンの TP に問題があります。"
                   "テスト tests/features を実行してください"),
    ]


def ratio_reading(res: dict) -> str:
    """Why TP=N's non-communication time over TP=1's step differs from 1, with this run's numbers:
    first what rank 0's share of the matmuls alone predicts (``res["*_expected_ratio"]``), then, per
    phase, whether the measured ratio is above that, within it, or below 1."""
    n, (per_rank, _) = res["tp"], res["threads_per_config"][res["tp"]]
    tp1_threads, r0 = res["threads_per_config"][1][0], res["rank0"]
    lines = [
        f"TP={n} の通信以外の時間 ÷ TP=1 の1ステップ: Prefill {res['prefill_compute_ratio']:.2f}、"
        f"Decode {res['decode_compute_ratio']:.2f}。",
        f"行列積の量だけから見込んだ比: Prefill {res['prefill_expected_ratio']:.2f}、"
        f"Decode {res['decode_expected_ratio']:.2f}。ランク 0 は {r0['num_heads']} ヘッドのうち "
        f"{r0['heads']} つ、中間次元の約 1/{n}、各ランクに複製した lm_head（1トークンの行列積の重みの "
        f"{100 * res['lm_head_share']:.0f}%）を持ち、サンプリングもランク 0 だけがします。Decode では TP=1 の "
        f"{100 * r0['share']:.0f}% の行列積を {per_rank} スレッドで計算します（TP=1 は {tp1_threads} スレッド）。"
        "見込みはスレッドが理想どおりに効くとした値です。層ごとの固定の時間（Python と演算の呼び出し）は "
        "TP=1 もランク 0 も1回ずつ払うので、比を 1 に近づけます。相手のランクを待つ時間は通信に入り、"
        "すでに引いてあります。",
    ]
    why = undecidable(facts(res))
    if why:
        lines.append(f"- {UNDECIDED}：{why}。この実行の比からは原因を判定できません（ほかのプログラムを止めて測り直してください）。")
        return "\n".join(lines)
    for kind in ("Prefill", "Decode"):
        m, e = res[f"{kind.lower()}_compute_ratio"], res[f"{kind.lower()}_expected_ratio"]
        if m < 1:
            lines.append(f"- {kind} {m:.2f} は 1 より小さく、TP={n} にだけある時間は見えていません。TP=1 の "
                         f"{tp1_threads} スレッドが理想どおりには速くならない（行列が小さい）か、ほかのプログラムが"
                         "コアを使っていて多くのスレッドを使う TP=1 が遅れたためです（負荷の警告を確かめてください）。")
        elif m <= e + 0.05:
            lines.append(f"- {kind} {m:.2f} は見込み {e:.2f} 以内です。ランク 0 の仕事の多さ（多めのヘッドと "
                         "lm_head）とスレッドの少なさで説明できます。")
        else:
            lines.append(f"- {kind} {m:.2f} は見込み {e:.2f} を超えています。超えた分は、計算中にほかのプロセス"
                         f"（相手のランクと gloo のスレッド）に CPU を取られる時間と、キャッシュが温まっていない（コールドキャッシュ）ことによる遅れです（{n} "
                         f"プロセスが、このマシンの {os.cpu_count()} コアを取り合います）。")
    return "\n".join(lines)


def comm_reading(res: dict, floor: dict | None = None) -> str:
    """The time per all-reduce call, and with ``floor`` (``lab07_ping.bare_allreduce_us`` for the
    same byte sizes) how much of it is gloo's own time and how much is waiting for the peer."""
    f, calls = facts(res), res["allreduces_per_step"]
    dec_b, pre_b = res["decode_allreduce_bytes"] // calls, res["prefill_allreduce_bytes"] // calls
    dec_us = 1000 * f["decode_call_ms"]
    text = (f"1回の all-reduce（と入力の送信）あたり: Decode {dec_us:.0f} µs（{dec_b:,} B）、"
            f"Prefill {1000 * f['prefill_call_ms']:.0f} µs（{pre_b:,} B）。")
    if not floor or dec_b not in floor:
        return text + ("そのうち gloo 自体の時間がどれだけかは、何もしない2プロセスの all-reduce"
                       "（lab07_ping.bare_allreduce_us）と比べるとわかります。")
    fd = floor[dec_b]["median_us"]
    sizes = "、".join(f"{b:,} B で {floor[b]['median_us']:.0f} µs（p90 {floor[b]['p90_us']:.0f} µs）"
                      for b in sorted(floor))
    text += (f"\n何もしない2プロセスの all-reduce（計算なし、{floor[dec_b]['calls']} 回の中央値）: {sizes}。"
             "これが gloo の1回ごとの時間（2つのプロセスの間で CPU を受け渡す時間を含む）です。")
    text += _growth(res, floor, dec_b, pre_b)
    wait = dec_us - fd
    if wait >= 0.5 * dec_us:
        return text + (f"\nDecode の1回 {dec_us:.0f} µs のうち、これを超える {wait:.0f} µs"
                       f"（{100 * wait / dec_us:.0f}%）は、相手のランクが同じ all-reduce に来るまで待つ時間"
                       "（と入力の送信）で、1回の時間の大半です。ループバック通信（ソケット）の帯域の分ではありません。")
    if wait > 0:
        return text + (f"\nDecode の1回 {dec_us:.0f} µs のうち、相手のランクを待つ時間（と入力の送信）は "
                       f"{wait:.0f} µs（{100 * wait / dec_us:.0f}%）で、1回の時間の大半は gloo 自体の時間です。")
    return text + (f"\nDecode の1回 {dec_us:.0f} µs は、何もしない all-reduce と同じくらいかそれより短く、"
                   "相手のランクを待つ時間は見えていません（何もしない all-reduce を測ったときのほうが"
                   "マシンが混んでいたかもしれません。負荷を確かめて測り直してください）。")


def _growth(res: dict, floor: dict, dec_b: int, pre_b: int) -> str:
    """From decode to prefill: gloo's own time per call against the byte ratio, and the rest of the call
    (waiting for the peer rank, which computes meanwhile) against TP=N's non-communication time."""
    if pre_b not in floor or pre_b == dec_b:
        return ""
    f, two = facts(res), res["runs"][res["tp"]]
    gloo = floor[pre_b]["median_us"] / floor[dec_b]["median_us"]
    waits = [1000 * f[f"{k}_call_ms"] - floor[b]["median_us"] for k, b in (("decode", dec_b), ("prefill", pre_b))]
    comp = (two["prefill_ms"] - two["prefill_comm_ms"]) / (two["decode_ms"] - two["decode_comm_ms"])
    out = (f"\nDecode から Prefill で、gloo 自体の1回の時間は {gloo:.1f} 倍（運ぶバイト数は {pre_b / dec_b:.0f} 倍）"
           f"{'で、バイト数ほどには増えません' if gloo < pre_b / dec_b / 2 else 'で、バイト数とともに増えています'}。")
    if min(waits) <= 0:
        return out + "1回の残り（相手を待つ時間）は片方で見えていないので、その伸びは比べられません。"
    w = waits[1] / waits[0]
    near = 0.5 <= w / comp <= 2
    return out + (f"1回の残り（相手のランクが計算を終えるのを待つ時間と入力の送信）は {w:.1f} 倍、TP={res['tp']} の"
                  f"通信以外の時間（計算）は {comp:.1f} 倍で、" + ("待つ時間は相手の計算とほぼ一緒に伸びています。"
                  if near else "待つ時間の伸びは計算の伸びと大きく違います（負荷の変化や、待ち以外の時間を疑ってください）。"))


def batch_facts(history: list[dict], tp: int = 2) -> dict:
    """The numbers the batch prediction is decided on: TP=tp's decode communication share at the
    smallest and the largest batch, and the spread of the prefill share over the rows (the same
    prefill experiment in every row, so its spread gauges this machine's noise)."""
    rows = {r["batch_size"]: r for r in history if r["tp_size"] == tp}
    ones = {r["batch_size"]: r for r in history if r["tp_size"] == 1}
    bs, pre = sorted(rows), [r["prefill_comm_share"] for r in rows.values()]
    first, last = rows[bs[0]]["decode_comm_share"], rows[bs[-1]]["decode_comm_share"]
    a, z = rows[bs[0]], rows[bs[-1]]
    comm = [r["decode_ms"] * r["decode_comm_share"] for r in (a, z)]
    other = [r["decode_ms"] * (1 - r["decode_comm_share"]) for r in (a, z)]
    return {"tp": tp, "batch_first": float(bs[0]), "batch_last": float(bs[-1]), "share_first": first,
            "share_last": last, "drop": first - last, "noise": max(pre) - min(pre),
            "comm_growth": comm[1] / comm[0] if comm[0] else math.nan,
            "other_growth": other[1] / other[0] if other[0] else math.nan,
            "tp1_growth": ones[bs[-1]]["decode_ms"] / ones[bs[0]]["decode_ms"],
            # a busy sweep: a load warning, or TP=1 slower than its 1-thread time (``undecidable``)
            "busy": any(r.get("load_warned") for r in history) or any(
                r.get("tp1_own_decode_ms") and r["decode_ms"] > SLOW_TP1 * r["tp1_own_decode_ms"] for r in ones.values())}


def batch_reading(history: list[dict], tp: int = 2) -> str:
    """Decode communication share of TP=tp and TP=1's decode step per batch (``lab07.add_run``), and
    the noise gauge (the spread of the prefill column, the same experiment in every row)."""
    rows = {r["batch_size"]: r for r in history if r["tp_size"] == tp}
    ones = {r["batch_size"]: r for r in history if r["tp_size"] == 1}
    bs, b = sorted(rows), batch_facts(history, tp)
    shares = "・".join(f"{100 * rows[x]['decode_comm_share']:.0f}%" for x in bs)
    pre_ms = [rows[x]["prefill_ms"] for x in bs if "prefill_ms" in rows[x]]
    spread = f"（Prefill の時間は {min(pre_ms):.1f}〜{max(pre_ms):.1f} ms）" if pre_ms else ""
    return (f"TP={tp} の Decode の通信の割合（バッチ {'・'.join(map(str, bs))}）: {shares}。"
            f"TP=1 の Decode の1ステップ: バッチ {bs[0]} で {ones[bs[0]]['decode_ms']:.1f} ms、"
            f"バッチ {bs[-1]} で {ones[bs[-1]]['decode_ms']:.1f} ms（{b['tp1_growth']:.1f} 倍）。\n"
            f"揺れの目安（どの行も同じ Prefill の実験。その通信の割合の行ごとの幅）: "
            f"{100 * b['noise']:.0f} ポイント{spread}。\n"
            f"バッチ {bs[0]} → {bs[-1]} で、TP={tp} の通信の時間は {b['comm_growth']:.2f} 倍、通信以外の時間（計算など）は "
            f"{b['other_growth']:.2f} 倍になりました。")


NOISE_MAX = 0.10      # a noise gauge wider than this decides nothing (a wide gauge would pass any drop)


def batch_prediction(b: dict) -> Prediction:
    """The lab's prediction for the batch sweep, decided by ``batch_facts``; 「判定できない（負荷）」 when
    the noise gauge is wider than NOISE_MAX or a run of the sweep was busy."""
    cls = Undecided if b["noise"] > NOISE_MAX or b.get("busy") else Prediction
    why = ("負荷の警告が出たか、TP=1 が1ランク分のスレッドのときより遅くなった実行があり、" if b.get("busy") else
           f"揺れの目安が {100 * NOISE_MAX:.0f} ポイントを超えていて、") + "下がったかどうかを決められません。" \
        "ほかのプログラムを止め、繰り返しを増やして測り直してください" if cls is Undecided else None
    return cls(
        f"バッチを {b['batch_first']:.0f} から {b['batch_last']:.0f} にしても、TP={b['tp']} の Decode の"
        "通信の割合は、測定の揺れを超えるほどには下がらない",
        b["drop"] <= b["noise"],
        f"通信の割合 {100 * b['share_first']:.0f}% → {100 * b['share_last']:.0f}%"
        f"（{100 * b['drop']:.0f} ポイント下がった）、揺れの目安 {100 * b['noise']:.0f} ポイント",
        why or ("相手のランクがすぐ動ける（空いたコアがある）マシンでは、通信の時間が計算ほどには増えず、"
                "通信の割合が下がります（上の行の2つの伸び）。揺れが小さく出た実行かもしれないので、繰り返しを"
                "増やして測り直してください"))


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


__all__ = ["UNDECIDED", "Undecided", "batch_facts", "batch_prediction", "batch_reading", "comm_reading", "facts",
           "facts_line", "parse_facts_line", "undecidable",
           "ratio_reading", "tp_dp_reading", "tp_predictions"]
