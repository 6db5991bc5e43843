"""Chapter 5's lab: its tasks' predictions, decided by the runs (``course.labkit.predictions``).

    runs = {o: lab05.run_batching_lab(**dict(d, output_len=o), policies=("continuous", "static"))
            for o in TASK1_OUTPUT_LENS}
    print(task1_table(runs))
    print(verdicts(task1_predictions(runs)))

課題1 varies the output length (maximum) ``o``. The lengths are drawn anew, uniform in [o/4, o], so the
absolute spread (max - min) grows with ``o`` while the relative spread of the distribution stays; the
static batch's expected idle share (1 - sum o_i / (B * max o_i), summed over the groups) does not grow
(16 draws move it by a few points). The ratio follows the drawn lengths' step ratio (printed per length); beyond it,
two shared costs pull apart: the prefill's share shrinks (up), context-growing work grows (down): dilution_line.

The run's and the sweep's readings (``run_reading``, ``sweep_table``, ``sweep_predictions``) say, from
the numbers measured, whether continuous / static lies outside the repeats' range and below the ratio a step
count sets, and which of the engine's static policy and transformers was faster. The mechanisms named are
ones a 2-4 core CPU shows:

* if every step took the same time, continuous / static would be the ratio of their step counts
  (``step_ratio``: static runs sum of each group's longest output; continuous refills a slot as soon as it
  frees, but its slots fall idle too once fewer requests than slots remain, so the ratio stays below the
  naive 1 / (1 - idle share)). The per-step fixed time is what makes an idle slot lost time: static, running
  more steps, pays more of it. Two causes keep the measured ratio below the step ratio, and a run does not
  separate them: the per-token work (the part of a step proportional to the batch) and the prefill, the same in
  both policies, dilute the gap; and continuous pays step cost static does not (mixed prefill steps, rows of
  different context lengths that ``decode_groups`` computes apart; the sweep's TPOT-ratio line measures it;
  blind reading 11 ch05 #2). Below the step ratio is read only when the repeats' whole span is below it;
* the engine's static policy vs transformers ``generate`` is an implementation difference (``course.labkit.hf_gap``):
  work outside the model that does not grow with the batch (present at one request); work that does (generate's
  KV concatenation, the engine's per-request updates and K/V gather); the Linear kernels (``cpu_linears``) against
  transformers' plain ``F.linear``; generate's finished rows (from the static TPOT fit). A ratio growing from
  concurrency 1 to >= 2 fits the kernels or the per-request work, which the sweep does not separate. Every
  prompt has ``prompt_len`` tokens: no padding at any batch;
* static's tok/s/user is often the higher: on this small model a CPU step is mostly fixed time, so the main
  cause is continuous's decode steps that also run a new request's prefill (``prefill_step_share``); a
  static group's shrinking batch helps only where a step's time grows with the batch (the sweep's
  static TPOT column: ``sweep_predictions`` fits its fixed share).
"""
from __future__ import annotations

from course.labkit import hf_gap, linear_rows
from course.labkit.load import was_disturbed
from course.labkit.predictions import DISTURBED, UNDECIDED, Prediction
from course.labkit.policy_floor import floor_line, stands_out, tpot_floor_line
from course.labkit.spread import RETRY, decide, order, ratio_span
from course.labkit.batching_tasks import (TASK1_OUTPUT_LENS, idle_share, step_counts, task1_predictions, task1_rows,
                                     task1_table, task2_predictions)

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
    n_s, n_c = step_counts(res["output_lens"], res["concurrency"])
    row = {"concurrency": res["concurrency"], "ratio": c["tok_s"] / s["tok_s"], "apart": _apart(c, s),
           "idle_share": share, "bound": 1 / (1 - share), "steps_static": n_s, "steps_cont": n_c,
           "step_ratio": n_s / n_c, "tpot_static": s["tpot_ms"], "goodput_step_cont": 1 / c["duration_s"],
           "goodput_step": 1 / s["duration_s"], "c": c, "s": s}
    if h:
        row.update(hf_ratio=s["tok_s"] / h["tok_s"], hf_apart=_apart(s, h))
    return row


