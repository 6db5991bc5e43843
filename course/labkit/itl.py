"""The short requests' ITL gaps of an interference run (lab 9's result dicts): which setups, which gaps are long,
how many a prefill can stall, and which gaps shared a step with a long prompt's prefill.

A setup dict has ``budget`` (None for Disaggregation), ``median_itl_ms`` and ``itl_points``: (end of the gap in s
after the start, gap in ms) per short request's output token. The engine stamps every output of a step with one
``now`` (minimal_engine/engine/scheduler.py ``_append``), so the gaps of the requests decoding in the step that
produced a long prompt's first token end exactly at that first token's time. Used by lab09_explain (readings)
and lab09_tasks (the tasks' predictions); the sentences placing long gaps beyond stall_bound (excess_where) and
naming a load the watch did not see (other_load) are here so lab09_explain stays within the layout limit.
"""
from __future__ import annotations

import math

STALL_FACTOR = 2.0          # a gap longer than this x the setup's median ITL: "long" (mostly a step shared with a prefill)
BUSY = "ほかのプログラムが CPU を使っていると ITL の裾が揺れます。負荷の警告を確かめ、ほかのカーネルを止めて測り直してください"


def singles(res: dict) -> list[dict]:
    """The one-engine setups, smallest budget first."""
    return sorted((r for r in res["setups"].values() if r["budget"] is not None), key=lambda r: r["budget"])


def gaps(r: dict) -> list[float]:
    return [g for _, g in r["itl_points"]]


def stall_share(r: dict) -> tuple[int, int]:
    """(gaps longer than STALL_FACTOR x the median ITL, all gaps) of one setup."""
    g = gaps(r)
    return sum(x > STALL_FACTOR * r["median_itl_ms"] for x in g), len(g)


def p99_needs(n: int) -> int:
    """How many of the top gaps p99 reads (linear interpolation at rank 0.99 (n - 1), numpy's default): p99 is one of
    the long gaps (or between two of them) when at least n - floor(0.99 (n - 1)) gaps are long, a share of about
    1 % + 1/n: the share decides, and near the border the number of samples too."""
    return n - math.floor(0.99 * (n - 1)) if n else 0


def stall_bound(res: dict, r: dict) -> int | None:
    """The most gaps that can share a step with a long prompt's prefill at budget r: num_long prompts x their prefill
    steps (ceil(prompt_len / (budget - num_decodes))) x the decoding short requests. None when the run lacks them."""
    if "num_long" not in res or "num_decodes" not in res:
        return None
    steps = math.ceil(res["prompt_len"] / max(1, r["budget"] - res["num_decodes"]))
    return res["num_long"] * steps * res["num_decodes"]


def prefill_gaps(r: dict) -> list[float] | None:
    """The gaps that ended while a long prompt was being prefilled: after its arrival, up to and including the step
    that gave its first token (one engine: every chunk of its prefill; at a budget >= the prompt, the one step that
    prefills it whole). One per short request decoding in those steps, so their number counts the decoders the
    prefill stalled. None when the run lacks the long prompts' times."""
    wins = list(zip(r.get("long_arrivals_s") or [], r.get("long_first_token_s") or []))
    if not wins:
        return None
    return [g for t, g in r["itl_points"] if any(a < t <= f for a, f in wins)]


def step_split(r: dict) -> tuple[list[float], list[float]] | None:
    """(the gaps of the steps that carried a long prompt's prefill chunk: prefill_gaps, the other gaps: decode-only
    steps), from the run's step records (each gap ends at its step's time). At small budgets the chunk steps can be
    most of the gaps, so the overall median is no decode-only baseline; this split is. None without the times."""
    wins = list(zip(r.get("long_arrivals_s") or [], r.get("long_first_token_s") or []))
    if not wins:
        return None
    inside = [any(a < t <= f for a, f in wins) for t, _ in r["itl_points"]]
    return ([g for (_, g), i in zip(r["itl_points"], inside) if i],
            [g for (_, g), i in zip(r["itl_points"], inside) if not i])


def p99_sources(r: dict) -> tuple[int, int] | None:
    """Of the top p99_needs(n) gaps (those p99 is read from), how many were chunk steps: (chunk-step gaps, k)."""
    split = step_split(r)
    if split is None:
        return None
    tagged = sorted([(g, True) for g in split[0]] + [(g, False) for g in split[1]], key=lambda x: -x[0])
    k = p99_needs(len(tagged))
    return sum(c for _, c in tagged[:k]), k


def other_load(res: dict) -> str:
    """How the readings name other programs: the load watch ran and saw none -> only a load too short for it."""
    return "負荷の監視にかからない短い負荷" if (res.get("load") or {}).get("disturbed") is False else "ほかのプログラムの負荷"


def excess_where(res: dict, r: dict, extra: int) -> str:
    """Where the long gaps beyond stall_bound lie, with no cause asserted: those outside every prefill window
    (arrival < t <= first token) that end in the step right after a long prompt's first token (the first step in
    which that prompt decodes with the others: the first gap ending after its first token), and the rest. The
    candidates are named only; the run cannot separate them."""
    thr = STALL_FACTOR * r["median_itl_ms"]
    wins = list(zip(r.get("long_arrivals_s") or [], r.get("long_first_token_s") or []))
    pts = r["itl_points"]
    nxt = {min((t for t, _ in pts if t > f), default=None) for _, f in wins} - {None}
    out_long = [(t, g) for t, g in pts if g > thr and not any(a < t <= f for a, f in wins)]
    after = sum(t in nxt for t, _ in out_long)
    out = f"それを超える {extra} 個の長い間隔は、Prefill と同じステップの外にあります。"
    if wins and after:
        out += (f"そのうち {after} 個は、長いプロンプトの最初のトークンの直後のステップ（そのプロンプトが初めてほかの"
                "リクエストと一緒に Decode されるステップ）の間隔です。")
    cands = "CPU のクロックの変化、Python のガベージコレクション、" + other_load(res)
    if wins and after:
        cands = ("長いプロンプトが加わって Decode の件数と文脈の長さが増えたこと、直前の Prefill の大きな一時バッファの解放や"
                 "CPU のキャッシュの入れ替え、" + cands)
    return out + f"この実行では原因を区別できません（候補は、{cands}です）。"


__all__ = ["BUSY", "STALL_FACTOR", "excess_where", "gaps", "other_load", "p99_needs", "p99_sources", "prefill_gaps",
           "singles", "stall_bound", "stall_share", "step_split"]
