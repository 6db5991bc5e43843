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
  more steps, pays more of it. The per-token work (the part of a step proportional to the batch) and the
  prefill are the same in both policies and dilute the gap, so on a CPU the measured ratio stays below the
  step ratio; a GPU decode step, whose time hardly depends on the batch, approaches it;
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
from course.labkit.predictions import DISTURBED, UNDECIDED, Prediction
from course.labkit.policy_floor import dilution_line, floor_line, stands_out
from minimal_engine import calculators as calc

TASK1_OUTPUT_LENS = (16, 64, 128)


def idle_share(lens: list[int], group: int) -> float:
    """The static policy's idle share over all its groups of ``group`` (the lesson's §2 formula)."""
    return calc.static_batches_idle_share(lens, group)


def step_counts(lens: list[int], slots: int) -> tuple[int, int]:
    """Steps (static, continuous) for requests of ``lens`` output tokens through ``slots`` slots, one token per
    request and step (the lesson's cell 3 model): static runs each group to its longest member; continuous
    refills a freed slot the next step, and its slots idle too once the queue is empty (the drain)."""
    static = sum(max(lens[i:i + slots]) for i in range(0, len(lens), slots))
    queue, running, steps = list(lens), [], 0
    while queue or running:
        running += [queue.pop(0) for _ in range(min(slots - len(running), len(queue)))]
        running = [n - 1 for n in running if n > 1]
        steps += 1
    return static, steps


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


def _gap_sentence(r: dict) -> str:
    head = (f"連続 ÷ 静的の出力 tok/s {r['ratio']:.2f} 倍（{_range_words(r['apart'])}）。静的バッチの Decode の空き枠は"
            f"（全部の組で）{100 * r['idle_share']:.0f} % で、空いた枠がすべて時間の損なら {r['bound']:.2f} 倍です。"
            "ただし待ちがなくなると連続バッチングの枠も空くので、1ステップの時間が一定なら、この流れの出力長では"
            f"静的 {r['steps_static']}・連続 {r['steps_cont']} ステップで、{r['step_ratio']:.2f} 倍が上限です。")
    if r["apart"] is False or (r["ratio"] <= 1 and not r["apart"]):
        return head + "この実行では、方式の差が計測のばらつきより大きいとは言えません（繰り返しを増やして測り直す）。"
    if r["ratio"] <= 1:
        return head + ("静的のほうが速く、幅も重なりません。方式の差とは逆向きなので、計測の途中で負荷が変わったか、"
                       "Prefill が実行時間の多くを占めています（負荷の警告を確かめ、繰り返しや出力長を増やして測り直す）。")
    if r["ratio"] >= r["step_ratio"]:
        return head + "測定がステップ数の比以上なのは計測のばらつきです（負荷の警告を確かめ、繰り返しを増やす）。"
    return head + ("測定がそれより小さいのは、1トークンあたりの計算（件数に比例する部分）と Prefill が両方の方式に同じだけあり、"
                   "差を薄めるためです（ステップごとの固定の時間は、ステップの多い静的のほうが多く払います。これが空き枠の損です）。")


def _hf_sentence(r: dict, kernels: dict | None) -> str:
    q = r["hf_ratio"]
    who = "エンジンの静的バッチングのほうが速い" if q > 1 else "transformers のほうが速い"
    if r["hf_apart"] is False:
        who += "（ただし繰り返しの幅が重なる）"
    return (f"静的（エンジン）÷ transformers の出力 tok/s {q:.2f} 倍：同時リクエスト数 {r['concurrency']} のこの実行では"
            f"{who}です。方式ではなく実装の差で、{hf_gap.single_run_cause(r['concurrency'], kernels)}"
            "（プロンプトは長さがそろっているので、パディングはどの同時リクエスト数でも入りません）。方式のコストは連続 ÷ 静的で読みます。")


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
        return head + ("静的の tok/s/user が高いのは、主にこの重いステップのためです（組が小さくなってステップが速くなる効果は、"
                       "1ステップの時間が件数とともに伸びる分だけです。ラボのスイープの静的の TPOT で確かめる）。")
    if apart:
        return head + ("この実行では連続の TPOT のほうが短く、方式の差とは逆向きです。計測の途中で負荷が変わった可能性があります"
                       "（負荷の警告を確かめ、繰り返しを増やして測り直す）。")
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
    lines = [f"{UNDECIDED}：{DISTURBED}。下の読みは参考です。"] if (res.get("load") or {}).get("disturbed") else []
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
            line += f"、静的 ÷ transformers {r['hf_ratio']:.2f} 倍（速いのは{faster}）"
        out.append(line + f"、静的の TPOT 中央値 {r['tpot_static']:.1f} ms、グッドプット1件の刻み 連続 "
                   f"{r['goodput_step_cont']:.2f}・静的 {r['goodput_step']:.2f} 件/s")
    points = {c: (res["policies"]["static"], res["policies"]["hf_static"]) for c, res in runs.items()
              if "hf_static" in res["policies"] and "static" in res["policies"]}
    finished = {r["concurrency"]: _finished_share(r, runs, _fit(runs)[0]) for r in sweep_rows(runs)}
    kernels = next((res.get("engine_kernels") for res in runs.values() if res.get("engine_kernels")), None)
    return "\n".join(out + [floor_line(sweep_rows(runs)), hf_gap.gap_reading(points, kernels, finished)]).rstrip("\n")


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


