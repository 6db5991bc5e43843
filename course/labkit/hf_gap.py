"""The engine vs transformers ``generate`` gap (chapter 5): which mechanism a run's numbers point to.

Both run the same model in float32 on the same CPU, on static batches of the same size. Three mechanisms
differ, and a sweep over the concurrency can tell them apart:

* the work outside the model. Part of it does not grow with the batch (``generate``'s Python loop, logits
  processors, stopping criteria and the course's timing streamer; the engine's scheduler call): it is there at one
  request, so static ÷ transformers at concurrency 1 shows it (together with the one-row matrix product). Part of it
  grows with the batch (blind reading 8 ch05 #1): ``generate``'s DynamicCache concatenates (copies) every row's K/V
  of every layer each step, inside the attention layers, at one row too; the engine updates outputs and checks stops per request, and its CPU decode gathers
  each request's K/V. Concurrency 1 does not exclude this part;
* the engine's Linear kernels: ``minimal_engine.model.cpu_linears`` probes them at load (oneDNN pre-packed
  float32 weights where that kernel runs and agrees with F.linear, else plain F.linear); ``kernels_of``
  records what the run's engine took;
* transformers' ``nn.Linear`` (plain ``F.linear``): on the CPU the reviewers measured (blind reading
  2026-12-07b ch05, AVX-512, 1 thread) its step jumped from one row to two, where the engine's pre-packed
  kernel grew little. A difference in the kernels for several rows shows as a ratio that grows from
  concurrency 1 to 2 and more.

``gap_reading`` compares the ratio at 1 with the ratios at >= 2 through the repeats' ranges
(``course.labkit.spread.ratio_span``: the smallest and largest ratio the repeats allow). A growth beyond 1's range
is consistent with the kernels and with the per-request work; one run does not separate the two, and the text says
so. ``generate`` also computes finished rows up to its group's longest output; the caller passes that share of a
step (estimated from its own fit) as ``finished``.
"""
from __future__ import annotations

from course.labkit.spread import ratio_span

PLAIN = "plain"          # minimal_engine.model.cpu_linears.PLAIN: F.linear, what transformers' Linear runs
# generate's KV concatenation (DynamicLayer.update, torch.cat) runs inside each attention layer and copies the
# cache at one row too, growing with the rows: it is named once, in PER_REQUEST (blind reading 10 ch05 #3).
OVERHEAD = ("モデルの外の処理（generate の Python のループ・logits processor と停止条件・"
            "時刻を記録するストリーマー、エンジンのスケジューラーとブロック表）")
PER_REQUEST = ("件数とともに増える処理（generate の KV キャッシュの連結：Attention の層の中で毎ステップ各行の K・V をコピーし、"
               "1行でも行われ、行数と文脈の長さとともに増える。エンジンの1件ごとの出力の更新と停止の判定。"
               "CPU の Decode で1件ごとに K・V を集める処理）")
# The finished-rows share is an estimate (from the engine's own per-request slope), so a smallest ratio that
# passes the finished-rows bound by less than EDGE is within its error: 判定できません (blind reading 8 ch05 #2).
EDGE = 0.03


def kernels_of(llm) -> dict | None:
    """The Linear kernels the engine of ``llm`` took here (cpu_linears.CpuKernels): names for one row and more
    rows and its describe() line; None where it has none (another device, int8)."""
    from minimal_engine.model.cpu_linears import cpu_kernels
    k = cpu_kernels(llm.engine.runner.model)
    return None if k is None else {"one_row": k.one_row, "more_rows": k.more_rows, "line": k.describe()}


# cpu_linears' kernel names in the course's words (blind reading 8 ch05, Japanese: no English jargon in readings)
KERNEL_JA = {"oneDNN pre-packed": " oneDNN の事前に並べ替えた重みの積", "aten mv": " PyTorch 自身の行列ベクトル積"}


def kernel_words(kernels: dict | None, rows: str = "more_rows") -> str:
    """'エンジンは <kernel>、transformers は F.linear' for the Linear layers (one row or more rows)."""
    if not kernels:
        return "エンジンは読み込み時に確かめたカーネル、transformers は F.linear"
    if kernels[rows] == PLAIN:
        return "エンジンも transformers も F.linear で、カーネルの差はありません"
    return f"エンジンは読み込み時に確かめた{KERNEL_JA.get(kernels[rows], ' ' + kernels[rows])}、transformers は F.linear"


def single_run_cause(concurrency: int, kernels: dict | None) -> str:
    """What one run's static ÷ transformers mixes (it cannot separate the mechanisms alone)."""
    if concurrency == 1:
        return (f"同時リクエスト数 1 なので、差は{OVERHEAD}と、1行の行列積のカーネル（{kernel_words(kernels, 'one_row')}）"
                "の差です")
    return (f"同時リクエスト数 {concurrency} のこの実行には、{OVERHEAD}の差と、行の多い行列積のカーネルの差"
            f"（{kernel_words(kernels)}）と、generate が終わった行も組の最も長い出力まで計算する分が重なっていて、"
            "1回の実行では分けられません。ラボのスイープが、同時リクエスト数 1（モデルの外の処理と1行の積）と 2 以上の比を"
            "比べて、どの仕組みと合うかを表示します")


def _q(static: dict, hf: dict) -> tuple[float, float, float]:
    lo, hi = ratio_span(hf, static, "tok_s")
    return static["tok_s"] / hf["tok_s"], lo, hi


