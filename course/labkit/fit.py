"""Two small readings of a series of step times: a least-squares line and the growth between its quarters.

    fit = line_fit(positions, ms)      # {"fixed", "slope", "r2"}: ms ≈ fixed + slope × position
    growth(ms)                         # median of the last quarter minus that of the first

Used by lab 3 (``course.labs.lab03_explain``: the no-cache step against its position, the cached step's flatness).
"""
from __future__ import annotations

import statistics


def line_fit(xs: list[float], ys: list[float]) -> dict:
    """Least squares ``y = fixed + slope x``: fixed, slope and r2 (1 - residual / total sum of squares)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    fixed = my - slope * mx
    tot = sum((y - my) ** 2 for y in ys)
    res = sum((y - fixed - slope * x) ** 2 for x, y in zip(xs, ys))
    return {"fixed": fixed, "slope": slope, "r2": 1 - res / tot if tot else 1.0}


def growth(ms: list[float]) -> float:
    """Median of the last quarter of the steps minus that of the first (robust to slow first steps, spikes)."""
    q = max(1, len(ms) // 4)
    return statistics.median(ms[-q:]) - statistics.median(ms[:q])


__all__ = ["growth", "line_fit"]
