"""Exercise 02: the model solution passes; typical mistakes fail with the message their hint promises."""

import pytest

from course.exercises import grade
from solution_loader import load


def solution():
    return load("ex02_decode_step_bound", "decode_step_bound")


def test_solution_passes():
    r = grade("02_decode_step_bound", solution())
    assert r.passed, str(r)


def times(p, bpp, kvt, b, c, peak, bw, *, w_batch=1, kv_batch=True, kv_ctx=True, flop=2, f_batch=True):
    mem = (p * bpp * w_batch + kvt * (b if kv_batch else 1) * (c if kv_ctx else 1)) / bw
    return mem, flop * p * (b if f_batch else 1) / peak


def adds(*a):
    return sum(times(*a))


def takes_min(*a):
    return min(times(*a))


def forgets_kv(p, bpp, kvt, b, c, peak, bw):
    return max(p * bpp / bw, 2 * p * b / peak)


def memory_only(*a):
    return times(*a)[0]


def weights_per_request(*a):
    return max(times(*a, w_batch=a[3]))


def kv_of_one_request(*a):
    return max(times(*a, kv_batch=False))


def kv_of_one_token(*a):
    return max(times(*a, kv_ctx=False))


def one_flop_per_param(*a):
    return max(times(*a, flop=1))


def flops_of_one_request(*a):
    return max(times(*a, f_batch=False))


def returns_ms(*a):
    return 1000 * max(times(*a))


def returns_str(*a):
    return str(max(times(*a)))


@pytest.mark.parametrize("fn, promised", [
    (adds, "足しています"), (takes_min, "min をとった"), (forgets_kv, "KV キャッシュの読み出しを忘れて"),
    (weights_per_request, "重みをリクエストの数だけ"), (kv_of_one_request, "1リクエスト分しか"),
    (kv_of_one_token, "1トークン分しか"), (one_flop_per_param, "FLOPs が半分"),
    (flops_of_one_request, "FLOPs を1リクエスト分しか"), (returns_ms, "ミリ秒"), (returns_str, "str が返りました"),
    (memory_only, "読む時間（(重み + KV) ÷ bandwidth）で、この入力ではそれが小さいほう"),
])
def test_wrong_solutions_fail_with_their_message(fn, promised):
    r = grade("02_decode_step_bound", fn, record=False, engine=False)
    assert not r.passed
    failed = [c for c in r.cases if not c.passed]
    assert any(promised in c.message for c in failed), str(r)
    if fn is memory_only:               # reads only: exactly the compute-bound cases fail
        assert {c.name for c in failed} >= {"手計算：演算律速の側"} and any("バッチ 1024" in c.name for c in failed), str(r)


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


def test_a_datasheet_case_is_compute_bound_and_fits_the_gpu():
    """Review 2026-12-07 ch02 #5: the datasheet cases cover both sides of the ridge, each fitting one H100."""
    from course.exercises import ex02_decode_step_bound as ex
    from minimal_engine.calculators import get_model_shape, gpu_memory_bytes, kv_bytes_per_token, roofline
    p, kvt = get_model_shape("Llama 3.1 8B").params, kv_bytes_per_token("Llama 3.1 8B", "bf16")
    sides = []
    for batch, context in ex.DATASHEET_CASES:
        w, kv, f = ex.parts(p, 2, kvt, batch, context)
        assert w + kv <= gpu_memory_bytes("H100")
        sides.append(f / roofline.gpu_peak_flops("H100") > (w + kv) / roofline.gpu_bandwidth("H100"))
    assert sides == [False, False, True]


def test_a_near_miss_shows_the_digits_that_differ():
    def slightly_off(*a):
        return max(times(*a)) * (1 + 2e-6)
    r = grade("02_decode_step_bound", slightly_off, record=False, engine=False)
    case = next(c for c in r.cases if c.name == "手計算：演算律速の側")
    assert not case.passed and case.expected != case.got and case.got.startswith("1.024002"), str(case)


def in_float32(*a):
    import numpy as np
    return max(times(*(np.float32(x) for x in a)))


def test_a_float32_result_of_the_right_formula_passes():
    """Blind reading ch02 (reviews6) #6: np.float32 rounding (~1e-7) is not a wrong formula."""
    from course.exercises import ex02_decode_step_bound as ex
    r = grade("02_decode_step_bound", in_float32, record=False, engine=False)
    assert r.cases and all(c.passed for c in r.cases), str(r)
    assert ex.REL_TOL <= 1e-6    # a near miss of 2e-6 still fails


def test_counting_the_new_tokens_kv_write_passes():
    """Final blind reading 2026-12-07d ch02 #3: the lesson and step_cost count the new token's K and V write; a
    learner who adds it (or reads context + 1 tokens) passes with a note, not the generic failure message."""
    def with_write(p, bpp, kvt, b, c, peak, bw):
        return max(2 * p * b / peak, (p * bpp + kvt * (c + 1) * b) / bw)
    r = grade("02_decode_step_bound", with_write, record=False, engine=False)
    assert r.cases and all(c.passed for c in r.cases), str(r)
    assert any("書く分も数えた" in c.message for c in r.cases), str(r)


def test_flops_of_one_request_is_named_where_its_value_equals_the_read_time():
    """Blind reading reviews11 ch02 #4: on Llama 3.1 8B at batch 1024 the per-request FLOPs leave the compute time
    below the read time, so max(...) equals the read time (= the min); the FLOPs mistake is named first."""
    r = grade("02_decode_step_bound", flops_of_one_request, record=False, engine=False)
    case = next(c for c in r.cases if "バッチ 1024" in c.name)
    assert not case.passed and case.message.startswith("FLOPs を1リクエスト分しか"), str(case)
    assert "min をとった場合も" in case.message, case.message
