"""Exercise 01: the model solution passes; typical mistakes fail with the message their hint promises."""

import pytest

from course.exercises import grade
from solution_loader import load


def load_solution(name: str, fn: str):
    return load(name, fn)


def test_solution_passes():
    report = grade("01_request_metrics", load_solution("ex01_request_metrics", "request_metrics"))
    assert report.passed, str(report)
    assert "合格" in report.summary and "<table>" in report._repr_html_()


def tpot_over_all_tokens(a, t):        # divides by n instead of n - 1
    return {"ttft": t[0] - a, "tpot": (t[-1] - a) / len(t), "itl": [y - x for x, y in zip(t, t[1:])], "e2el": t[-1] - a}


def ttft_from_zero(a, t):              # forgets the arrival time
    return {"ttft": t[0], "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None,
            "itl": [y - x for x, y in zip(t, t[1:])], "e2el": t[-1]}


def single_token_zero(a, t):           # TPOT 0 for one token, and itl with a leading gap from arrival
    return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else 0.0,
            "itl": [y - x for x, y in zip([a] + t, t)], "e2el": t[-1] - a}


def itl_rounded(a, t):                 # right, but the gaps rounded to 1 µs
    return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None,
            "itl": [round(y - x, 6) for x, y in zip(t, t[1:])], "e2el": t[-1] - a}


def rounded_to_ms(a, t):               # right, but every value rounded to milliseconds (3 decimals)
    tpot = round((t[-1] - t[0]) / (len(t) - 1), 3) if len(t) > 1 else None
    return {"ttft": round(t[0] - a, 3), "tpot": tpot, "itl": [round(y - x, 3) for x, y in zip(t, t[1:])],
            "e2el": round(t[-1] - a, 3)}


def itl_backwards(a, t):               # the right length, the gaps with the wrong sign
    return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None,
            "itl": [x - y for x, y in zip(t, t[1:])], "e2el": t[-1] - a}


def in_milliseconds(a, t):             # right, but every value in ms
    ms = [1000 * x for x in t]
    return {"ttft": ms[0] - 1000 * a, "tpot": (ms[-1] - ms[0]) / (len(t) - 1) if len(t) > 1 else None,
            "itl": [y - x for x, y in zip(ms, ms[1:])], "e2el": ms[-1] - 1000 * a}


@pytest.mark.parametrize("fn, promised", [(in_milliseconds, "ミリ秒になっています"),
                                          (tpot_over_all_tokens, "tpot が違います"),
                                          (ttft_from_zero, "ttft が違います"),
                                          (single_token_zero, "1トークンだけのときは None"),
                                          (itl_rounded, "itl の値が丸められています"),
                                          (rounded_to_ms, "の値が丸められています"),
                                          (itl_backwards, "長さ n − 1 は合っています")])
def test_wrong_solutions_fail_with_their_message(fn, promised):
    report = grade("01_request_metrics", fn)
    assert not report.passed
    assert any(promised in c.message for c in report.cases if not c.passed), str(report)


def tpot_off_by_one(a, t):             # (E2EL - TTFT) / n: in 「到着が 0 でない」 it equals round(tpot, 1)
    return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / len(t), "itl": [y - x for x, y in zip(t, t[1:])],
            "e2el": t[-1] - a}


def test_off_by_one_tpot_gets_the_definition_not_the_rounding_message():
    """Blind reading reviews10 ch01 #3: 0.1 = round(0.1333, 1) was diagnosed as a rounded value."""
    report = grade("01_request_metrics", tpot_off_by_one)
    case = next(c for c in report.cases if c.name == "到着が 0 でない")
    assert not case.passed and "(E2EL − TTFT) ÷ (n − 1)" in case.message and "丸められて" not in case.message
    assert not any("丸められて" in c.message for c in report.cases), str(report)


def test_stub_raising_and_looping_are_reported():
    def stub(a, t):
        raise NotImplementedError("ここを実装してください")

    def raising(a, t):
        return {"ttft": t[5]}

    def looping(a, t):
        while True:
            pass
    r = grade("01_request_metrics", stub)
    assert not r.passed and "未実装" in r.summary
    r = grade("01_request_metrics", raising)
    assert not r.passed and any("IndexError" in c.message for c in r.cases)
    r = grade("01_request_metrics", looping, timeout_s=0.2)
    assert not r.passed and any("秒以内に終わりませんでした" in c.message for c in r.cases)


def test_the_solution_is_checked_on_real_engine_requests():
    """The last cases take real requests' timestamps from the engine and expect its own RequestMetrics."""
    r = grade("01_request_metrics", load_solution("ex01_request_metrics", "request_metrics"), record=False)
    engine = [c for c in r.cases if "エンジンの実際のリクエスト" in c.name]
    assert len(engine) == 3 and all(c.passed for c in engine), str(r)


def test_numpy_and_tuple_results_pass_on_their_values():
    """np.diff for itl, numpy scalars for the rest, or a tuple: graded on the values, as a list would be."""
    np = pytest.importorskip("numpy")

    def with_numpy(a, t):
        times = np.asarray(t)
        return {"ttft": times[0] - a, "tpot": (times[-1] - times[0]) / (len(t) - 1) if len(t) > 1 else None,
                "itl": np.diff(times), "e2el": times[-1] - a}

    def with_tuple(a, t):
        return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None,
                "itl": tuple(y - x for x, y in zip(t, t[1:])), "e2el": t[-1] - a}
    for fn in (with_numpy, with_tuple):
        report = grade("01_request_metrics", fn, record=False)
        assert report.passed, str(report)


def test_an_itl_of_the_wrong_type_or_length_says_which():
    def as_generator(a, t):
        return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None,
                "itl": (y - x for x, y in zip(t, t[1:])), "e2el": t[-1] - a}

    def one_short(a, t):
        return {"ttft": t[0] - a, "tpot": (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None,
                "itl": [y - x for x, y in zip(t, t[1:])][:-1] if len(t) > 2 else [], "e2el": t[-1] - a}
    r = grade("01_request_metrics", as_generator, record=False)
    assert not r.passed and any("list ではありません（generator）" in c.message for c in r.cases), str(r)
    r = grade("01_request_metrics", one_short, record=False)
    assert not r.passed and any("itl の長さが違います（1 個" in c.message for c in r.cases), str(r)
