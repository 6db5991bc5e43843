"""Lab 7's readings of its own run: what ``lab07.run_tp_lab``'s numbers show, and its predictions.

Each sentence that states a measured or predicted figure is printed from the data (never typed in
the notebook), and each prediction of the lab is decided by the run (``labkit.predictions``)::

    f = facts(res)                   # the numbers the verdicts are decided on (parsed back)
    print(facts_line(f)); print(verdicts(tp_predictions(f)))
    print(ratio_reading(res))        # why TP=N's non-communication time / TP=1's step is above 1
    print(batch_reading(history))    # communication share per decode batch
    print(tp_dp_reading(rows))       # the simulator's TPOT and tok/s/GPU quoted by the lab

Why the ratio exceeds 1 (the lab's main explanation): a fixed per-layer time is paid once by TP=1
and once by TP=N's rank 0 (the other ranks run at the same time), and waiting for another rank is
inside the subtracted communication time, so neither can raise it. What only TP=N has: rank 0
alone computes the replicated lm_head and samples, with 1/N of TP=1's threads; N processes (and
gloo's threads) share the cores; after each of the 2 x layers waits a process is scheduled again.
"""
from __future__ import annotations

import os
import re

from course.labkit.predictions import Prediction

BUSY = "ほかのプログラムが CPU を使っている（負荷の警告を確かめ、繰り返しを増やして測り直す）"