def _above_steps(r: dict) -> str:
    """A measured ratio at or above the step ratio (ch05 final #4): within the ratios the repeats allow, or beyond
    them, where two mechanisms remain that this run does not separate."""
    lo, hi = ratio_span(r["s"], r["c"], "tok_s")
    if lo < r["step_ratio"]:
        return (f"測定がステップ数の比以上ですが、繰り返しの組み合わせで比は {lo:.2f}〜{hi:.2f} 倍を取りうるので、"
                "ステップ数の比はばらつきの中です。")
    return (f"繰り返しの組み合わせで比は {lo:.2f}〜{hi:.2f} 倍で、下の端もステップ数の比を超えています。1ステップの時間が"
            "一定というモデルを超える分で、候補は2つあり、この実行では分けられません。1つは、静的の小さくなった組の"
            "ステップが遅いことです（Linear のカーネルが行数によって速さを変える。ラボのスイープで行数ごとに測ります）。"
            "もう1つは、計測の途中で負荷が変わったことです（静的の tok/s の幅と負荷の警告を確かめてください）。")


def _gap_sentence(r: dict) -> str:
    head = (f"連続 ÷ 静的の出力 tok/s {r['ratio']:.2f} 倍（{_range_words(r['apart'])}）。静的バッチの Decode の空き枠は"
            f"（全部の組で）{100 * r['idle_share']:.0f} % で、空いた枠がすべて時間の損なら {r['bound']:.2f} 倍です。"
            "ただし待ちがなくなると連続バッチングの枠も空くので、1ステップの時間が一定なら、この流れの出力長では"
            f"静的 {r['steps_static']}・連続 {r['steps_cont']} ステップで、{r['step_ratio']:.2f} 倍が上限です。")
    if r["apart"] is False or (r["ratio"] <= 1 and not r["apart"]):
        return head + "この実行では、方式の差が計測のばらつきより大きいとは言えません。繰り返しを増やして測り直してください。"
    if r["ratio"] <= 1:
        return head + ("静的のほうが速く、幅も重なりません。方式の差とは逆向きなので、計測の途中で負荷が変わったか、"
                       "Prefill が実行時間の多くを占めています。負荷の警告を確かめ、繰り返しや出力長を増やして測り直してください。")
    if r["ratio"] >= r["step_ratio"]:
        return head + _above_steps(r)
    return head + _below_steps(r)


def _below_steps(r: dict) -> str:
    """A measured ratio below the step ratio (blind reading 11 ch05 #1, #2): within the ratios the repeats allow
    when the span's upper end reaches the step ratio; else two causes this run does not separate: work both policies
    share dilutes the gap, and step cost only continuous pays (its TPOT ratio, printed below, measures it)."""
    lo, hi = ratio_span(r["s"], r["c"], "tok_s")
    if hi >= r["step_ratio"]:
        return (f"測定はステップ数の比より小さいですが、繰り返しの組み合わせで比は {lo:.2f}〜{hi:.2f} 倍を取りうるので、"
                "ステップ数の比との差はばらつきの中です。")
    return (f"繰り返しの組み合わせで比は {lo:.2f}〜{hi:.2f} 倍で、上の端もステップ数の比より小さいです。"
            "ステップごとの固定の時間は、ステップの多い静的のほうが多く払います。これが空き枠の損です。"
            "測定がそれに届かない理由の候補は2つあり、この実行では分けられません。"
            "1つは、両方の方式に同じだけある仕事（1トークンあたりの計算と Prefill）が差を薄めることです。"
            "もう1つは、連続だけが払うステップの重さです。新しいリクエストの Prefill が入るステップと、"
            "文脈の長さの違う行を分けて計算する CPU の Decode がそれにあたります。下の TPOT の行がその大きさを示します。")


def _hf_sentence(r: dict, kernels: dict | None) -> str:
    q = r["hf_ratio"]
    if r["hf_apart"] is False:
        who = "繰り返しの幅が重なるので、どちらが速いとは言えません。"
    else:
        who = (f"同時リクエスト数 {r['concurrency']} のこの実行では、"
               + ("エンジンの静的バッチングのほうが速い" if q > 1 else "transformers のほうが速い") + "です。")
    return (f"静的（エンジン）÷ transformers の出力 tok/s は {q:.2f} 倍です。{who}これは方式ではなく実装の差です。"
            f"{hf_gap.single_run_cause(r['concurrency'], kernels)}。プロンプトは長さがそろっているので、パディングは"
            "どの同時リクエスト数でも入りません。方式のコストは連続 ÷ 静的で読みます。")


