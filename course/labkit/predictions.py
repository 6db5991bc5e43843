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

A run that other programs crowded (``course.labkit.load.LoadWatch``: its ``load`` says ``disturbed``) decides
nothing: ``verdicts(predictions, res["load"])`` prints each of its predictions as 判定できません with the
numbers, so a verdict never rests on a disturbed run.
"""
from __future__ import annotations

from dataclasses import dataclass

from course.labkit.load import was_disturbed

HELD = "予想どおり"
MISSED = "予想と違う"
UNDECIDED = "判定できません"
DISTURBED = "計測のあいだにほかのプログラムが CPU を使っていたので、この実行では判定しません（上の ⚠ を参照）"


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


class Disturbed(Prediction):
    """A prediction of a run that other programs crowded: 判定できません with the numbers (``held`` is None)."""

    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{DISTURBED}。"


def under_load(predictions: list[Prediction], *loads: dict | None) -> list[Prediction]:
    """The predictions as they stand after the load checks of the runs they were decided on: each decided
    one becomes ``Disturbed`` when any of ``loads`` (a lab result's ``load``) says ``disturbed``."""
    if not was_disturbed(*loads):
        return list(predictions)
    return [p if p.held is None else Disturbed(p.text, None, p.measured, p.otherwise, p.basis) for p in predictions]


def verdicts(predictions: list[Prediction], *loads: dict | None) -> str:
    """One line per prediction, as the lab prints them; pass the runs' ``load`` dicts so that a disturbed
    run's predictions print 判定できません."""
    return "\n".join(p.verdict() for p in under_load(predictions, *loads))
