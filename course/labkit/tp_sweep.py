"""Lab 7's batch sweep readings (``labs/07_parallelism_lab.ipynb``, 「バッチサイズを変える」), re-exported by
``lab07_explain``::

    b = batch_facts(history); print(batch_reading(history)); print(verdicts([batch_prediction(b)], *loads))

Every row of the sweep also times the same prefill (same prompt length, one prompt; the batch only changes the
decode), so that prefill is the same experiment measured once per row. Its time must agree across the rows:
when a column's slowest row is over ``SAME_EXPERIMENT`` x its fastest (``prefill_spread``), this machine's speed
changed during the sweep. The reading names the row, and the prediction, which compares two rows, prints
判定できません with the candidates the run cannot separate (blind reading 2026-12-07 reviews10 ch07 #3: a row
twice as slow in both TP columns passed unflagged while the load watch saw nothing).
Also here: the constants and the busy-run class that ``lab07_explain`` shares (``SLOW_TP1``, ``Undecided``).
"""
from __future__ import annotations

import math
import statistics

from course.labkit.predictions import UNDECIDED as NOT_DECIDED, Prediction

UNDECIDED = "判定できない（負荷）"
SLOW_TP1 = 1.10        # TP=1 with its threads this much slower than with one rank's: its threads collapsed
PER_CALL_GROWTH = 2.0   # 'hardly depends on size': the per-call time grows less than this for the bytes ratio
SAME_EXPERIMENT = 1.5   # the same prefill's median in two rows: over this ratio, the machine's speed changed


class Undecided(Prediction):
    """A prediction the run cannot decide because the machine was busy (``lab07_explain.undecidable``)."""
    def verdict(self) -> str:
        tail = self.otherwise if self.otherwise.endswith("。") else f"{self.otherwise}。"
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{tail}"


class Unsteady(Prediction):
    """A comparison of two rows of a sweep whose repeated experiment disagreed: 判定できません (``held`` None)."""
    def verdict(self) -> str:
        return f"{NOT_DECIDED}：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


def prefill_columns(history: list[dict], tp: int = 2) -> dict:
    """{TP: {batch: prefill_ms}} for TP=1 and TP=tp: the same prefill experiment, timed in every row."""
    return {k: {r["batch_size"]: r["prefill_ms"] for r in history if r["tp_size"] == k and "prefill_ms" in r}
            for k in (1, tp)}


def odd_rows(history: list[dict], tp: int = 2) -> list[tuple[int, int, float, float]]:
    """(TP, batch, prefill_ms, the column's median) of the row farthest from its column's median, for each
    column whose slowest row is over SAME_EXPERIMENT x its fastest."""
    out = []
    for k, col in prefill_columns(history, tp).items():
        if len(col) > 1 and max(col.values()) > SAME_EXPERIMENT * min(col.values()):
            med = statistics.median(col.values())
            b = max(col, key=lambda x: max(col[x] / med, med / col[x]))
            out.append((k, b, col[b], med))
    return out


def batch_facts(history: list[dict], tp: int = 2) -> dict:
    """The numbers the batch prediction is decided on: TP=tp's decode communication share at the
    smallest and the largest batch, the spread of the prefill share over the rows (the noise gauge), and
    ``prefill_spread``: the largest slowest/fastest ratio of the same prefill's time over the rows."""
    rows = {r["batch_size"]: r for r in history if r["tp_size"] == tp}
    ones = {r["batch_size"]: r for r in history if r["tp_size"] == 1}
    bs, pre = sorted(rows), [r["prefill_comm_share"] for r in rows.values()]
    first, last = rows[bs[0]]["decode_comm_share"], rows[bs[-1]]["decode_comm_share"]
    a, z = rows[bs[0]], rows[bs[-1]]
    comm = [r["decode_ms"] * r["decode_comm_share"] for r in (a, z)]
    other = [r["decode_ms"] * (1 - r["decode_comm_share"]) for r in (a, z)]
    cols = [c for c in prefill_columns(history, tp).values() if len(c) > 1]
    return {"tp": tp, "batch_first": float(bs[0]), "batch_last": float(bs[-1]), "share_first": first,
            "share_last": last, "drop": first - last, "noise": max(pre) - min(pre),
            "comm_growth": comm[1] / comm[0] if comm[0] else math.nan,
            "other_growth": other[1] / other[0] if other[0] else math.nan,
            "tp1_growth": ones[bs[-1]]["decode_ms"] / ones[bs[0]]["decode_ms"],
            "prefill_spread": max((max(c.values()) / min(c.values()) for c in cols), default=1.0),
            # a busy sweep: a load warning, or TP=1 slower than its 1-thread time (``undecidable``)
            "busy": any(r.get("load_warned") for r in history) or any(
                r.get("tp1_own_decode_ms") and r["decode_ms"] > SLOW_TP1 * r["tp1_own_decode_ms"] for r in ones.values())}