def _tpot_sentence(r: dict) -> str:
    """tok/s/user: which policy had the shorter TPOT, whether the repeats' ranges part, and the mixed-step share."""
    c, s = r["c"], r["s"]
    if c.get("tpot_ms") is None or s.get("tpot_ms") is None or c.get("prefill_step_share") is None:
        return ""
    apart = None if c.get("tpot_ms_min") is None or c["tpot_ms_min"] == c["tpot_ms_max"] else (
        c["tpot_ms_max"] < s["tpot_ms_min"] or s["tpot_ms_max"] < c["tpot_ms_min"])
    head = (f"TPOT の中央値は連続 {c['tpot_ms']:.1f}・静的 {s['tpot_ms']:.1f} ms（{_range_words(apart)}）、連続の Decode の"
            f"ステップの {100 * c['prefill_step_share']:.0f} % に新しいリクエストの Prefill も入っていました"
            f"（静的 {100 * s['prefill_step_share']:.0f} %）。")
    if apart and s["tpot_ms"] < c["tpot_ms"]:
        return head + ("静的の tok/s/user が高い理由の候補は4つあり、この実行では分けられません。1つは2つの計測の偏りです。"
                       "同時リクエスト数 1 では2つの方式が同じ仕事をしますが、TPOT が違って測れることがあります。ラボのスイープが"
                       "その差を表示し、それを超えた分だけを方式の差として読みます。2つ目はこの重いステップです。"
                       "3つ目は、静的の組が小さくなってステップが速くなる効果です。1ステップの時間が件数とともに伸びる分だけ"
                       "効きます。4つ目は、連続では文脈の"
                       "長さの違う行が混ざることです。CPU の Decode は文脈の長さで行を分けて計算するので、分かれる分だけ重くなりえます。")
    if apart:
        return head + ("この実行では連続の TPOT のほうが短く、方式の差とは逆向きです。計測の途中で負荷が変わった可能性があります。"
                       "負荷の警告を確かめ、繰り返しを増やして測り直してください。")
    return head + "この実行では、tok/s/user の差が計測のばらつきより大きいとは言えません。"


def _slo_sentence(res: dict) -> str:
    """Whether the TPOT SLO bound any request in this run (else the goodput is decided by TTFT alone)."""
    slo = res.get("tpot_slo_ms")
    tpots = [t for k in ("continuous", "static") for t in res["policies"][k].get("tpot_ms_list") or [] if t == t]
    if slo is None or not tpots:
        return ""
    if max(tpots) <= slo:
        return (f"この実行の TPOT は最大 {max(tpots):.1f} ms で、TPOT の SLO（{slo:g} ms）はどのリクエストも守っています。"
                "グッドプットの差は TTFT の SLO だけで決まっています。")
    return f"TPOT の SLO（{slo:g} ms）を破ったリクエストがあります（TPOT 最大 {max(tpots):.1f} ms）。"


def run_reading(res: dict) -> str:
    """A run's reading: continuous vs static against the repeats' range and the step-count ratio, transformers
    vs the engine's static policy, and how far one request moves the goodput."""
    r = run_rows(res)
    lines = [f"{UNDECIDED}：{DISTURBED}。下の読みは参考です。"] if was_disturbed(res.get("load")) else []
    lines.append(_gap_sentence(r))
    if "hf_ratio" in r:
        lines.append(_hf_sentence(r, res.get("engine_kernels")))
    lines.append(_tpot_sentence(r))
    lines.append(f"グッドプットはリクエストを数えるので、1件が SLO の境目をまたぐと、連続で約 {r['goodput_step_cont']:.2f}、"
                 f"静的で約 {r['goodput_step']:.2f} 件/s（1 ÷ 実行時間）動きます。差がこの刻みより小さいときは比べません。")
    lines.append(_slo_sentence(res))
    return "\n".join(x for x in lines if x)


