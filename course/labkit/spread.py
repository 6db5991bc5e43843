"""Deciding a comparison against the repeats' spread: a lab's measurements have a median and a min-max
range per setting (``course.labkit.measure.aggregate``), and on a loaded machine two settings' ranges can
overlap by more than the effect the lab predicts. A prediction that something *grows* then holds only when
the rise is beyond that overlap; otherwise the run cannot decide it::

    side = order(lo_row, hi_row, "tpot_ms")        # +1 above beyond the ranges, -1 below, 0 within noise
    p = decide(side > 0 and ratio < 2, side == 0, text, measured, otherwise)   # Prediction or Undecided

``Undecided`` prints 「判定できません」 with the measured ranges; ``verdict_state`` reads a saved line back
(tests re-derive saved verdicts). Without ``key_min`` / ``key_max`` (one repeat, a planted row) the range is
the median itself, so the comparison is the medians'.
"""
from __future__ import annotations

from course.labkit.predictions import HELD, MISSED, UNDECIDED, Prediction

NOISE = "差は繰り返しの揺れ（最小〜最大）の範囲内です"
RETRY = "揺れを小さくするには、負荷の警告を確かめ、ほかのプログラムを止めるか繰り返しを増やして測り直します"


class Undecided(Prediction):
    """A comparison within the repeats' spread: printed as 判定できません with the ranges (``held`` is None)."""

    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{NOISE}。{self.otherwise}"


def span(row: dict, key: str) -> tuple[float, float]:
    """(min, max) of ``key`` over the repeats; the median twice when the row has no range."""
    return row.get(f"{key}_min", row[key]), row.get(f"{key}_max", row[key])


def order(lo: dict, hi: dict, key: str, factor: float = 1.0) -> int:
    """+1 when every repeat of ``hi`` is above ``factor`` x every repeat of ``lo``, -1 when every one is
    below, 0 when the ranges overlap (the difference is within the noise). Two rows without ranges are
    decided by their medians, a tie counting as not above (-1)."""
    (a0, a1), (b0, b1) = span(lo, key), span(hi, key)
    if b0 > factor * a1:
        return 1
    if b1 < factor * a0 or (a0 == a1 and b0 == b1):
        return -1
    return 0


def ratio_span(lo: dict, hi: dict, key: str) -> tuple[float, float]:
    """The smallest and largest ratio hi / lo the repeats allow: (hi min / lo max, hi max / lo min)."""
    (a0, a1), (b0, b1) = span(lo, key), span(hi, key)
    return b0 / a1, b1 / a0


def spread_text(row: dict, key: str, unit: str = "", fmt: str = "{:.1f}") -> str:
    """'median unit（min〜max）', or the median alone without a range."""
    lo, hi = span(row, key)
    return fmt.format(row[key]) + unit + (f"（{fmt.format(lo)}〜{fmt.format(hi)}）" if lo != hi else "")


def decide(held: bool, undecided: bool, text: str, measured: str, otherwise: str = "", noise: str = "") -> Prediction:
    """A Prediction (held or missed, with ``otherwise``), or an Undecided one (with ``noise``, what to try)."""
    if undecided:
        return Undecided(text, None, measured, noise)
    return Prediction(text, bool(held), measured, otherwise)


def verdict_state(line: str) -> bool | None | str:
    """True / False / None for a saved 予想どおり / 予想と違う / 判定できません line; '' for any other line."""
    return True if line.startswith(HELD) else False if line.startswith(MISSED) else None if line.startswith(UNDECIDED) else ""


__all__ = ["NOISE", "RETRY", "UNDECIDED", "Undecided", "decide", "order", "ratio_span", "span", "spread_text", "verdict_state"]
