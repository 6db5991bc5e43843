"""Exercise 02: the model solution passes; typical mistakes fail with the message their hint promises."""

import pytest

from course.exercises import grade
from solution_loader import load


def solution():
    return load("ex02_decode_step_bound", "decode_step_bound")


def test_solution_passes():
    r = grade("02_decode_step_bound", solution())
    assert r.passed, str(r)


def adds(w, kv, f, peak, bw):
    return (w + kv) / bw + f / peak


def takes_min(w, kv, f, peak, bw):
    return min((w + kv) / bw, f / peak)


def forgets_kv(w, kv, f, peak, bw):
    return max(w / bw, f / peak)


@pytest.mark.parametrize("fn, promised", [(adds, "足しています"), (takes_min, "小さいほう"),
                                          (forgets_kv, "kv_bytes")])
def test_wrong_solutions_fail_with_their_message(fn, promised):
    r = grade("02_decode_step_bound", fn)
    assert not r.passed
    assert any(promised in c.message for c in r.cases if not c.passed), str(r)


def test_raising_and_looping_are_reported():
    def raising(*a):
        raise ZeroDivisionError("x")

    def looping(*a):
        while True:
            pass
    r = grade("02_decode_step_bound", raising)
    assert not r.passed and any("ZeroDivisionError" in c.message for c in r.cases)
    r = grade("02_decode_step_bound", looping, timeout_s=0.2)
    assert not r.passed and any("秒以内に終わりませんでした" in c.message for c in r.cases)


def test_the_solution_is_shown_next_to_steps_measured_on_this_machine():
    r = grade("02_decode_step_bound", solution(), record=False)
    measured = [c for c in r.cases if c.name.startswith("このマシン")]
    assert len(measured) == 2 and all(c.passed and "計測" in c.got and "ms" in c.got for c in measured), str(r)