def sweep_rows(runs: dict[int, dict]) -> list[dict]:
    return [run_rows(res) for _, res in sorted(runs.items())]


def sweep_table(runs: dict[int, dict]) -> str:
    out = []
    for r in sweep_rows(runs):
        line = (f"同時リクエスト数 {r['concurrency']:>2}: 連続 ÷ 静的 {r['ratio']:.2f} 倍（{_range_words(r['apart'])}、"
                f"ステップ数の比 {r['step_ratio']:.2f} 倍、空き枠 {100 * r['idle_share']:.0f} % からの {r['bound']:.2f} 倍）")
        if "hf_ratio" in r:
            faster = "エンジン" if r["hf_ratio"] > 1 else " transformers"   # a space only before Latin
            line += (f"、静的 ÷ transformers {r['hf_ratio']:.2f} 倍（" + ("繰り返しの幅が重なり、どちらとも言えない）"
                     if r["hf_apart"] is False else f"速いのは{faster}）"))
        out.append(line + f"、静的の TPOT 中央値 {r['tpot_static']:.1f} ms、グッドプット1件の刻み 連続 "
                   f"{r['goodput_step_cont']:.2f}・静的 {r['goodput_step']:.2f} 件/s")
    points = {c: (res["policies"]["static"], res["policies"]["hf_static"]) for c, res in runs.items()
              if "hf_static" in res["policies"] and "static" in res["policies"]}
    finished = {r["concurrency"]: _finished_share(r, runs, _fit(runs)[0]) for r in sweep_rows(runs)}
    kernels = next((res.get("engine_kernels") for res in runs.values() if res.get("engine_kernels")), None)
    lines = out + [floor_line(sweep_rows(runs)), tpot_floor_line(sweep_rows(runs)), hf_gap.gap_reading(points, kernels, finished)]
    return "\n".join(x for x in lines if x)


def _fit(runs: dict[int, dict]) -> tuple[float, float, float, float]:
    """Static's TPOT as a + b * n through the lowest and highest concurrency, n being static's mean batch (output
    tokens / static steps): (b, a, n at the lowest, n at the highest)."""
    rows = sweep_rows(runs)
    lo, hi = rows[0], rows[-1]
    n_lo, n_hi = (sum(runs[r["concurrency"]]["output_lens"]) / r["steps_static"] for r in (lo, hi))
    slope = (hi["tpot_static"] - lo["tpot_static"]) / (n_hi - n_lo) if n_hi > n_lo else 0.0
    return slope, lo["tpot_static"] - slope * n_lo, n_lo, n_hi


def _finished_share(r: dict, runs: dict[int, dict], slope: float) -> float:
    """generate keeps every row of its group to the longest output, the engine's static groups shrink: the extra
    rows per step (concurrency - static's mean batch) times the fitted per-request time, as a share of a step."""
    extra = max(0.0, slope) * (r["concurrency"] - sum(runs[r["concurrency"]]["output_lens"]) / r["steps_static"])
    return extra / (r["tpot_static"] + extra) if r["tpot_static"] + extra > 0 else 0.0


def _gap_state(rows: list[dict], r: dict) -> bool | None:
    """Prediction 1 at one concurrency: True held, False missed beyond the noise, None within it (ranges overlap,
    no farther from 1 than concurrency 1's range, or a step ratio inside the ratios the repeats allow: blind
    reading 11 ch05 #5, a median below the step ratio with a span reaching it is not 'below')."""
    lo, hi = ratio_span(r["s"], r["c"], "tok_s")
    if (r["ratio"] <= 1 and r["apart"] is not False) or (r["ratio"] >= r["step_ratio"] and lo >= r["step_ratio"]):
        return False
    if r["apart"] is False or not stands_out(rows, r) or r["ratio"] >= r["step_ratio"] or hi >= r["step_ratio"]:
        return None
    return True


def _step_state(rows: list[dict]) -> bool | None:
    """Prediction 2's 'no step falls by more than 5 %': False for a fall beyond the TPOT repeats' ranges, None
    for one within them, True without a fall."""
    falls = [order(a["s"], b["s"], "tpot_ms", 0.95) for a, b in zip(rows, rows[1:])
             if b["tpot_static"] < 0.95 * a["tpot_static"]]
    return True if not falls else False if -1 in falls else None


