"""Predictions checked by the run: a lab task states what the learner will see, and the notebook computes,
from the numbers it just measured, whether that held on this machine.

    p = Prediction("ITL 最大は TPOT の 3 倍以上", held=itl_max >= 3 * tpot,
                   measured=f"ITL 最大 {itl_max:.1f} ms、TPOT {tpot:.1f} ms",
                   otherwise="…このマシンで違うときに考えられる理由と、試すこと…")
    print(p.verdict())     # 予想どおり：… / 予想と違う：… (measured values and reasons)

A saved notebook therefore never shows a prediction that its own numbers contradict: the verdict is printed
next to the numbers, and `tests/course/test_predictions.py` re-derives each saved verdict from the saved
numbers. How to write one: state the prediction as a comparison the run can decide (a ratio, an order, a
threshold with the margin the text allows), put the measured values in `measured`, and in `otherwise` the
likely reasons on a CPU that differs (cores, load, a different kernel) and what to try.
"""
from __future__ import annotations

from dataclasses import dataclass

HELD = "予想どおり"
MISSED = "予想と違う"


@dataclass(frozen=True)
class Prediction:
    text: str           # the prediction, as the lab states it
    held: bool          # computed from the measured numbers
    measured: str       # the numbers it was decided on
    otherwise: str = ""  # likely reasons, and what to try, when it did not hold
    basis: str = "測定"  # what the numbers are: measured (the default) or a simulator's 予測 (lab 10's tables)

    def verdict(self) -> str:
        if self.held:
            return f"{HELD}：{self.text}（{self.basis}：{self.measured}）"
        reasons = f" 考えられる理由：{self.otherwise}" if self.otherwise else ""
        return f"{MISSED}：{self.text}（{self.basis}：{self.measured}）。{reasons}".rstrip()


def verdicts(predictions: list[Prediction]) -> str:
    """One line per prediction, as the lab prints them."""
    return "\n".join(p.verdict() for p in predictions)