def sweep_predictions(runs: dict[int, dict]) -> list[Prediction]:
    """The sweep's predictions: (1) from 2 requests at a time, continuous beats static beyond the repeats' range
    yet below the step-count ratio; (2) the step time grows, yet at the largest concurrency at least half of a
    step is fixed time (``_fit``: a / TPOT >= 0.5). A step time falling as the batch grows is read against the
    engine's Linear kernels timed at 1-8 rows in the same runs (``course.labkit.linear_rows``): their own shape, or load."""
    rows = sweep_rows(runs)
    multi = [r for r in rows if r["concurrency"] >= 2]
    gaps = "、".join(f"{r['concurrency']}: {r['ratio']:.2f}（ステップ数の比 {r['step_ratio']:.2f}、{_range_words(r['apart'])}）"
                    for r in multi)
    lo, hi = rows[0], rows[-1]
    slope, fixed, n_lo, n_hi = _fit(runs)
    share = fixed / hi["tpot_static"]
    growth = hi["tpot_static"] / lo["tpot_static"]
    tp = [r["tpot_static"] for r in rows]
    rising = all(b >= 0.95 * a for a, b in zip(tp, tp[1:]))
    if not rising or growth < 0.95:
        why = linear_rows.step_fall_reason(runs)         # the kernel's own row dependence, or load
    else:
        why = ("1スレッドで行列の計算が件数とともに伸びる CPU では、固定の時間の割合が小さくなります。"
               "COURSE_THREADS を変えて比べてください")
    return [
        Prediction("同時リクエスト数 2 以上で、連続 ÷ 静的の出力 tok/s の比は 1 より大きく（繰り返しの幅の外で、同時リクエスト数 1 の揺れの2倍より外）、"
                   "ステップ数の比（1ステップの時間が一定なら開く比）より小さい",
                   bool(multi) and all(1 < r["ratio"] < r["step_ratio"] and r["apart"] is not False and stands_out(rows, r) for r in multi),
                   f"同時リクエスト数ごとの比 {gaps}",
                   "比が 1 に近いか幅が重なるなら、Prefill と1トークンあたりの計算が実行時間の多くを占めて差が薄まっているか、"
                   "ほかのプログラムの負荷で計測がぶれています（警告と、表の下の同時リクエスト数 1 の比を確かめ、繰り返しや出力長を増やして測り直す）。"
                   "ステップ数の比を超えたなら計測のばらつきです"),
        Prediction(f"同時リクエスト数を {lo['concurrency']} → {hi['concurrency']} にすると、1ステップの時間（静的の TPOT の"
                   f"中央値）は伸びるが、{hi['concurrency']} 件ずつの組でも1ステップの半分以上は件数によらない固定の時間",
                   rising and growth >= 0.95 and share >= 0.5,
                   "静的の TPOT 中央値 " + " → ".join(f"{t:.1f}" for t in tp) + f" ms（{growth:.2f} 倍）。静的の"
                   f"ステップの平均の件数（出力トークン ÷ ステップ数）{n_lo:.1f} → {n_hi:.1f} 件の2点に直線を当てはめると、"
                   f"固定 {fixed:.1f} ms・1件あたり {slope:.2f} ms で、{hi['concurrency']} 件ずつの組での固定の割合 "
                   f"{100 * share:.0f} %", why),
    ]


