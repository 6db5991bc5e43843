"""Concurrency 1 as the noise floor of continuous ÷ static (chapter 5 lab sweep; blind reading 8 ch05 #3).

At concurrency 1 the two engine policies admit and run the same requests in the same order with the same tokens,
so their tok/s ratio there is the run's noise (or a bias between the two measurements), not the method. The
ratios at 2 or more are read against it: one that is no farther from 1 than FLOOR_FACTOR times concurrency 1's
distance is not called the method's effect, even when its repeats' ranges are apart.
"""
from __future__ import annotations

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


__all__ = ["FLOOR_FACTOR", "floor_line", "stands_out"]
