"""Small helpers the graders of exercises 06-10 share: run the learner's function through kit.call and build Cases."""
from __future__ import annotations

from course.exercises.kit import Case, call

TIMEOUT_S = 20.0


def run(fn, *args, timeout_s: float = TIMEOUT_S):
    """(ok, value, message): kit.call's result read the same way whatever shape it has (it never raises)."""
    res = call(fn, *args, timeout_s=timeout_s)
    if isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], bool):
        return (True, res[1], "") if res[0] else (False, None, str(res[1]))
    ok = getattr(res, "ok", None)
    if ok is None:
        ok = getattr(res, "error", None) is None and getattr(res, "message", None) in (None, "")
    value = getattr(res, "value", None)
    return (bool(ok), value if ok else None, "" if ok else str(getattr(res, "message", None) or getattr(res, "error", "")))


def case(name: str, inp: str, expected: str, got: str, passed: bool, message: str) -> Case:
    """One graded case (the kit adds the escalating hint to a failed one)."""
    return Case(name=name, input=inp, expected=expected, got=got, passed=bool(passed),
                message="正解です。" if passed else message, hint="")


def failed_call(name: str, inp: str, expected: str, message: str) -> Case:
    """The learner's function raised, timed out or is not implemented yet: the kit's message says which."""
    return case(name, inp, expected, message, False, message)
