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


def memory_only(w, kv, f, peak, bw):
    return (w + kv) / bw


def test_a_datasheet_case_is_compute_bound_and_fits_the_gpu():
    """Review 2026-12-07 ch02 #5: the datasheet cases cover both sides of the ridge, each fitting one H100."""
    from course.exercises import ex02_decode_step_bound as ex
    from minimal_engine.calculators import gpu_memory_bytes, roofline
    sides = []
    for batch, context in ex.DATASHEET_CASES:
        b = roofline.decode_step_bytes("Llama 3.1 8B", batch=batch, context=context)
        assert b["weight_bytes"] + b["kv_bytes"] <= gpu_memory_bytes("H100")
        flops = roofline.decode_step_flops("Llama 3.1 8B", batch=batch, context=context)
        compute = flops / roofline.gpu_peak_flops("H100")
        sides.append(compute > (b["weight_bytes"] + b["kv_bytes"]) / roofline.gpu_bandwidth("H100"))
    assert sides == [False, False, True]
    r = grade("02_decode_step_bound", memory_only, record=False)
    failed = [c.name for c in r.cases if not c.passed]
    assert any("バッチ 1024" in name for name in failed), str(r)


def test_a_near_miss_shows_the_digits_that_differ():
    r = grade("02_decode_step_bound", adds, record=False)
    case = next(c for c in r.cases if c.name == "手計算：演算律速の側")
    assert not case.passed and case.expected != case.got and case.got.startswith("1.000002"), str(case)


def returns_ms(w, kv, f, peak, bw):
    return 1000 * max((w + kv) / bw, f / peak)


def returns_str(w, kv, f, peak, bw):
    return str(max((w + kv) / bw, f / peak))


@pytest.mark.parametrize("fn, promised", [(memory_only, "メモリ側（(weight_bytes + kv_bytes) ÷ bandwidth）の時間だけ"),
                                          (returns_ms, "ミリ秒"), (returns_str, "str が返りました")])
def test_blind_reading_ch02_grader_diagnoses(fn, promised):
    """Blind reading 2026-12-07b ch02 #8, #9: a memory-only function is not told it took a min; a str or a
    millisecond return fails with its own message."""
    r = grade("02_decode_step_bound", fn, record=False)
    assert not r.passed
    msgs = [c.message for c in r.cases if not c.passed]
    assert msgs and any(promised in m for m in msgs), str(r)


def in_float32(w, kv, f, peak, bw):
    import numpy as np
    w, kv, f, peak, bw = (np.float32(x) for x in (w, kv, f, peak, bw))
    return max((w + kv) / bw, f / peak)


def test_a_float32_result_of_the_right_formula_passes():
    """Blind reading ch02 (reviews6) #6: np.float32 rounding (~1e-7) is not a wrong formula."""
    from course.exercises import ex02_decode_step_bound as ex
    r = grade("02_decode_step_bound", in_float32, record=False, engine=False)
    assert r.cases and all(c.passed for c in r.cases), str(r)
    assert ex.REL_TOL <= 1e-6    # the hand case's near miss (1.000002 vs 1) still fails
