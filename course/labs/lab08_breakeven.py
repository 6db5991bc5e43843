"""Lab 8, break-even section: both drafts' cost c measured the same way, and readings decided by the run::

    costs = measure_costs(lab08.measure_draft_cost, ("draft_model", "draft_model_lm"))
    print(cost_line(costs, labels))
    info = row_info(x, k, costs[m], lab08.break_even_alpha, calc.spec_speedup, speedup_span(res, m))
    print(note(label, info))                      # k = 2: no prediction, a reading decided by the ranges
    print(prediction(label, info, distilled).verdict())   # k = 4

c is the ratio of one draft step to one target decode step (``lab08.measure_draft_cost``). Both drafts are
measured alternately (d1, d2, d1, d2, ...), ``repeats`` times each, with the same settings as the formula
section's c, and the median is used with its min-max. Blind reading 2026-12-07d ch08 #1: one sample per draft
gave 0.44 and 0.19, where repeated measurements give about 0.28 for both; the break-even alphas and the readings
built on them were an artifact of that single sample. The break-even alpha rises with c, so the smallest and
largest c give its range, and the formula's speedup its range the other way round.
"""
from __future__ import annotations

import statistics

from course.labkit.predictions import Prediction
from course.labkit.spread import RETRY, decide


def measure_costs(measure, methods, repeats: int = 3, **kw) -> dict[str, dict]:
    """{method: {"c", "c_min", "c_max", "runs"}}: ``measure(method=m, **kw)["c"]``, the methods alternating."""
    runs = {m: [] for m in methods}
    for _ in range(repeats):
        for m in methods:               # alternating: a change of load hits both drafts alike
            runs[m].append(measure(method=m, **kw)["c"])
    return {m: {"c": statistics.median(v), "c_min": min(v), "c_max": max(v), "runs": v} for m, v in runs.items()}


def _c(x: dict) -> str:
    return f"{x['c']:.2f}（{x['c_min']:.2f}〜{x['c_max']:.2f}）"


def cost_line(costs: dict[str, dict], labels: dict[str, str], earlier: dict | None = None) -> str:
    """Both c with their ranges, whether the ranges overlap, and the formula section's c (``earlier``) beside them."""
    n = len(next(iter(costs.values())).get("runs", ())) or "複数"
    text = (f"c（ドラフト1ステップ ÷ ターゲットの Decode 1ステップ。2つを交互に {n} 回ずつ測った中央値と最小〜最大）: "
            + "、".join(f"{labels[m]} {_c(x)}" for m, x in costs.items()))
    if earlier:
        text += f"。式の予測の節の c: {_c(earlier)}"
    (a, x), (b, y) = list(costs.items())[:2]
    if x["c_max"] < y["c_min"] or y["c_max"] < x["c_min"]:
        lo, hi = (a, b) if x["c_max"] < y["c_min"] else (b, a)
        text += f"\n→ {labels[lo]}の c は、繰り返しの幅を超えて{labels[hi]}より小さく測れました"
    else:
        text += "\n→ 2つの c の幅は重なります。この実行では、2つのドラフトのコストの違いは見分けられません"
    same = costs.get("draft_model")             # the formula section measured the distilled draft
    if earlier and same and (earlier["c_max"] < same["c_min"] or same["c_max"] < earlier["c_min"]):
        text += ("\n→ 式の予測の節の c は、ここで同じ方法で測った" + labels.get("draft_model", "draft_model") + "の c の幅の外です。"
                 "c は測ったときの負荷で変わります。式の予測の節の判定はその c に左右されているので、"
                 "この節の c で出した下の判定（式の予測は、どの行でも実測以上になる）と比べてください")
    return text


