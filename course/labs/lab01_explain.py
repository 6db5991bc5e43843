"""Lab 1's readings (課題4, 課題6 and the lesson's decode split): what the measured numbers show, and the
tasks' predictions decided by the run (``course.labkit.predictions``; the sweep's, 課題3 and 課題5, are in
``lab01_sweep``)::

    print(first_gap_reading(together)); print(verdicts(late_long_predictions(together, late), together["load"], late["load"]))
    print(shape_reading(shapes)); print(verdicts(shape_predictions(shapes["rows"]), *shapes["loads"]))   # lab01_shapes

課題6's "more layers, longer TPOT" holds only when the two shapes' repeats do not overlap
(``course.labkit.spread``); within the noise its verdicts read 判定できません.
"""
from __future__ import annotations

import statistics

from course.labkit.predictions import UNDECIDED, Prediction
from course.labkit.spread import RETRY, decide, order, spread_text

SPIKE_SHARE, SPIKE_SHARE_TEXT = 0.25, "4分の1"   # 課題4: TPOT's rise against ITL max's rise
LONGER = 1.1   # 課題6: the shape with more layers is at least 10% slower (beyond the repeats' ranges)
BUSY = "ほかのプログラムが CPU を使っている（→ 負荷の警告を確かめ、繰り返しを増やして測り直す）"


# ---------------------------------------------------------------- 課題4: a late long prompt
def first_gaps(m: dict) -> dict:
    """From ``measure_lab``'s runs (requests that are not the late one): the first gap after each
    request's first token, the later gaps (medians, ms), and in how many runs the longest gap was a first one."""
    first, later, at_first = [], [], 0
    for run in m.get("runs", []):
        best = (0.0, False)
        for r in (x for x in run["requests"] if not x.get("late")):
            t = r["token_times_ms"]
            gaps = [b - a for a, b in zip(t, t[1:])]
            if gaps:
                first.append(gaps[0])
                later += gaps[1:]
                best = max(best, (max(gaps), max(gaps) == gaps[0]))
        at_first += best[1]
    if not first:
        return {}
    return {"first_ms": statistics.median(first), "later_ms": statistics.median(later) if later else float("nan"),
            "max_at_first": at_first, "runs": len(m["runs"])}


def first_gap_reading(m: dict) -> str:
    g = first_gaps(m)
    if not g:
        return ""
    return (f"Prefill 直後の最初のトークン間隔 {g['first_ms']:.1f} ms（中央値）、その後の間隔 {g['later_ms']:.1f} ms"
            f"（中央値）。ITL 最大が最初の間隔だった実行: {g['runs']} 回中 {g['max_at_first']} 回")


def late_long_predictions(together: dict, late: dict) -> list[Prediction]:
    """課題4's predictions, decided by two ``measure_lab`` results: all at once, and a late long prompt."""
    t_tpot, t_max = together["tpot_ms"], together["max_itl_ms"]
    l_tpot, l_max = late["tpot_ms"], late["max_itl_ms"]
    g = first_gaps(together)
    out_len = together.get("output_len", 32)
    rise, spike = l_tpot - t_tpot, l_max - t_tpot
    first = (f"いちばん長い間隔は Prefill 直後の最初の間隔でした（{g['first_ms']:.1f} ms、その後は "
             f"{g['later_ms']:.1f} ms）。最初の Decode ステップがこのマシンでは特に遅い。"
             if g and 2 * g["max_at_first"] > g["runs"] else "")
    return [
        Prediction("「一斉に」では ITL 最大が TPOT の 2 倍以内", t_max <= 2 * t_tpot,
                   f"ITL 最大 {t_max:.1f} ms、TPOT {t_tpot:.1f} ms", first + BUSY),
        Prediction("遅れて長いプロンプトが届くと、ITL 最大が「一斉に」の TPOT の 3 倍以上", l_max >= 3 * t_tpot,
                   f"ITL 最大 {l_max:.1f} ms、「一斉に」の TPOT {t_tpot:.1f} ms",
                   "このマシンでは長いプロンプトの Prefill が速い（コアが多い、GPU）。遅れて届く長さを増やす"),
        Prediction(f"TPOT の中央値の増え方は、ITL 最大の跳ね上がり（ITL 最大 − 「一斉に」の TPOT）の"
                   f"{SPIKE_SHARE_TEXT}未満にとどまる（1回の停止は、出力の間隔の数で割って薄められる）",
                   spike > 0 and rise < SPIKE_SHARE * spike,
                   f"TPOT {t_tpot:.1f} → {l_tpot:.1f} ms（{rise:+.1f} ms）、跳ね上がり {spike:.1f} ms"
                   f"（その {100 * rise / spike:.0f}%。停止を間隔の数で割ると {spike:.1f} ÷ {out_len - 1} = "
                   f"{spike / max(out_len - 1, 1):.1f} ms）" if spike > 0 else
                   f"TPOT {t_tpot:.1f} → {l_tpot:.1f} ms、ITL 最大 {l_max:.1f} ms（跳ね上がりなし）",
                   "①停止が Decode の1ステップの数倍しかない（Prefill が速い。→ 遅れて届く長さを長くする）"
                   "②遅れたリクエストが加わった後の Decode の1ステップが大きく重くなった（CPU では文脈の長い"
                   "1件が別のグループになり、各層の Attention の呼び出しが1回増える。→ 遅れて届く長さを短くして"
                   "比べる）③" + BUSY),
    ]