def batch_reading(history: list[dict], tp: int = 2) -> str:
    """Decode communication share of TP=tp and TP=1's decode step per batch (``lab07.add_run``), the noise
    gauge, and the same prefill's time per row, naming a row that disagrees with the others (``odd_rows``)."""
    rows = {r["batch_size"]: r for r in history if r["tp_size"] == tp}
    ones = {r["batch_size"]: r for r in history if r["tp_size"] == 1}
    bs, b = sorted(rows), batch_facts(history, tp)
    shares = "・".join(f"{100 * rows[x]['decode_comm_share']:.0f}%" for x in bs)
    text = (f"TP={tp} の Decode の通信の割合（バッチ {'・'.join(map(str, bs))}）: {shares}。"
            f"TP=1 の Decode の1ステップ: バッチ {bs[0]} で {ones[bs[0]]['decode_ms']:.1f} ms、"
            f"バッチ {bs[-1]} で {ones[bs[-1]]['decode_ms']:.1f} ms（{b['tp1_growth']:.1f} 倍）。\n"
            f"揺れの目安（どの行も同じ Prefill の実験。その通信の割合の行ごとの幅）: {100 * b['noise']:.0f} ポイント。\n")
    for k, col in prefill_columns(history, tp).items():
        if col:
            text += (f"同じ Prefill の時間（TP={k}、バッチ {'・'.join(map(str, sorted(col)))} の行）: "
                     + "・".join(f"{col[x]:.1f}" for x in sorted(col)) + " ms。\n")
    for k, x, ms, med in odd_rows(history, tp):
        text += (f"TP={k} のバッチ {x} の行は、同じ Prefill に {ms:.1f} ms かかりました（この列の中央値 {med:.1f} ms の "
                 f"{ms / med:.2f} 倍）。この行は、マシンの速さがほかの行と違うときに測られています。\n")
    return text + (f"バッチ {bs[0]} → {bs[-1]} で、TP={tp} の通信の時間は {b['comm_growth']:.2f} 倍、通信以外の時間"
                   f"（計算など）は {b['other_growth']:.2f} 倍になりました。")


def batch_prediction(b: dict) -> Prediction:
    """The batch sweep's prediction (``batch_facts``): TP=tp's decode communication time per step grows less than
    PER_CALL_GROWTH x while its bytes grow by the batch ratio (each call mostly a per-call cost; blind reading
    2026-12-07d ch07 #2: 'less than half the bytes ratio' could not fail); 「判定できない（負荷）」 on a busy sweep;
    判定できません when the same prefill disagreed over the rows (``prefill_spread``)."""
    ratio = b["batch_last"] / b["batch_first"]
    text = (f"バッチを {b['batch_first']:.0f} から {b['batch_last']:.0f} にしても、TP={b['tp']} の Decode の通信の時間は、"
            f"運ぶバイト数の伸び（{ratio:.0f} 倍）に対して {PER_CALL_GROWTH:.0f} 倍未満しか増えない")
    measured = (f"通信の時間 {b['comm_growth']:.2f} 倍（通信の割合 {100 * b['share_first']:.0f}% → "
                f"{100 * b['share_last']:.0f}%、揺れの目安 {100 * b['noise']:.0f} ポイント）")
    if b.get("busy"):
        return Undecided(text, False, measured, "負荷の警告が出たか、TP=1 が1ランク分のスレッドのときより遅くなった"
                         "実行があります。ほかのプログラムを止め、繰り返しを増やして測り直してください")
    spread = b.get("prefill_spread", 1.0)
    if spread > SAME_EXPERIMENT:
        return Unsteady(text, None, measured + f"、同じ Prefill の時間は行によって最大 {spread:.2f} 倍",
                        f"どの行でも同じ Prefill の時間が、行によって {SAME_EXPERIMENT} 倍を超えて違いました。"
                        "マシンの速さが実行の途中で変わったので、2つの行を比べるこの判定はできません。"
                        "上に ⚠ の負荷の警告がなければ、ほかのプログラムは見えていません。その場合の候補は、"
                        "CPU のクロックの変化（発熱や省電力）、同じホストのほかの VM とのメモリ帯域の取り合い"
                        "（steal には出ません）、その実行で確保したメモリの配置です。この実行では区別できません。"
                        "このセルをもう一度実行してください。")
    return Prediction(text, b["comm_growth"] < PER_CALL_GROWTH, measured,
                      "1回の all-reduce の時間が、このマシンではバイト数とともに伸びています（ソケットの帯域が効く"
                      "大きさです）。または、バッチとともに伸びた計算の分だけ相手のランクを待つ時間が増えました"
                      "（上の通信以外の時間の伸びと比べてください）")


__all__ = ["PER_CALL_GROWTH", "SAME_EXPERIMENT", "SLOW_TP1", "UNDECIDED", "Undecided", "Unsteady", "batch_facts",
           "batch_prediction", "batch_reading", "odd_rows", "prefill_columns"]