def row_info(alpha: float, k: int, cost: dict, break_even, speedup_fn, speedup: float, span: tuple) -> dict:
    """The break-even alpha and the formula's speedup at the median c and at the c range's ends; the measured
    speedup and its span over the repeats. break_even(k, c), speedup_fn(alpha, k, c)."""
    return {"alpha": alpha, "k": k, "c": cost["c"], "c_min": cost["c_min"], "c_max": cost["c_max"],
            "be": break_even(k, cost["c"]), "be_lo": break_even(k, cost["c_min"]), "be_hi": break_even(k, cost["c_max"]),
            "pred": speedup_fn(alpha, k, cost["c"]), "pred_lo": speedup_fn(alpha, k, cost["c_max"]),
            "pred_hi": speedup_fn(alpha, k, cost["c_min"]), "sp": speedup, "sp_lo": span[0], "sp_hi": span[1]}


def _numbers(i: dict) -> str:
    return (f"受理率 α {i['alpha']:.3f}、損益分岐の α {i['be']:.3f}（c の幅で {i['be_lo']:.3f}〜{i['be_hi']:.3f}）、"
            f"速度比 {i['sp']:.2f}（繰り返しで {i['sp_lo']:.2f}〜{i['sp_hi']:.2f}）")


HIGHER = ("実際の損益分岐が式より高かった例です。式の予測が実測より大きい向きで、"
          "式の予測の節の2つのずれ（検証の時間、c の測り方）のどちらか、または両方がこの向きに効いています")
LOWER = ("実際の損益分岐が式より低かった例です。式の予測が実測より小さい向きで、検証のステップが Decode の"
         "1ステップより短いとき（式の予測の節の、Linear 層だけの時間の印字）に起こります")


NEAR = 0.03   # alpha this close to the break-even's range: the formula's speedup is within a few % of 1


def note(label: str, i: dict) -> str:
    """One line for a k without a prediction: alpha against the break-even's range, the speedup against 1."""
    line = f"k = {i['k']}：{label}の{_numbers(i)}"
    if i["be_lo"] <= i["alpha"] <= i["be_hi"]:
        return line + "。α が c の幅で動く損益分岐の中にあるので、式では速いか遅いかが決まりません"
    if i["be_lo"] - NEAR <= i["alpha"] <= i["be_hi"] + NEAR:     # blind reading 2026-12-07 ch08 #8: 0.352 vs 0.353
        return line + (f"。α が c の幅で動く損益分岐の端から {NEAR} 以内なので（式の速度比はほぼ 1）、"
                       "式では速いか遅いかが決まりません")
    fast = i["alpha"] > i["be_hi"]
    line += "。式は投機なしより" + ("速い" if fast else "遅い") + "と予測します"
    if i["sp_lo"] <= 1 <= i["sp_hi"]:
        return line + "。速度比の幅が 1 をまたぐので、測定では速いか遅いかが決まりません"
    if (i["sp_lo"] > 1) == fast:
        return line + "。測定も式どおりです"
    return line + "。ところが測定では" + ("遅くなりました。" + HIGHER if fast else "速くなりました。" + LOWER)


def prediction(label: str, i: dict, distilled: bool) -> Prediction:
    """The distilled draft's alpha is above the break-even and it is faster than no speculation; the undistilled
    one's is below and it is slower. alpha inside the break-even's range over c, or a speedup span across 1, is
    判定できません whichever way the medians fall (the run cannot decide it)."""
    side, pace = ("上回り", "速い") if distilled else ("下回り", "遅い")
    above, faster = i["alpha"] > i["be"], i["sp"] > 1
    held = above == distilled and faster == distilled
    within = i["be_lo"] <= i["alpha"] <= i["be_hi"] or i["sp_lo"] <= 1 <= i["sp_hi"]
    why = (HIGHER if above and not faster else LOWER if faster and not above else "") or "c や速度比が負荷でばらついた"
    return decide(held, within, f"{label}は、受理率 α が損益分岐の α を{side}、投機なしより{pace}",
                  _numbers(i), why + "。負荷の警告を確かめ、繰り返しを増やして測り直してください", RETRY)


__all__ = ["HIGHER", "LOWER", "cost_line", "measure_costs", "note", "prediction", "row_info"]
