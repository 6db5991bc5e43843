"""Concurrency 1 as the noise floor of continuous ÷ static (chapter 5 lab sweep; blind readings 8 #3, 2026-12-07d #1).

At concurrency 1 the two engine policies admit and run the same requests in the same order with the same tokens.
Their median ratio there only checks that the two measurements have no bias; the run's noise is the range that
ratio takes over the repeats (``ratio_span``: static's min/max against continuous's max/min). A ratio at 2 or
more is called the method's effect only when it is farther from 1 than every ratio concurrency 1's repeats allow.
With one repeat there is no range, and the single ratio stands in for it (said so in the printed line).
"""
from __future__ import annotations

from course.labkit.spread import ratio_span


def one_span(rows: list[dict]) -> tuple[float, float] | None:
    """Concurrency 1's continuous ÷ static ratio range over the repeats (its median twice without the policies'
    ranges); None without concurrency 1."""
    one = next((x for x in rows if x["concurrency"] == 1), None)
    if one is None:
        return None
    if "s" in one and "c" in one:
        return ratio_span(one["s"], one["c"], "tok_s")
    return one["ratio"], one["ratio"]


def floor(rows: list[dict]) -> float | None:
    """How far from 1 concurrency 1's repeats put the ratio (the larger side); None without concurrency 1."""
    sp = one_span(rows)
    return None if sp is None else max(abs(sp[0] - 1), abs(sp[1] - 1))


def stands_out(rows: list[dict], r: dict) -> bool:
    """Whether row r is farther from 1 than any ratio concurrency 1's repeats allow (True without a 1). With
    the policies' ranges (keys c, s) the end of r's own range nearest 1 must clear it, not its median
    (blind reading 10 ch05 #5: a median 0.001 past the floor with a range reaching into it is not apart)."""
    f = floor(rows)
    if f is None:
        return True
    near = _near_end(r)
    return (near - 1 if r["ratio"] >= 1 else 1 - near) > f


def _near_end(r: dict) -> float:
    """The end of row r's ratio range nearest 1 (its median without the policies' ranges)."""
    lo, hi = ratio_span(r["s"], r["c"], "tok_s") if "s" in r and "c" in r else (r["ratio"], r["ratio"])
    return lo if r["ratio"] >= 1 else hi


def floor_line(rows: list[dict]) -> str:
    """One line from sweep_rows (keys concurrency, ratio; c and s, the policies, for the range): concurrency 1's
    ratio range as the floor and which ratios at >= 2 stand out of it; '' without concurrency 1 or a ratio at >= 2."""
    one = next((r for r in rows if r["concurrency"] == 1), None)
    more = [r for r in rows if r["concurrency"] >= 2]
    if one is None or not more:
        return ""
    lo, hi = one_span(rows)
    f = floor(rows)                      # blind reading 11 ch05 #4: the criterion is the distance from 1, not the interval
    rng = (f"比は繰り返しの組み合わせで {lo:.2f}〜{hi:.2f} 倍の幅があります。1 から最も離れた端までの {f:.3f} を、"
           f"この実行の揺れの大きさとします。" if lo != hi else
           f"繰り返しが1回なので幅がありません。この比の 1 からの離れ {f:.3f} を揺れの目安にします。")
    head = (f"同時リクエスト数 1 では2つの方式が同じ順に同じ仕事をします。そこでの連続 ÷ 静的 {one['ratio']:.2f} 倍は、"
            f"2つの計測に偏りがないかの確かめです。{rng}")
    near = [r for r in more if not stands_out(rows, r)]
    if not near:
        return head + f"2 以上の比は、繰り返しの組み合わせで取りうる 1 に近い端まで、どれも 1 から ±{f:.3f} より離れています。"
    names = "・".join(f"{r['concurrency']} の {r['ratio']:.2f} 倍（1 に近い端 {_near_end(r):.3f}）" for r in near)
    return head + (f"同時リクエスト数 {names}は、繰り返しの組み合わせで取りうる比のうち 1 に近い端が、1 から ±{f:.3f} 以内です。"
                   "幅が重ならなくても、方式の差とは言い切れません。繰り返しを増やして測り直してください。")


def tpot_floor_line(rows: list[dict]) -> str:
    """Blind reading 10 ch05 #1: continuous ÷ static TPOT per concurrency with the repeats' range. At 1 the two
    policies do the same work, so a gap there is a bias between the two measurements; only a gap at >= 2 whose
    range clears 1's range asks for a scheduling cause. '' without concurrency 1, a row >= 2 or TPOT ranges."""
    have = [r for r in rows if r["c"].get("tpot_ms") and r["s"].get("tpot_ms")] if all("c" in r for r in rows) else []
    one = next((r for r in have if r["concurrency"] == 1), None)
    more = [r for r in have if r["concurrency"] >= 2]
    if one is None or not more:
        return ""
    sp = {r["concurrency"]: ratio_span(r["s"], r["c"], "tpot_ms") for r in have}
    words = "、".join(f"{r['concurrency']} で {r['c']['tpot_ms'] / r['s']['tpot_ms']:.2f}（{sp[r['concurrency']][0]:.2f}〜"
                     f"{sp[r['concurrency']][1]:.2f}）" for r in have)
    lo1, hi1 = sp[1]
    above = [r["concurrency"] for r in more if sp[r["concurrency"]][0] > hi1]
    head = (f"TPOT の連続 ÷ 静的（繰り返しの組み合わせで取りうる範囲）: {words}。同時リクエスト数 1 では2つの方式が同じ仕事を"
            "するので、そこでの差は2つの計測の偏りです。")
    if not above:
        return head + "2 以上で連続の TPOT が長くても、この幅を超えていないので、方式の差とは言えません。"
    return head + (f"{'・'.join(map(str, above))} では、連続の TPOT の長さがこの幅を超えています。超えた分だけが、重いステップ・"
                   "小さくなる組・文脈の長さの混ざりで説明するものです。")


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


__all__ = ["dilution_line", "floor", "floor_line", "one_span", "stands_out", "tpot_floor_line"]
