"""Why a verdict cannot decide, in measured words: the 1-minute load average (os.getloadavg, as course.labkit.excess
reads it: before and after a run, the larger) against the usable cores, and the spread of a run's repeats. Used by
lesson 6 §7 (blind reading 2026-12-07b, reviews6 ch06 #2: a saved batch-1 INT8 / BF16 of 1.66 stood unexplained).
"""
from __future__ import annotations


def load_sentence_ja(loads: list[tuple[float | None, int]]) -> str:
    """'' without a load average (Windows); else the highest 1-minute load against the usable cores."""
    loads = [(x, c) for x, c in loads if x is not None and c]
    if not loads:
        return ""
    top, cores = max(loads)
    return (f"1 分間のロードアベレージ（os.getloadavg）は最大 {top:.1f} で、使えるコア数（{cores}）"
            + ("を超えていました（計測中に、スレッドが CPU の空きを待っていました）" if top > cores else
               "以下でした（ただし、1 分間の平均なので短い負荷の山は隠れます）"))


def spread_sentence_ja(spreads: list[list[float]], what: str) -> str:
    """'' without repeats; else each run's lowest to highest value of ``what`` (a Japanese noun phrase)."""
    spreads = [s for s in spreads if s]
    return (f"{what}は " + "、".join(f"{min(s):.2f}〜{max(s):.2f}" for s in spreads) + " と揺れています") if spreads else ""


__all__ = ["load_sentence_ja", "spread_sentence_ja"]