def sweep_predictions(runs: dict[int, dict]) -> list[Prediction]:
    """The sweep's predictions: (1) from 2 requests at a time, continuous beats static beyond the repeats' range
    and concurrency 1's range, yet below the step-count ratio; (2) the step time never falls by more than 5 %
    and grows, yet at static's mean batch of the largest concurrency at least half of a step is fixed time
    (``_fit``: a / TPOT >= 0.5). Either prints 判定できません when decided within the repeats' ranges. A step time
    falling as the batch grows is read against the engine's Linear kernels timed at 1-8 rows in the same runs
    (``course.labkit.linear_rows``): their own shape, or load."""
    rows = sweep_rows(runs)
    multi = [r for r in rows if r["concurrency"] >= 2]
    gaps = "、".join(f"{r['concurrency']}: {r['ratio']:.2f}（繰り返しの組み合わせで {a:.2f}〜{b:.2f}、ステップ数の比 "
                    f"{r['step_ratio']:.2f}）" for r in multi for a, b in [ratio_span(r["s"], r["c"], "tok_s")])
    states = [_gap_state(rows, r) for r in multi]
    lo, hi = rows[0], rows[-1]
    slope, fixed, n_lo, n_hi = _fit(runs)
    share = fixed / hi["tpot_static"]
    growth = hi["tpot_static"] / lo["tpot_static"]
    tp = [r["tpot_static"] for r in rows]
    step = _step_state(rows)
    if step is not True or growth < 0.95:
        why = linear_rows.step_fall_reason(runs)         # the kernel's own row dependence, or load
    else:
        why = ("1スレッドで行列の計算が件数とともに伸びる CPU では、固定の時間の割合が小さくなります。"
               "COURSE_THREADS を変えて比べてください")
    missed2 = step is False or growth < 0.95 or share < 0.5
    return [
        decide(bool(multi) and all(states), bool(multi) and False not in states and None in states,
               "同時リクエスト数 2 以上で、連続 ÷ 静的の出力 tok/s の比は 1 より大きく（繰り返しの幅の外で、同時リクエスト数 1 の"
               "比の幅より外）、ステップ数の比（1ステップの時間が一定なら開く比）より小さい",
               f"同時リクエスト数ごとの比 {gaps}",
               "比が 1 以下なら、両方の方式に同じだけある Prefill と1トークンあたりの計算が差を薄めているか、連続だけが払う"
               "ステップの重さ（表の下の TPOT の連続 ÷ 静的）が空き枠の得を打ち消しているか、計測がぶれています。"
               "比の幅の下の端までステップ数の比を超えたなら、静的の小さな組のステップが遅いか"
               "（Linear のカーネルが行数によって速さを変える）、負荷が変わったかです。警告を確かめ、繰り返しや出力長を増やして"
               "測り直してください", RETRY),
        decide(not missed2, step is None and not (growth < 0.95 or share < 0.5),
               f"同時リクエスト数を {lo['concurrency']} → {hi['concurrency']} にすると、1ステップの時間（静的の TPOT の"
               f"中央値）はどの段でも 5 % を超えて下がらずに伸びるが、静的の平均 {n_hi:.1f} 件のステップでも半分以上は"
               "件数によらない固定の時間",
               "静的の TPOT 中央値 " + " → ".join(f"{t:.1f}" for t in tp) + f" ms（{growth:.2f} 倍）。静的の"
               f"ステップの平均の件数（出力トークン ÷ ステップ数）{n_lo:.1f} → {n_hi:.1f} 件の2点に直線を当てはめると、"
               f"固定 {fixed:.1f} ms・1件あたり {slope:.2f} ms で、平均 {n_hi:.1f} 件のステップでの固定の割合 "
               f"{100 * share:.0f} %", why,
               f"下がった段は静的の TPOT の繰り返しの幅が重なります。それでも下がった理由の読み: {why}。{RETRY}"),
    ]


__all__ = ["TASK1_OUTPUT_LENS", "idle_share", "run_reading", "step_counts", "sweep_predictions", "sweep_rows",
           "sweep_table", "task1_predictions", "task1_rows", "task1_table", "task2_predictions"]