# ---------------------------------------------------------------- the lesson: one decode step taken apart
def decode_split_reading(tpot_ms: float, step_bytes: float, bandwidth: float) -> str:
    """One request's decode step (batch 1) split as TPOT ~ (bytes read per step / bandwidth) + the rest.
    The read time is what the step's bytes take at the measured bandwidth; it bounds neither side. The
    matrix products can run below that bandwidth (their extra time lands in the rest) and weights kept in
    the CPU's cache read faster. So the rest is not only Python and small calls, and the reading names
    no split of the rest: lab 課題6 times the Linear layers alone."""
    read_ms = step_bytes / bandwidth * 1e3
    share = min(read_ms / tpot_ms, 1.0)
    head = (f"1ステップで読むバイト数 {step_bytes / 1e6:.0f} MB ÷ このマシンの帯域 {bandwidth / 1e9:.1f} GB/s ="
            f" 読むだけなら {read_ms:.1f} ms。TPOT {tpot_ms:.1f} ms のうち、帯域どおりに読んだ場合の時間は"
            f" {100 * share:.0f}%、残りは {100 * (1 - share):.0f}% です。")
    if share < 0.5:
        return head + ("このマシンでは、帯域どおりに読めたとすると、読む時間は Decode の1ステップの半分に届きません。"
                       "残りには、Python の処理や小さな演算の呼び出しのほか、行列積が帯域どおりに進まない分も"
                       "入ります。その内訳はこの計算では分かりません（ラボの課題6で Linear 層だけを測ります）。"
                       "GPU で大きなモデルを動かすと、逆に読む時間が主になります。")
    return head + ("このマシンでは、帯域どおりに読んだ時間だけで Decode の1ステップの半分以上です"
                   "（GPU で大きなモデルを動かすときと同じ形です）。")


def attention_time_reading(rows: list[dict]) -> str:
    """Lesson §2: the prefill's attention in FLOPs and in time. Each row: n (prompt tokens), ttft_ms (median),
    flop_share (attention's share of the step's FLOPs), attn_ms (lab01_shapes.attention_ms, all layers). The
    last two rows are compared: when the time per token without attention does not grow while the prefill got
    slower per token, the slowdown comes from attention (blind reading reviews11 ch01 #1: the lesson had read
    a FLOP share as a time share and ruled attention out)."""
    lines = [f"プロンプト {r['n']} トークン: Attention は計算量の {100 * r['flop_share']:.0f}%、"
             f"時間では {r['attn_ms']:.1f} ms で TTFT 中央値 {r['ttft_ms']:.1f} ms の {100 * r['attn_ms'] / r['ttft_ms']:.0f}%"
             for r in rows]
    a, b = rows[-2], rows[-1]
    per = [1000 * r["ttft_ms"] / r["n"] for r in (a, b)]                      # µs per token, all of it
    attn = [1000 * r["attn_ms"] / r["n"] for r in (a, b)]                     # µs per token, attention only
    head = (f"{a['n']} → {b['n']} トークン: 1トークンあたりの時間は {per[0]:.0f} → {per[1]:.0f} µs、"
            f"そのうち Attention の分は {attn[0]:.0f} → {attn[1]:.0f} µs です。")
    rise, attn_rise = per[1] - per[0], attn[1] - attn[0]
    if per[1] <= per[0] * 1.1:
        tail = "1トークンあたりの時間は、10% 以上は伸びていません。"
    elif attn_rise >= rise / 2:
        tail = (f"1トークンあたりの伸び {rise:.0f} µs のうち {attn_rise:.0f} µs は Attention の分なので、"
                "長いプロンプトで遅くなった分の大半は、長さの2乗で増える Attention から来ています。")
    else:
        tail = (f"1トークンあたりの伸び {rise:.0f} µs のうち Attention の分は {attn_rise:.0f} µs で、半分に届きません。"
                "残りの原因は、この計測では分けられません。")
    return "\n".join(lines + [head + tail])


