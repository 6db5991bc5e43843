"""Chapter 5's lab: its tasks' predictions, decided by the runs (``course.labkit.predictions``).

    runs = {o: lab05.run_batching_lab(**dict(d, output_len=o), policies=("continuous", "static"))
            for o in TASK1_OUTPUT_LENS}
    print(task1_table(runs))
    print(verdicts(task1_predictions(runs)))

課題1 varies the output length (maximum) ``o``. The lengths are drawn anew, uniform in [o/4, o], so the
absolute spread (max - min) grows with ``o`` while the relative spread of the distribution stays; the
static batch's expected idle share (1 - sum o_i / (B * max o_i), summed over the groups) does not grow
(16 draws move it by a few points). The ratio may rise slightly, as the fixed prefill work (the same in
both policies) becomes a smaller share of the run.

The run's and the sweep's readings (``run_reading``, ``sweep_table``, ``sweep_predictions``) say, from
the numbers measured, whether continuous / static lies outside the repeats' range and below the bound the
idle share sets (1 / (1 - idle share): the gap if every idle slot were lost time), and which of the engine's
static policy and transformers was faster (an implementation difference whose sign depends on the
machine and the batch size). The mechanisms named are ones a 2-4 core CPU shows:

* continuous / static is at most 1 / (1 - idle share) (every idle decode slot lost time, the GPU-like case of
  a step whose time does not depend on the batch). It stays below that because the prefill work and each
  step's fixed overhead are the same in both policies, and because a static group's steps get a little
  faster as its finished members leave (the step time grows somewhat with the batch);
* the engine's static policy vs transformers ``generate`` is an implementation difference: the engine pays a
  per-step cost for scheduling and its paged KV blocks, ``generate`` computes finished rows up to the group's
  longest output. The first shows at small batches, the second at larger ones; the sign varies by machine.
"""
from __future__ import annotations

from course.labkit.predictions import Prediction
from minimal_engine import calculators as calc

TASK1_OUTPUT_LENS = (16, 64, 128)


def idle_share(lens: list[int], group: int) -> float:
    """The static policy's idle share over all its groups of ``group`` (the lesson's §2 formula)."""
    groups = [lens[i:i + group] for i in range(0, len(lens), group)]
    return sum(map(calc.static_batch_idle_slots, groups)) / sum(len(g) * max(g) for g in groups)


def _apart(a: dict, b: dict) -> bool | None:
    """True when the repeats' tok/s ranges do not overlap; None with a single repeat (no range)."""
    if a.get("tok_s_min") is None or b.get("tok_s_min") is None or a["tok_s_min"] == a["tok_s_max"]:
        return None
    return a["tok_s_max"] < b["tok_s_min"] or b["tok_s_max"] < a["tok_s_min"]


def _range_words(apart: bool | None) -> str:
    return {True: "繰り返しの幅は重ならない", False: "繰り返しの幅が重なる", None: "繰り返し1回"}[apart]


def run_rows(res: dict) -> dict:
    """The figures a run's reading is decided on."""
    p = res["policies"]
    c, s, h = p["continuous"], p["static"], p.get("hf_static")
    share = idle_share(res["output_lens"], res["concurrency"])
    row = {"concurrency": res["concurrency"], "ratio": c["tok_s"] / s["tok_s"], "apart": _apart(c, s),
           "idle_share": share, "bound": 1 / (1 - share), "tpot_static": s["tpot_ms"],
           "goodput_step": 1 / s["duration_s"], "c": c, "s": s}
    if h:
        row.update(hf_ratio=s["tok_s"] / h["tok_s"], hf_apart=_apart(s, h))
    return row


