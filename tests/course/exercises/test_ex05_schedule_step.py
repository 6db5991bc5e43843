"""Exercise 05: the model solution passes (also as the engine's scheduling policy); typical mistakes fail with the
message their case promises; a stub, an exception and a loop are reported."""

import pytest

from course.exercises import grade
from solution_loader import load


def solution():
    return load("ex05_schedule_step", "schedule_step")


def test_solution_passes_and_runs_the_engine():
    r = grade("05_schedule_step", solution(), record=False)
    assert r.passed, str(r)
    engine = [c for c in r.cases if "エンジン" in c.name]
    assert len(engine) == 1 and "tok/s" in engine[0].got


def prefill_first(running, waiting, budget, max_num_seqs):
    """New prompts take the budget before the decodes: a long prompt stalls everyone's next token."""
    plan = solution()([], waiting, budget, max(0, max_num_seqs - len(running)))
    return plan + solution()(running, [], budget - sum(n for _, n in plan), max_num_seqs)


def ignores_budget(running, waiting, budget, max_num_seqs):
    return [(rid, left) for rid, left in running] + [(rid, left) for rid, left in waiting][:max(0, max_num_seqs - len(running))]


def ignores_max_num_seqs(running, waiting, budget, max_num_seqs):
    return solution()(running, waiting, budget, 10 ** 6)


def decode_only_one_token(running, waiting, budget, max_num_seqs):
    """A partly prefilled running request gets 1 token as if it were decoding."""
    return solution()([(rid, 1) for rid, _ in running], waiting, budget, max_num_seqs)


@pytest.mark.parametrize("fn, promised", [(prefill_first, "実行中のリクエスト（Decode）より先に"),
                                          (ignores_budget, "予算"),
                                          (ignores_max_num_seqs, "max_num_seqs"),
                                          (decode_only_one_token, "残りの予算いっぱいのチャンク")])
def test_wrong_solutions_fail_with_their_message(fn, promised):
    r = grade("05_schedule_step", fn, record=False)
    assert not r.passed
    assert any(promised in c.message for c in r.cases if not c.passed), str(r)
    assert not any("エンジン" in c.name for c in r.cases)        # the engine runs only a plan that is right


def test_stub_raising_and_looping_are_reported():
    def stub(*a):
        raise NotImplementedError("ここを実装してください")

    def looping(*a):
        while True:
            pass
    assert grade("05_schedule_step", stub, record=False).not_implemented
    r = grade("05_schedule_step", lambda *a: 1 / 0, record=False)
    assert not r.passed and any("ZeroDivisionError" in c.message for c in r.cases)
    r = grade("05_schedule_step", looping, record=False, timeout_s=0.2)
    assert not r.passed and any("秒以内に終わりませんでした" in c.message for c in r.cases)
