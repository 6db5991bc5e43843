"""Speculative decoding's two acceptance figures, shared by lab 8 and its readings.

vLLM's "acceptance rate" is accepted / proposed (the course's 提案の採用率). Leviathan et al.
(2023)'s alpha (受理率 α) is the probability that a draft is accepted given that the drafts before
it were; the expected tokens per step (1 - alpha^(k+1)) / (1 - alpha) takes this alpha.
``alpha_from_length`` solves that formula for a measured mean accepted length.
"""
from __future__ import annotations

from minimal_engine.calculators.roofline import spec_tokens_per_step


def alpha_from_length(mean_len: float, k: int) -> float:
    """The alpha at which (1 - a^(k+1)) / (1 - a) equals ``mean_len`` (bisection: it rises
    with a)."""
    if not 1 <= mean_len <= k + 1:
        raise ValueError(f"平均受理長は 1〜k+1（{k + 1}）です。 / mean_len must be in [1, k+1], "
                         f"got {mean_len!r}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spec_tokens_per_step(mid, k) < mean_len else (lo, mid)
    return (lo + hi) / 2


def constant_alpha_gains(ks: list[int], mean_len0: float) -> tuple[float, list[float]]:
    """alpha solved at the smallest k (``mean_len0``) and the mean length's gain per added draft between
    consecutive ks if alpha stayed there: what alpha^i alone predicts for diminishing returns in k."""
    a = alpha_from_length(mean_len0, ks[0])
    return a, [(spec_tokens_per_step(a, b) - spec_tokens_per_step(a, c)) / (b - c) for c, b in zip(ks, ks[1:])]
