"""How a run's requests arrive: all at once, at a fixed rate (Poisson, seeded), or a late long prompt.

A plan is a list of dicts, one per request, in the order they are sent::

    {"prompt_len": 64, "offset_s": 0.0, "after_tokens": None, "late": False}

``offset_s``: seconds after the run's start (as vLLM's client: exponential gaps for a rate).
``after_tokens``: instead of a time, the request arrives once the earlier requests have received that many
output tokens in total (so "while the others decode" holds on any machine, fast or slow).
"""
from __future__ import annotations

import random

ARRIVALS = {                    # kind -> label in the lab's menu
    "all": "一斉に（全員が同時に到着）",
    "poisson": "一定のレート（ポアソン到着）",
    "late_long": "遅れて長いプロンプトが1件到着",
}
DEFAULT_RATE = 20.0             # requests per second for "poisson"


def check_arrivals(kind) -> str:
    if kind not in ARRIVALS:
        raise ValueError(f"到着のしかた（arrivals）は {list(ARRIVALS)} のどれかで指定してください。"
                         f" / arrivals must be one of {list(ARRIVALS)}, got {kind!r}")
    return kind


def check_rate(rate) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 10_000:
        raise ValueError(f"到着レート（rate）は 0 より大きく 10000 以下の数（件/秒）で指定してください。"
                         f" / rate must be a number in (0, 10000] requests/s, got {rate!r}")
    return float(rate)


def arrival_plan(kind: str, concurrency: int, prompt_len: int, output_len: int, seed: int = 0,
                 rate: float = DEFAULT_RATE, late_prompt_len: int | None = None) -> list[dict]:
    """The requests of one run.

    - "all": ``concurrency`` requests at time 0.
    - "poisson": ``concurrency`` requests, the first at 0, then exponential gaps of mean ``1/rate`` s
      (seeded by ``seed``).
    - "late_long": ``concurrency`` requests at 0, then one more with ``late_prompt_len`` tokens
      (default 4 x ``prompt_len``) once the others have received about a third of their output tokens.
    """
    check_arrivals(kind)
    plan = [{"prompt_len": prompt_len, "offset_s": 0.0, "after_tokens": None, "late": False}
            for _ in range(concurrency)]
    if kind == "poisson":
        rng, t = random.Random(seed), 0.0
        for req in plan[1:]:
            t += rng.expovariate(check_rate(rate))
            req["offset_s"] = t
    elif kind == "late_long":
        n = late_prompt_len if late_prompt_len is not None else 4 * prompt_len
        plan.append({"prompt_len": n, "offset_s": None, "after_tokens": concurrency * max(1, output_len // 3),
                     "late": True})
    return plan


def describe(kind: str, rate: float | None = None, late_prompt_len: int | None = None) -> str:
    """A short Japanese label for a history row."""
    if kind == "poisson":
        return f"ポアソン {rate:g} 件/秒"
    if kind == "late_long":
        return f"遅れて長いプロンプト {late_prompt_len}"
    return "一斉"


__all__ = ["ARRIVALS", "DEFAULT_RATE", "arrival_plan", "check_arrivals", "check_rate", "describe"]