def _gap_sentence(r: dict) -> str:
    head = (f"連続 ÷ 静的の出力 tok/s {r['ratio']:.2f} 倍（{_range_words(r['apart'])}）。静的バッチの Decode の空き枠は"
            f" {100 * r['idle_share']:.0f} % なので、空いた枠がそのまま時間の損なら {r['bound']:.2f} 倍まで開きます。")
    if r["apart"] is False or (r["ratio"] <= 1 and not r["apart"]):
        return head + "この実行では、方式の差が計測のばらつきより大きいとは言えません（繰り返しを増やして測り直す）。"
    if r["ratio"] <= 1:
        return head + ("静的のほうが速く、幅も重なりません。方式の差とは逆向きなので、計測の途中で負荷が変わったか、"
                       "Prefill が実行時間の多くを占めています（負荷の警告を確かめ、繰り返しや出力長を増やして測り直す）。")
    if r["ratio"] >= r["bound"]:
        return head + "測定が上限以上なのは計測のばらつきです（負荷の警告を確かめ、繰り返しを増やす）。"
    return head + ("測定がそれより小さいのは、両方の方式に同じだけある Prefill とステップごとの固定の処理が差を薄めることと、"
                   "静的の組は終わった人が抜けるとステップが少し速くなることによります。")


def _hf_sentence(r: dict) -> str:
    q = r["hf_ratio"]
    who = "エンジンの静的バッチングのほうが速い" if q > 1 else "transformers のほうが速い"
    if r["hf_apart"] is False:
        who += "（ただし繰り返しの幅が重なる）"
    why = ("エンジンはステップごとのスケジューラーとブロック表の処理の分だけ不利になりやすく（件数が少ないほど目立つ）"
           if q <= 1 else "`generate` は終わった行も組の最長の出力まで計算し続け、その分が不利で")
    return (f"静的（エンジン）÷ transformers の出力 tok/s {q:.2f} 倍：同時リクエスト数 {r['concurrency']} のこの実行では"
            f"{who}です。{why}、どちらが勝つかはマシンとバッチの大きさで変わる実装の差です。方式のコストは連続 ÷ 静的で読みます。")


def run_reading(res: dict) -> str:
    """A run's reading: continuous vs static against the repeats' range and the idle-share bound, transformers
    vs the engine's static policy, and how far one request moves the goodput."""
    r = run_rows(res)
    lines = [_gap_sentence(r)]
    if "hf_ratio" in r:
        lines.append(_hf_sentence(r))
    lines.append(f"グッドプットはリクエストを数えるので、1件が SLO の境目をまたぐと約 {r['goodput_step']:.2f} 件/s"
                 "（1 ÷ 実行時間）動きます。差がこの刻みより小さいときは比べません。")
    return "\n".join(lines)


def sweep_rows(runs: dict[int, dict]) -> list[dict]:
    return [run_rows(res) for _, res in sorted(runs.items())]


def sweep_table(runs: dict[int, dict]) -> str:
    out = []
    for r in sweep_rows(runs):
        line = (f"同時リクエスト数 {r['concurrency']:>2}: 連続 ÷ 静的 {r['ratio']:.2f} 倍（{_range_words(r['apart'])}、"
                f"空き枠 {100 * r['idle_share']:.0f} % からの上限 {r['bound']:.2f} 倍）")
        if "hf_ratio" in r:
            faster = "エンジン" if r["hf_ratio"] > 1 else "transformers"
            line += f"、静的 ÷ transformers {r['hf_ratio']:.2f} 倍（速いのは {faster}）"
        out.append(line + f"、静的の TPOT 中央値 {r['tpot_static']:.1f} ms、グッドプット1件の刻み {r['goodput_step']:.2f} 件/s")
    return "\n".join(out)


