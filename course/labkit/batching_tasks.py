"""Chapter 5 lab's stream step counts and its tasks 1 and 2 predictions (``course.labs.lab05_explain`` re-exports them).

課題1 varies the output length (maximum) ``o``: the lengths are drawn anew, uniform in [o/4, o]. 課題2 tightens
the TTFT SLO on one run's per-request TTFT/TPOT. A ratio prediction decided within the repeats' ranges prints
判定できません (``course.labkit.spread``).
"""
from __future__ import annotations

from course.labkit.policy_floor import dilution_line
from course.labkit.predictions import Prediction
from course.labkit.spread import RETRY, decide, ratio_span
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


def _ratio_prediction(span: str, lo: dict, hi: dict, runs: dict[int, dict]) -> Prediction:
    """課題1's ratio prediction (blind reading 10 ch05 #2): the step ratio, fixed by the drawn lengths, does not grow
    (at most 2 % up), and measured ÷ step ratio rises toward 1 as the 64-token prefills' share shrinks. The
    second part is decided on the ratios the repeats allow (``ratio_span``): held when even the longest output's
    smallest quotient is above the shortest's largest, missed when its largest is below the other's smallest,
    判定できません between (medians alone with one repeat). A missed step-ratio part is missed whatever the
    measurement."""
    (a0, a1), (b0, b1) = ([x / r["step_ratio"] for x in ratio_span(runs[r["output_len"]]["policies"]["static"],
                                                                   runs[r["output_len"]]["policies"]["continuous"], "tok_s")]
                          for r in (lo, hi))
    steps_flat = hi["step_ratio"] <= lo["step_ratio"] + 0.02
    q_lo, q_hi = lo["ratio"] / lo["step_ratio"], hi["ratio"] / hi["step_ratio"]
    both = (f"。繰り返しの組み合わせで {a0:.2f}〜{a1:.2f} → {b0:.2f}〜{b1:.2f}" if (a0, b0) != (a1, b1) else "")
    held = steps_flat and b0 > a1
    return decide(held, steps_flat and not (b0 > a1 or b1 < a0),
                  f"{span} で、ステップ数の比（抽選した出力長で決まる）は広がらない。測った比 ÷ ステップ数の比は"
                  "上がる（Prefill の割合が減り、測った比がステップ数の比に近づく）",
                  f"ステップ数の比 {lo['step_ratio']:.2f} → {hi['step_ratio']:.2f} 倍、測った比 ÷ ステップ数の比 "
                  f"{q_lo:.2f} → {q_hi:.2f}{both}",
                  ("この抽選では、長い出力の組ほど最長とほかの差が大きくなりました。乱数の種を変えて確かめてください"
                   if not steps_flat else
                   "測った比 ÷ ステップ数の比が下がりました。文脈とともに伸びる両方式の共通の仕事（長い文脈の Attention、"
                   "CPU の Decode で K・V を集める処理）が、Prefill の割合が減る効果より大きく効いています"), RETRY)


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
                   "乱数の種やリクエスト数を変えると、組ごとの最長の出力長が変わる。種を変えて平均を見てください"),
        _ratio_prediction(span, lo, hi, runs),
    ]


__all__ = ["TASK1_OUTPUT_LENS", "idle_share", "step_counts", "task1_predictions", "task1_rows", "task1_table",
           "task2_predictions"]
