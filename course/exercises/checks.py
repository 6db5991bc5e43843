"""Small helpers the graders of exercises 06-10 share: run the learner's function through kit.call and build Cases."""
from __future__ import annotations

from course.exercises.kit import Case, call

TIMEOUT_S = 20.0


def run(fn, *args, timeout_s: float = TIMEOUT_S):
    """(ok, value, message): kit.call's CallResult unpacked (it never raises; message is its Japanese error)."""
    res = call(fn, *args, timeout_s=timeout_s)
    return (True, res.value, "") if res.ok else (False, None, str(res.error))


def case(name: str, inp: str, expected: str, got: str, passed: bool, message: str) -> Case:
    """One graded case (the kit adds the escalating hint to a failed one)."""
    return Case(name=name, input=inp, expected=expected, got=got, passed=bool(passed),
                message="正解です。" if passed else message, hint="")


def failed_call(name: str, inp: str, expected: str, message: str) -> Case:
    """The learner's function raised, timed out or is not implemented yet: the kit's message says which."""
    return case(name, inp, expected, message, False, message)
