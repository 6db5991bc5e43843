"""Concurrency 1 as the noise floor of continuous ÷ static (chapter 5 lab sweep; blind reading 8 ch05 #3).

At concurrency 1 the two engine policies admit and run the same requests in the same order with the same tokens,
so their tok/s ratio there is the run's noise (or a bias between the two measurements), not the method. The
ratios at 2 or more are read against it: one that is no farther from 1 than FLOOR_FACTOR times concurrency 1's
distance is not called the method's effect, even when its repeats' ranges are apart.
"""
from __future__ import annotations

from course.labkit.spread import ratio_span

FLOOR_FACTOR = 2     # a course heuristic: twice the null's distance from 1, not a statistical test


def stands_out(rows: list[dict], r: dict) -> bool:
    """Whether row r's ratio is farther from 1 than FLOOR_FACTOR times concurrency 1's (True without a 1)."""
    one = next((x for x in rows if x["concurrency"] == 1), None)
    return one is None or abs(r["ratio"] - 1) > FLOOR_FACTOR * abs(one["ratio"] - 1)


def floor_line(rows: list[dict]) -> str:
    """One line from sweep_rows (keys concurrency, ratio): concurrency 1's ratio as the floor and which ratios
    at >= 2 stand out of it; '' without concurrency 1 or a ratio at >= 2."""
    one = next((r for r in rows if r["concurrency"] == 1), None)
    more = [r for r in rows if r["concurrency"] >= 2]
    if one is None or not more:
        return ""
    d1 = abs(one["ratio"] - 1)
    head = (f"同時リクエスト数 1 では2つの方式が同じ順に同じ仕事をするので、そこでの連続 ÷ 静的 {one['ratio']:.2f} 倍は"
            f"方式の差ではなく、この実行の揺れの大きさです。")
    near = [r for r in more if not stands_out(rows, r)]
    if not near:
        return head + f"2 以上の比は、どれも 1 からこの揺れの {FLOOR_FACTOR} 倍より離れています。"
    names = "・".join(f"{r['concurrency']} の {r['ratio']:.2f} 倍" for r in near)
    return head + (f"同時リクエスト数 {names}は、1 からの離れ方がこの揺れの {FLOOR_FACTOR} 倍以内です。"
                   "幅が重ならなくても、方式の差とは言い切れません（測り直して、1 の比が 1 に近づくかを確かめます）。")


def dilution_line(rows: list[dict], runs: dict[int, dict]) -> str:
    """Lab 5 task 1 (blind reading 8 ch05 #4): measured ÷ step ratio per output length, and which of two opposing
    effects the run shows. A longer output shrinks the prefill's share (the ratio moves toward the step ratio);
    it also lengthens the contexts, so work shared by both policies that grows with the context (decode attention,
    the CPU decode's K/V gather) takes a larger share (the ratio moves away from it). Undecided within the repeats'
    ranges. rows: task1_rows (output_len, ratio, step_ratio); runs: output length -> run."""
    if len(rows) < 2:
        return ""
    q = {r["output_len"]: [x / r["step_ratio"] for x in ratio_span(runs[r["output_len"]]["policies"]["static"],
                                                                 runs[r["output_len"]]["policies"]["continuous"], "tok_s")]
         for r in rows}
    lo, hi = rows[0], rows[-1]
    a, b = lo["ratio"] / lo["step_ratio"], hi["ratio"] / hi["step_ratio"]
    head = "測った比 ÷ ステップ数の比: " + "、".join(f"{r['output_len']} で {r['ratio'] / r['step_ratio']:.2f}" for r in rows) + "。"
    (a0, a1), (b0, b1) = q[lo["output_len"]], q[hi["output_len"]]
    if a0 == a1 or b0 == b1 or not (b1 < a0 or b0 > a1):
        return head + ("出力長とともに上がる向き（Prefill の割合が減る）と下がる向き（文脈とともに伸びる両方式の共通の仕事）の"
                       "どちらが勝ったかは、繰り返しの幅の中で判定できません。")
    if b < a:
        return head + ("出力長とともに下がりました。この実行では、文脈とともに伸びる両方式の共通の仕事（長い文脈の Attention、"
                       "CPU の Decode で K・V を集める処理）による薄まりが、Prefill の割合が減る効果より大きく出ています。")
    return head + "出力長とともに上がりました。この実行では、Prefill の割合が減る効果が、文脈とともに伸びる共通の仕事より大きく出ています。"


__all__ = ["FLOOR_FACTOR", "dilution_line", "floor_line", "stands_out"]