def gap_cause(points: dict[int, tuple[dict, dict]], kernels: dict | None,
              finished: dict[int, float] | None = None) -> tuple[str, str]:
    """(cause, text) from {concurrency: (static row, transformers row)}: cause is 'kernel', 'finished' (the growth
    fits within generate's finished rows: a step longer by f gives a ratio up to 1 / (1 - f) times concurrency 1's),
    'other' (grows though the engine also takes F.linear), 'overhead', 'shrinks' or 'none' (every ratio within
    concurrency 1's range)."""
    q1, lo1, hi1 = _q(*points[1])
    multi = {c: _q(*v) for c, v in sorted(points.items()) if c >= 2}
    side = {c: 1 if lo > hi1 else -1 if hi < lo1 else 0 for c, (_, lo, hi) in multi.items()}
    at1 = 1 if lo1 > 1 else -1 if hi1 < 1 else 0
    up, down = [c for c, v in side.items() if v > 0], [c for c, v in side.items() if v < 0]
    one = {1: f"エンジンが幅の外で速く、その差は{OVERHEAD}か、1行の行列積（{kernel_words(kernels, 'one_row')}）の差です",
           -1: "transformers が幅の外で速く、エンジンのモデルの外の処理（スケジューラーとブロック表）が重い分です",
           0: f"差は幅の中で、{OVERHEAD}の差は、この実行では見分けられるほど大きくありません"}[at1]
    text = f"同時リクエスト数 1 では、{one}。"
    names = "・".join(map(str, up or down))
    if up and not down:
        f = finished or {}
        bound = {c: hi1 / (1 - min(f.get(c, 0.0), 0.9)) for c in up}      # 1's upper end, finished rows added
        over = {c: multi[c][1] / bound[c] - 1 for c in up}                  # how far the smallest ratio passes it
        beyond = [c for c in up if over[c] > (EDGE if c in f else 0)]
        edge = [c for c in up if c in f and 0 < over[c] <= EDGE]
        within = [c for c in up if c in f and over[c] <= 0]
        head = (f"同時リクエスト数 {names} では比が 1 の幅を超えて開きました。件数によらない処理なら1件のときにも"
                f"同じ差が出るので、その処理ではありません。残る候補は、{PER_REQUEST}と、行の多い行列積のカーネルの差です。")
        fin = "generate が終わった行も計算する分"
        est = ("（見積もり " + "、".join(f"{c} で {100 * f[c]:.0f} %" for c in up if c in f) + "。取りうる最小の比と、"
               "その分を足した 1 の上端: " + "、".join(f"{c} で {multi[c][1]:.2f} と {bound[c]:.2f}" for c in up if c in f)
               + "）") if any(c in f for c in up) else ""
        note = (f"{'・'.join(map(str, edge))} では、上端を {100 * EDGE:.0f} % 以内でしか超えず、見積もりの誤差の中なので"
                "判定できません。" if edge else "") + (
            f"{'・'.join(map(str, within))} では、その分を除くと 1 の幅に届きます。" if within else "")
        if kernels and kernels["more_rows"] != PLAIN and beyond:
            return "kernel", text + head + (
                f"{'・'.join(map(str, beyond))} では {fin}{est}を除いても開いています。行の多い行列積のカーネルの差"
                f"（{kernel_words(kernels)}）と合いますが、件数とともに増える処理の差とは、この実行では分けられません。{note}")
        if (within or edge) and not beyond:
            return "finished", text + head + (
                f"{fin}{est}を考えると、{note}カーネルの差とは言い切れません（{kernel_words(kernels)}）。")
        return "other", text + (
            f"同時リクエスト数 {names} では比が 1 の幅を超えて開きましたが、エンジンも行の多い積に F.linear を使っているので、"
            f"行列積のカーネルの差ではありません。{PER_REQUEST}の差か、generate が終わった行も計算する分か、"
            "計測の途中の負荷の変化です。")
    if down and not up:
        return "shrinks", text + (
            f"同時リクエスト数 {names} では比が 1 の幅より小さくなりました。行の多い積では transformers の F.linear が"
            f"このマシンで速いか（{kernel_words(kernels)}）、計測の途中の負荷の変化です。")
    if up and down:
        return "none", text + "2 以上の比は 1 の幅の上にも下にも出ていて、件数との関係は読めません。負荷の警告を確かめ、測り直してください。"
    if at1:
        return "overhead", text + "2 以上の比も 1 の幅の中なので、差は件数によらない処理（と1行の積）で説明できます。"
    return "none", text + ("2 以上の比も 1 の幅の中で、この実行の数値はどの仕組みも指しません。繰り返しを増やして測り直してください。")


def gap_reading(points: dict[int, tuple[dict, dict]], kernels: dict | None, finished: dict[int, float] | None = None) -> str:
    """The printed lines: each concurrency's ratio with its range, then ``gap_cause``'s text; '' without a
    concurrency 1 and one >= 2. ``finished``: concurrency -> the share of a step generate spends on finished rows."""
    if 1 not in points or not any(c >= 2 for c in points):
        return ""
    parts = []
    for c, v in sorted(points.items()):
        q, lo, hi = _q(*v)
        extra = f"、終わった行の計算の見積もりは1ステップの約 {100 * finished[c]:.0f} %" if finished and c in finished and c >= 2 else ""
        parts.append(f"{c} で {q:.2f} 倍（{lo:.2f}〜{hi:.2f}{extra}）")
    head = "静的（エンジン）÷ transformers の出力 tok/s（繰り返しから取りうる範囲）: " + "、".join(parts) + "。"
    if all(r.get("tok_s_min", r["tok_s"]) == r.get("tok_s_max", r["tok_s"]) for v in points.values() for r in v):
        head += "繰り返し1回なので幅がなく、比の大小は揺れを含みます（繰り返しを増やすと幅で判定できます）。"
    return head + "\n" + gap_cause(points, kernels, finished)[1]


__all__ = ["EDGE", "OVERHEAD", "PER_REQUEST", "gap_cause", "gap_reading", "kernel_words", "kernels_of", "single_run_cause"]