# ---------------------------------------------------------------- 課題6: model shapes
def shape_reading(res: dict) -> str:
    """``lab01_shapes.measure_shapes``'s rows: TPOT = (bytes of a step ÷ bandwidth) + the rest, per layer."""
    lines = [f"帯域（このマシンで測定、{res['threads']} スレッド）: {res['bandwidth'] / 1e9:.1f} GB/s"]
    for r in res["rows"]:
        rest = r["tpot_ms"] - r["read_ms"]
        lines.append(f"{r['label']}（{r['dtype']}）: {r['layers']} 層、{r['params'] / 1e6:.1f}M パラメータ、"
                     f"1ステップで読む {r['step_bytes'] / 1e6:.0f} MB → 帯域で読むだけなら {r['read_ms']:.1f} ms。"
                     f"TPOT {spread_text(r, 'tpot_ms', ' ms')} のうち残り {rest:.1f} ms（残り ÷ 層数 {rest / r['layers']:.2f} ms。"
                     f"1ステップに1回だけの時間も層数で割って入っています）" + _linear_words(r))
    by = {r["model"]: r for r in res["rows"]}
    if all(m in by for m in PAIR):
        per_layer, per_step = layer_fit(by[PAIR[0]], by[PAIR[1]])
        lines.append(f"2つの形の残りの差から（1層あたりの時間が同じと仮定した目安。層の幅が違うので、負の値は"
                     f"その仮定が合わないしるし）: 1層あたり {per_layer:.2f} ms、層の数によらない1ステップの時間 "
                     f"{per_step:.2f} ms")
        lines += _per_layer_check(by[PAIR[0]], by[PAIR[1]], per_step)
    return "\n".join(lines)


def _per_layer_check(x: dict, y: dict, per_step: float) -> list[str]:
    """Does "the same per-layer work, more layers" fit the run? TPOT minus the Linear layers timed alone, per
    layer, should be about the same for both shapes, and the shallower shape's should cover the fit's per-step
    time (reviews11 ch01 #2: 0.21 vs 0.47 ms per layer, 2.4 ms under a 2.74 ms per-step time)."""
    if "linear_ms" not in x or "linear_ms" not in y:
        return []
    other = [r["tpot_ms"] - r["linear_ms"] for r in (x, y)]
    per = [o / r["layers"] for o, r in zip(other, (x, y))]
    if min(per) > 0 and max(per) <= 1.5 * min(per) and other[0] >= per_step:
        return [f"Linear 層を除いた時間は1層あたり {per[0]:.2f} ms と {per[1]:.2f} ms で近く、"
                "同じ処理が層の数だけ増えるという見方と合います。"]
    return [f"Linear 層を除いた時間は1層あたり {x['label']} {per[0]:.2f} ms、{y['label']} {per[1]:.2f} ms です"
            f"（{x['label']}は層 {x['layers']} 個と1ステップの処理で合わせて {other[0]:.1f} ms。上の目安の"
            f"「層の数によらない1ステップの時間」は {per_step:.2f} ms）。同じ処理が層の数だけ増えるという見方とは"
            "合いません。候補は、ステップの中の Linear 層が単独で呼ぶより遅いこと（キャッシュを分け合う）と、"
            "Linear 以外の処理の1層あたりの時間が形によって違うことです。この計測では分けられません。"]


PAIR = ("synthetic:llama-125m", "synthetic:smollm2-135m")


def _linear_words(r: dict) -> str:
    """The row's Linear layers timed alone, and TPOT without them per layer (the other per-layer work)."""
    if "linear_ms" not in r:
        return ""
    return (f"。Linear 層だけを1行ずつ続けて呼ぶと {r['linear_ms']:.1f} ms（最小 {r['linear_ms_min']:.1f} ms）、"
            f"TPOT からそれを引いて層数で割ると {(r['tpot_ms'] - r['linear_ms']) / r['layers']:.2f} ms")


def layer_fit(x: dict, y: dict) -> tuple[float, float]:
    """rest = per_step + layers x per_layer through two shapes' rests (TPOT - read time): (per_layer, per_step)."""
    rx, ry = (r["tpot_ms"] - r["read_ms"] for r in (x, y))
    per_layer = (ry - rx) / (y["layers"] - x["layers"])
    return per_layer, rx - x["layers"] * per_layer


def _pair(rows: list[dict], a: str, b: str) -> tuple[dict, dict]:
    by = {r["model"]: r for r in rows}
    return by[a], by[b]


