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


@pytest.mark.parametrize("fn, promised", [(prefill_first, "実行中のリクエストより先に"),
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


def no_stop_at_zero_budget(running, waiting, budget, max_num_seqs):
    """The natural first draft: the running loop never checks budget == 0, so it adds (id, 0) entries."""
    plan = []
    for rid, left in running:
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
    rest = [w for w in solution()([], waiting, budget, max(0, max_num_seqs - len(running)))]
    return plan + rest


def test_a_zero_token_entry_is_named_with_rule_3_in_hand_and_random_cases():
    from course.exercises.ex05_schedule_step import GRADER
    r = grade("05_schedule_step", no_stop_at_zero_budget, record=False, engine=False)
    failed = {c.name: c for c in r.cases if not c.passed}
    hand = failed["予算が Decode だけで尽きる"]
    assert hand.message.startswith("('c', 0)：") and "規則3" in hand.message and hand.hint == GRADER.hints[2]
    rnd = failed["ランダムな1ステップ（200 通り）"]                 # the random cases catch it too
    assert ", 0)：" in rnd.message and rnd.hint == GRADER.hints[2]


def test_engine_timing_is_fair_and_the_report_survives_a_broken_progress_file(tmp_path, monkeypatch):
    from course.exercises import ex05_schedule_step as ex
    calls = []
    monkeypatch.setattr(ex, "engine_compare", lambda fn, repeats: calls.append(repeats) or (([1], [1]), ([9, 10, 11], [19, 20, 21])))
    import course.exercises as exercises

    def read_only_disk(*a):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(exercises, "record_exercise", read_only_disk)
    monkeypatch.setattr(exercises, "attempts", read_only_disk)
    r = grade("05_schedule_step", solution())
    engine = next(c for c in r.cases if "エンジン" in c.name)
    assert calls == [3] and "中央値 10（9〜11）" in engine.got and "中央値 20（19〜21）" in engine.expected
    assert ex.SPEED_NOTE in engine.message and "計測のばらつき" in engine.message     # ch05 third reading #9
    assert r.passed and "進み具合を保存できませんでした" in r.summary


def test_numpy_counts_are_named_as_the_type_to_fix():
    """Blind reading ch05 #10: a plan with numpy integers says that the count must be a Python int."""
    import numpy as np

    def numpy_counts(running, waiting, budget, max_num_seqs):
        return [(rid, np.int64(n)) for rid, n in solution()(running, waiting, budget, max_num_seqs)]
    r = grade("05_schedule_step", numpy_counts, record=False, engine=False)
    assert not r.passed
    assert all("Python の int" in c.message and "int64" in c.message for c in r.cases if not c.passed), str(r)
    from course.exercises.ex05_schedule_step import FORMAT_HINT
    assert all(c.hint == FORMAT_HINT for c in r.cases if not c.passed), str(r)        # not a rule's hint


def test_the_simulated_queue_hint_names_the_rule_the_plan_broke(monkeypatch):
    """Blind reading ch05 #12: the simulated-queue case's hint follows the rule broken, not the attempt number."""
    import course.exercises as exercises
    from course.exercises.ex05_schedule_step import GRADER
    monkeypatch.setattr(exercises, "attempts", lambda _id: 4)           # the 5th attempt: rule 3's hint by number
    r = grade("05_schedule_step", decode_only_one_token, record=False, engine=False)
    sim = next(c for c in r.cases if c.name.startswith("ランダムな待ち行列"))
    assert not sim.passed and sim.hint == GRADER.hints[0], str(r)


def test_a_running_request_left_out_is_named_not_called_reordered():
    """Final reading 2026-12-07c ch05 #4: skipping a running request that does not fit is not 'waiting put first'."""
    from course.exercises.ex05_schedule_step import diagnose
    msg, rule = diagnose([("a", 1), ("q", 4)], [("a", 1), ("p", 50)], [("q", 4)], 5, 4)
    assert rule == 1 and "実行中の ('p', 50) が計画にありません" in msg and "先に入れています" not in msg
    assert diagnose([("a", 1)], [("a", 1), ("p", 50)], [], 1, 4) == ("", 0)     # the budget ran out first: right
    assert "先に入れています" in diagnose([("q", 4), ("a", 1)], [("a", 1)], [("q", 4)], 5, 4)[0]