def sweep_predictions(runs: dict[int, dict]) -> list[Prediction]:
    """The sweep's predictions: (1) from 2 requests at a time, continuous beats static beyond the repeats' range
    yet below the idle-share bound; (2) the step time grows much less than the batch (fixed time dominates)."""
    rows = sweep_rows(runs)
    multi = [r for r in rows if r["concurrency"] >= 2]
    gaps = "、".join(f"{r['concurrency']}: {r['ratio']:.2f}（上限 {r['bound']:.2f}、{_range_words(r['apart'])}）"
                    for r in multi)
    lo, hi = rows[0], rows[-1]
    k = hi["concurrency"] / lo["concurrency"]
    growth = hi["tpot_static"] / lo["tpot_static"]
    return [
        Prediction("同時リクエスト数 2 以上で、連続 / 静的の出力 tok/s の比は 1 より大きく（繰り返しの幅の外）、"
                   "空き枠からの上限 1 / (1 − 空き枠) より小さい",
                   bool(multi) and all(1 < r["ratio"] < r["bound"] and r["apart"] is not False for r in multi),
                   f"同時リクエスト数ごとの比 {gaps}",
                   "比が 1 に近いか幅が重なるなら、Prefill が実行時間の多くを占めて Decode の空き枠の差が薄まっているか、"
                   "ほかのプログラムの負荷で計測がぶれています（警告を確かめ、繰り返しや出力長を増やして測り直す）。"
                   "上限を超えたなら計測のばらつきです"),
        Prediction(f"同時リクエスト数を {k:g} 倍にしても、1ステップの時間（静的の TPOT の中央値）は {k / 2:g} 倍より小さい"
                   "（1ステップの多くは件数によらない固定の時間）",
                   growth < k / 2,
                   f"静的の TPOT 中央値 {lo['tpot_static']:.1f} → {hi['tpot_static']:.1f} ms（{growth:.2f} 倍）",
                   "1スレッドで行列の計算が件数とともに伸びる CPU では、固定の時間の割合が小さくなります。"
                   "COURSE_THREADS を変えて比べてください"),
    ]


def task1_rows(runs: dict[int, dict]) -> list[dict]:
    """Per output length: the spread, the idle share and continuous / static output tok/s."""
    rows = []
    for o, res in sorted(runs.items()):
        lens, p = res["output_lens"], res["policies"]
        rows.append({"output_len": o, "spread": max(lens) - min(lens),
                     "idle_share": idle_share(lens, res["concurrency"]),
                     "ratio": p["continuous"]["tok_s"] / p["static"]["tok_s"]})
    return rows


def task1_table(runs: dict[int, dict]) -> str:
    return "\n".join(f"出力長（最大）{r['output_len']:>4}: 最大 − 最小 {r['spread']:>3}、静的の空き枠 "
                     f"{100 * r['idle_share']:.1f} %、連続 / 静的の出力 tok/s {r['ratio']:.2f} 倍"
                     for r in task1_rows(runs))


def task1_predictions(runs: dict[int, dict]) -> list[Prediction]:
    """課題1's predictions, from the shortest and the longest output length run."""
    rows = task1_rows(runs)
    lo, hi = rows[0], rows[-1]
    span = f"出力長（最大）{lo['output_len']} → {hi['output_len']}"
    return [
        Prediction(f"{span} で最大 − 最小は広がるが、静的の空き枠の割合は増えない",
                   hi["spread"] > lo["spread"] and hi["idle_share"] <= lo["idle_share"] + 0.02,
                   f"最大 − 最小 {lo['spread']} → {hi['spread']}、空き枠 {100 * lo['idle_share']:.1f} → "
                   f"{100 * hi['idle_share']:.1f} %",
                   "乱数の種やリクエスト数を変えると、組ごとの最長の出力長が変わる。種を変えて平均を見る"),
        Prediction(f"{span} で、連続 / 静的の出力 tok/s の比は 1.1 倍を超えて広がらない",
                   hi["ratio"] < 1.1 * lo["ratio"],
                   f"連続 / 静的 {lo['ratio']:.2f} → {hi['ratio']:.2f} 倍",
                   "出力が短いと 64 トークンの Prefill が実行時間の多くを占め、Decode の空き枠の差が tok/s に"
                   "出にくい（出力が長いほど出やすい）。ほかのプログラムが CPU を使っていれば、負荷の警告を確かめ、"
                   "繰り返しを増やして測り直す"),
    ]


__all__ = ["TASK1_OUTPUT_LENS", "idle_share", "run_reading", "sweep_predictions", "sweep_rows", "sweep_table",
           "task1_predictions", "task1_rows", "task1_table"]