def facts(res: dict) -> dict:
    """The numbers the lab's predictions are decided on."""
    n, calls = res["tp"], res["allreduces_per_step"]
    one, many = res["runs"][1], res["runs"][n]
    return {"tp": n, "tp1_decode_ms": one["decode_ms"], "tpn_decode_ms": many["decode_ms"],
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


def tp_predictions(f: dict) -> list[Prediction]:
    """The lab's predictions (「予想を確かめる」 and 課題1), decided by ``facts(res)``."""
    n = f["tp"]
    calls = (f"1回あたり Decode {1000 * f['decode_call_ms']:.0f} µs、"
             f"Prefill {1000 * f['prefill_call_ms']:.0f} µs、バイト数の比 {f['bytes_ratio']:.0f} 倍")
    return [
        Prediction(f"このマシンでは、バッチ 1 の Decode は TP={n} のほうが TP=1 より遅い",
                   f["tpn_decode_ms"] > f["tp1_decode_ms"],
                   f"TP=1 {f['tp1_decode_ms']:.1f} ms、TP={n} {f['tpn_decode_ms']:.1f} ms",
                   "TP=1 は1つのプロセスで多くのスレッドを使うので、ほかのプログラムがコアを"
                   "使っていると大きく遅れます（負荷の警告を確かめて測り直す）。空いているコアが"
                   "多いマシンでは、TP=N の各プロセスも待たされにくくなります"),
        Prediction("Decode のほうが Prefill より、1ステップに占める通信の割合が大きい",
                   f["decode_comm_share"] > f["prefill_comm_share"],
                   f"Decode {100 * f['decode_comm_share']:.0f}%、"
                   f"Prefill {100 * f['prefill_comm_share']:.0f}%",
                   "プロンプトが短いと Prefill の計算も小さくなります。プロンプト長を 256 以上に"
                   "してください。" + BUSY),
        Prediction("1回の all-reduce の時間は、運ぶバイト数の比の半分も増えない（線の速さより待ちで決まる）",
                   f["prefill_call_ms"] < f["decode_call_ms"] * f["bytes_ratio"] / 2, calls,
                   "プロンプトが長く、プロセスがすぐ動ける（空いたコアがある）と、バイト数の分の"
                   "時間が見えてきます"),
        Prediction(f"TP={n} の貪欲トークンは TP=1 と同じ（float32）", f["same_tokens"],
                   "一致" if f["same_tokens"] else "不一致",
                   "float32 以外の dtype か、エンジンの TP に問題があります。"
                   "テスト tests/features を実行してください"),
    ]


def ratio_reading(res: dict) -> str:
    """Why TP=N's non-communication time over TP=1's step is above 1, with this run's numbers."""
    n, (per_rank, _) = res["tp"], res["threads_per_config"][res["tp"]]
    tp1_threads = res["threads_per_config"][1][0]
    if res["decode_compute_ratio"] > 1:
        lead = ("層ごとの固定の時間（Python と演算の呼び出し）は、TP=1 も TP=N のランク 0 も1回ずつ"
                "払う（ほかのランクは同時に動く）ので、この比では打ち消し合います。相手のランクを"
                "待つ時間は通信に入り、すでに引いてあります。1 を超えた分は TP=N にだけある時間です:")
    else:
        lead = ("Decode の比が 1 以下なので、この実行では TP=N にだけある時間は目立ちません。"
                "TP=1 は1つのプロセスで多くのスレッドを使うので、ほかのプログラムがコアを使って"
                "いると大きく遅れ、比が小さく出ます（負荷の警告を確かめて測り直してください）。"
                "TP=N にだけある時間は次のとおりです:")
    return "\n".join([
        f"TP={n} の通信以外の時間 ÷ TP=1 の1ステップ: Prefill {res['prefill_compute_ratio']:.2f}、"
        f"Decode {res['decode_compute_ratio']:.2f}。",
        lead,
        f"- ランク 0 だけが lm_head（1トークンの行列積の重みの {100 * res['lm_head_share']:.0f}%、"
        f"各ランクに複製）とサンプリングを {per_rank} スレッドで計算します"
        f"（TP=1 は {tp1_threads} スレッド）。",
        f"- {n} プロセスと gloo のスレッドが、このマシンの {os.cpu_count()} コアを取り合います。",
        f"- 1ステップに {res['allreduces_per_step']} 回待つたびに、プロセスがもう一度 CPU に"
        "載るまでの時間と、冷えたキャッシュの時間がかかります。",
    ])


def comm_reading(res: dict) -> str:
    """The all-reduce time per call: on a CPU mostly waiting for the other process, not the link."""
    f, calls = facts(res), res["allreduces_per_step"]
    return (f"1回の all-reduce（と入力の送信）あたり: Decode {1000 * f['decode_call_ms']:.0f} µs"
            f"（{res['decode_allreduce_bytes'] // calls:,} B）、"
            f"Prefill {1000 * f['prefill_call_ms']:.0f} µs"
            f"（{res['prefill_allreduce_bytes'] // calls:,} B）。"
            "この時間の大半は、相手のプロセスが CPU に載って同じ all-reduce に来るまで待つ時間で、"
            "線（ソケット）の速さではありません。")


def batch_reading(history: list[dict], tp: int = 2) -> str:
    """Decode communication share of TP=tp and TP=1's decode step per batch (``lab07.add_run``)."""
    rows = {r["batch_size"]: r for r in history if r["tp_size"] == tp}
    ones = {r["batch_size"]: r for r in history if r["tp_size"] == 1}
    bs = sorted(rows)
    shares = "・".join(f"{100 * rows[b]['decode_comm_share']:.0f}%" for b in bs)
    return (f"TP={tp} の Decode の通信の割合（バッチ {'・'.join(map(str, bs))}）: {shares}。"
            f"TP=1 の Decode の1ステップ: バッチ {bs[0]} で {ones[bs[0]]['decode_ms']:.1f} ms、"
            f"バッチ {bs[-1]} で {ones[bs[-1]]['decode_ms']:.1f} ms。")


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
                     f"TP=4 × DP=2 {at[8, 4]['output_tok_s_per_gpu']:.1f}")
    return "\n".join(lines)


__all__ = ["batch_reading", "comm_reading", "facts", "facts_line", "parse_facts_line",
           "ratio_reading", "tp_dp_reading", "tp_predictions"]