def task2_predictions(res: dict, strict_ms: float = 300) -> list[Prediction]:
    """課題2 from one run's per-request TTFT/TPOT: tightening the TTFT SLO to ``strict_ms`` never raises either
    engine policy's goodput, and continuous keeps at least static's goodput (its requests start no later). Which
    one loses the larger share depends on the step time (whether static's second group starts within the SLO)."""
    p, loose, tpot = res["policies"], res["ttft_slo_ms"], res["tpot_slo_ms"]
    g = {k: [calc.goodput_rps(p[k]["ttft_ms_list"], p[k]["tpot_ms_list"], p[k]["duration_s"], slo, tpot)
             for slo in (loose, strict_ms)] for k in ("continuous", "static")}
    n = {k: round(g[k][1] * p[k]["duration_s"]) for k in g}
    drop = {k: (1 - g[k][1] / g[k][0]) * 100 if g[k][0] else 0.0 for k in g}
    measured = (f"グッドプット 連続 {g['continuous'][0]:.2f} → {g['continuous'][1]:.2f}（{drop['continuous']:.0f} % 減、"
                f"{strict_ms:g} ms を守ったのは {n['continuous']} 件）、静的 {g['static'][0]:.2f} → {g['static'][1]:.2f} 件/s"
                f"（{drop['static']:.0f} % 減、{n['static']} 件）。割合で大きく下がったのは"
                f"{'連続' if drop['continuous'] > drop['static'] else '静的'}")
    return [Prediction(f"TTFT の SLO を {loose:g} → {strict_ms:g} ms にすると、エンジンの2方式ともグッドプットは下がるか変わらず、"
                       f"{strict_ms:g} ms でも連続バッチングのグッドプットは静的バッチング以上",
                       all(b <= a for a, b in g.values()) and g["continuous"][1] >= g["static"][1], measured,
                       "連続バッチングでは、新しいリクエストの Prefill が入ったステップが重く、最初のトークンが遅れることがあります。"
                       "負荷の警告を確かめ、繰り返しを増やして測り直してください")]


def task1_rows(runs: dict[int, dict]) -> list[dict]:
    """Per output length: the spread, the idle share and continuous / static output tok/s."""
    rows = []
    for o, res in sorted(runs.items()):
        lens, p = res["output_lens"], res["policies"]
        steps_static, steps_cont = step_counts(lens, res["concurrency"])
        rows.append({"output_len": o, "spread": max(lens) - min(lens),
                     "idle_share": idle_share(lens, res["concurrency"]),
                     "step_ratio": steps_static / steps_cont,
                     "ratio": p["continuous"]["tok_s"] / p["static"]["tok_s"]})
    return rows


def task1_table(runs: dict[int, dict]) -> str:
    return "\n".join([f"出力長（最大）{r['output_len']:>4}: 最大 − 最小 {r['spread']:>3}、静的の空き枠 "
                      f"{100 * r['idle_share']:.1f} %、ステップ数の比 {r['step_ratio']:.2f} 倍、連続 ÷ 静的の出力 tok/s {r['ratio']:.2f} 倍"
                      for r in task1_rows(runs)] + [dilution_line(task1_rows(runs), runs)]).rstrip("\n")


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
        Prediction(f"{span} で、連続 ÷ 静的の出力 tok/s の比は、出力長 {hi['output_len']} の比が {lo['output_len']} の比の"
                   " 1.1 倍を超えるほどには広がらない",
                   hi["ratio"] < 1.1 * lo["ratio"],
                   f"連続 ÷ 静的 {lo['ratio']:.2f} → {hi['ratio']:.2f} 倍（{hi['output_len']} の比 ÷ {lo['output_len']} の比 "
                   f"= {hi['ratio'] / lo['ratio']:.2f}）",
                   "出力が短いと 64 トークンの Prefill が実行時間の多くを占め、Decode の空き枠の差が tok/s に"
                   "出にくい（出力が長いほど出やすい）。ほかのプログラムが CPU を使っていれば、負荷の警告を確かめ、"
                   "繰り返しを増やして測り直す"),
    ]


__all__ = ["TASK1_OUTPUT_LENS", "idle_share", "run_reading", "step_counts", "sweep_predictions", "sweep_rows",
           "sweep_table", "task1_predictions", "task1_rows", "task1_table", "task2_predictions"]