def shape_predictions(rows: list[dict], a: str = PAIR[0], b: str = PAIR[1]) -> list[Prediction]:
    """課題6: the shape with more layers (b) has the longer TPOT, and less than half of the gap is its
    Linear layers' time (timed alone on the CPU) or the time to read its extra bytes at the measured
    bandwidth: the rest is the other per-layer work, which grows with the layers."""
    x, y = _pair(rows, a, b)
    gap, read_gap = y["tpot_ms"] - x["tpot_ms"], y["read_ms"] - x["read_ms"]
    rest_x, rest_y = ((r["tpot_ms"] - r["read_ms"]) / r["layers"] for r in (x, y))
    width = (f"残り ÷ 層数が {x['label']} {rest_x:.2f} ms、{y['label']} {rest_y:.2f} ms で、層の多い形のほうが"
             f"大きく短い。残りの時間が層の数ほどには伸びていない。理由は2つ考えられる：細い層の計算が短い（層の幅に"
             f"応じた行列とベクトルの積が大きい。BF16 は CPU によっては FP32 より遅く計算される）か、層の数によらない"
             f"1ステップの時間（サンプリング、スケジューリングなど）が大きい（上の目安の行）") if rest_y < 0.6 * rest_x else ""
    reads = y["read_ms"] > 0.5 * y["tpot_ms"]
    side = order(x, y, "tpot_ms", LONGER)
    return [
        decide(side > 0, side == 0, f"層の多い {y['label']}のほうが、{x['label']}より TPOT が長い",
               f"{x['label']} {x['layers']} 層 {spread_text(x, 'tpot_ms', ' ms')}、{y['label']} {y['layers']} 層 "
               f"{spread_text(y, 'tpot_ms', ' ms')}",
               width or ("このマシンでは層ごとの固定の時間が小さい（速い CPU、GPU）。"
                         "繰り返しを増やし、負荷の警告を確かめる"), RETRY),
        _gap_prediction(x, y, gap, read_gap, side, reads, width),
    ]


class Straddle(Prediction):
    """課題6's gap undecided because the Linear-time gap (median vs minima) falls on both sides of half the
    TPOT gap, not because the TPOT ranges overlap (reviews10 ch01 #4): 判定できません with that reason."""
    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


def _gap_prediction(x: dict, y: dict, gap: float, read_gap: float, side: int, reads: bool, width: str) -> Prediction:
    """課題6's second prediction. With the Linear layers timed alone (CPU): the gap is not the weights'
    matmuls timed alone nor the bytes; where it lies is left to shape_reading's per-layer check
    (reviews11 ch01 #2); without them (GPU): only "not the bytes"."""
    bytes_why = ("このマシンでは帯域が狭く、重みを読む時間が TPOT の半分以上を占める（GPU で大きなモデルを"
                 "動かすときと同じ形）。TPOT の差はバイト数の差で決まります")
    if "linear_ms" not in x or "linear_ms" not in y:
        return decide(gap > 0 and read_gap < 0.5 * gap, side == 0,
                      "TPOT の差の半分以上は、読むバイト数の差（帯域で読む時間の差）では説明できない",
                      f"TPOT の差 {gap:.1f} ms のうち、帯域で読む時間の差は {read_gap:.1f} ms",
                      bytes_why if reads else (width or "TPOT の差が小さく、揺れに埋もれている。" + BUSY), RETRY)
    lin = (y["linear_ms"] - x["linear_ms"], y["linear_ms_min"] - x["linear_ms_min"])   # medians, minima
    other = [(r["tpot_ms"] - r["linear_ms"]) / r["layers"] for r in (x, y)]
    text = ("TPOT の差の半分以上は、重みとの行列積（Linear 層）を単独で測った時間の差でも、帯域で読む時間の差"
            "でもない")
    measured = (f"TPOT の差 {gap:.1f} ms のうち、Linear 層だけの時間の差は {lin[0]:.1f} ms（最小どうしで "
                f"{lin[1]:.1f} ms）、帯域で読む時間の差は {read_gap:.1f} ms。TPOT から Linear 層を引いて層数で"
                f"割ると {x['label']} {other[0]:.2f} ms、{y['label']} {other[1]:.2f} ms")
    if side != 0 and min(lin) < 0.5 * gap <= max(lin):     # TPOT ranges apart, the Linear gap straddles half of it
        return Straddle(text, None, measured,
                        f"Linear 層の時間の差が、中央値どうしと最小どうしで、TPOT の差の半分 {0.5 * gap:.2f} ms を"
                        f"はさんでいます。どちらの側とも言えません。{RETRY}")
    return decide(gap > 0 and max(*lin, read_gap) < 0.5 * gap, side == 0, text, measured,
                  bytes_why if reads else
                  "このマシンでは Linear 層の時間が形によって大きく違う（層の幅や BF16 の計算のしかたで、行列と"
                  "ベクトルの積の速さが変わる）。TPOT の差は層の数より重みの計算から来ている", RETRY)


__all__ = ["BUSY", "LONGER", "PAIR", "SPIKE_SHARE", "decode_split_reading", "first_gap_reading", "first_gaps",
           "late_long_predictions", "layer_fit", "shape_predictions", "shape_reading"]
