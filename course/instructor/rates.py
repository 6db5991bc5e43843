"""What the dashboard shows, derived from successive /metrics snapshots
(``course.instructor.metrics``).

    series = Series(window_s=5)
    point = series.add(scrape(url))   # gauges now; rates and percentiles over the last window_s
    series.totals()                   # since the first snapshot: requests, tokens, tok/s, p50 / p99

Rates are counter differences over the window (output tok/s = Δ``generation_tokens`` / Δt).
Percentiles are those of the window's observations (the difference of two histograms). tok/s/user is
1 / mean ITL of the window: the mean gap between a request's tokens, which is what 1000 ÷ TPOT[ms]
measures while requests decode (TPOT itself is observed only when a request finishes). Each window
gives one point of the throughput / interactivity curve (chapters 1, 5, 10): x = tok/s/user, y =
output tok/s. A counter that goes down (the server restarted) starts the series again.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from course.instructor.metrics import Snapshot

QUANTILES = (0.5, 0.9, 0.99)
COUNTERS = ("generation_tokens", "prompt_tokens", "requests")


@dataclass(frozen=True)
class Point:
    t: float                    # seconds since the series' first snapshot
    running: float
    waiting: float
    kv_usage: float             # 0-1
    out_tok_s: float            # output tokens per second over the window
    prompt_tok_s: float
    requests_s: float           # finished requests per second
    tok_s_per_user: float       # 1 / mean ITL over the window (NaN when no token gap was observed)
    ttft_ms: tuple[float, float, float]     # p50, p90, p99 over the window
    tpot_ms: tuple[float, float, float]


def _delta(cur: Snapshot, old: Snapshot, key: str) -> float:
    return cur.values.get(key, 0.0) - old.values.get(key, 0.0)


def _quantiles_ms(cur: Snapshot, old: Snapshot, key: str) -> tuple[float, float, float]:
    if key not in cur.hists:
        return (math.nan,) * 3
    h = cur.hists[key].minus(old.hists[key]) if key in old.hists else cur.hists[key]
    return tuple(h.quantile(q) * 1e3 for q in QUANTILES)


def derive(old: Snapshot, cur: Snapshot, t0: float) -> Point:
    """The point shown at ``cur``, rates over ``old`` -> ``cur``; ``t0`` is the series' start."""
    dt = cur.at - old.at
    rate = (lambda k: _delta(cur, old, k) / dt) if dt > 0 else (lambda k: math.nan)   # noqa: E731
    itl = cur.hists.get("itl")
    if itl is not None and "itl" in old.hists:
        itl = itl.minus(old.hists["itl"])
    mean_itl = itl.mean if itl is not None else math.nan
    per_user = 1.0 / mean_itl if mean_itl > 0 else math.nan
    gauge = cur.values.get
    return Point(cur.at - t0, gauge("running", math.nan), gauge("waiting", math.nan),
                 gauge("kv_usage", math.nan), rate("generation_tokens"), rate("prompt_tokens"),
                 rate("requests"), per_user, _quantiles_ms(cur, old, "ttft"),
                 _quantiles_ms(cur, old, "tpot"))


class Series:
    """Snapshots in arrival order (at most ``keep``) and the points derived from them."""

    def __init__(self, window_s: float = 5.0, keep: int = 3600):
        if not (isinstance(window_s, (int, float)) and window_s > 0):
            raise ValueError(f"window_s（秒）は正の数で指定してください。 / window_s must be > 0, got {window_s!r}")
        self.window_s = float(window_s)
        self.snapshots: deque[Snapshot] = deque(maxlen=keep)
        self.points: deque[Point] = deque(maxlen=keep)
        self.first: Snapshot | None = None

    def _restarted(self, snap: Snapshot) -> bool:
        last = self.snapshots[-1]
        return any(snap.values.get(k, 0.0) < last.values.get(k, 0.0) for k in COUNTERS)

    def add(self, snap: Snapshot) -> Point:
        if self.snapshots and (snap.at <= self.snapshots[-1].at or self._restarted(snap)):
            self.snapshots.clear()
            self.points.clear()
            self.first = None
        if self.first is None:
            self.first = snap
        old = next((s for s in reversed(self.snapshots) if snap.at - s.at >= self.window_s),
                   self.snapshots[0] if self.snapshots else snap)
        self.snapshots.append(snap)
        point = derive(old, snap, self.first.at)
        self.points.append(point)
        return point

    def totals(self) -> dict:
        """Since the first snapshot: elapsed seconds, requests and output tokens, the mean output
        tok/s, the TTFT / TPOT percentiles (ms) of the requests that finished, the most requests
        running at once."""
        if self.first is None:
            return {}
        first, last = self.first, self.snapshots[-1]
        elapsed = last.at - first.at
        out = {"elapsed_s": elapsed, "model": last.model,
               "requests": _delta(last, first, "requests"),
               "output_tokens": _delta(last, first, "generation_tokens"),
               "prompt_tokens": _delta(last, first, "prompt_tokens"),
               "max_running": max((p.running for p in self.points), default=math.nan),
               "max_waiting": max((p.waiting for p in self.points), default=math.nan),
               "ttft_ms": _quantiles_ms(last, first, "ttft"),
               "tpot_ms": _quantiles_ms(last, first, "tpot")}
        out["out_tok_s"] = out["output_tokens"] / elapsed if elapsed > 0 else math.nan
        return out

    def curve(self) -> list[tuple[float, float, float]]:
        """(tok/s/user, output tok/s, running) of every point that decoded something."""
        return [(p.tok_s_per_user, p.out_tok_s, p.running) for p in self.points
                if p.out_tok_s > 0 and math.isfinite(p.tok_s_per_user)]


__all__ = ["Point", "QUANTILES", "Series", "derive"]
