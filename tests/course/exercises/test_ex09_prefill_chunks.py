"""Exercise 09 (prefill_chunks): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest

import wrong_solutions_b as wrong

ROOT = Path(__file__).resolve().parents[3]



def _solution_module():
    spec = importlib.util.spec_from_file_location("ex09_prefill_chunks_solution", ROOT / "exercises/solutions/ex09_prefill_chunks.py")
    sol_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol_mod)
    return sol_mod


CTX = {'engine': False, 'handoff_ms': _solution_module().handoff_ms}


def _grader():
    import importlib
    return importlib.import_module("course.exercises.ex09_prefill_chunks").GRADER


def _solution():
    spec = importlib.util.spec_from_file_location("ex09_prefill_chunks_solution", ROOT / "exercises/solutions/ex09_prefill_chunks.py")
    sol_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol_mod)
    return sol_mod.chunk_plan


def test_solution_passes():
    cases = _grader().check(_solution(), CTX)
    assert cases and all(c.passed for c in cases), [c for c in cases if not c.passed]


@pytest.mark.parametrize("name, promised", [
    ("plan_ignores_decodes", "予算から Decode の分を引いた残り"),
    ("plan_drops_remainder", "端数"),
    ("plan_no_refusal", "ValueError"),
])
def test_wrong_solution_fails_with_the_promised_message(name, promised):
    cases = _grader().check(getattr(wrong, name), CTX)
    failed = [c for c in cases if not c.passed]
    assert failed, f"{name} passed"
    assert any(promised in c.message for c in failed), [c.message for c in failed]


def _even_split(prompt_len, decode_batch, token_budget):
    """The fewest steps, within the budget, but balanced (blind reading 2026-12-07 ch9 #1: failed before)."""
    room = token_budget - decode_batch
    if room < 1:
        raise ValueError("no room for the prefill")
    steps = -(-prompt_len // room)
    q, r = divmod(prompt_len, steps)
    return [q + 1] * r + [q] * (steps - r)


def _one_step_too_many(prompt_len, decode_batch, token_budget):
    room = token_budget - decode_batch
    if room < 1:
        raise ValueError("no room for the prefill")
    return [1] + _even_split(prompt_len - 1, decode_batch, token_budget)


def test_a_minimal_plan_in_another_order_passes_the_pure_cases_and_says_the_engines_order():
    cases = _grader().check(_even_split, CTX)
    assert all(c.passed for c in cases), [c for c in cases if not c.passed]
    assert any("エンジンは前から" in c.message for c in cases)


def test_a_plan_with_more_steps_is_told_it_is_not_minimal():
    failed = [c for c in _grader().check(_one_step_too_many, CTX) if not c.passed]
    assert failed and all("最小ではありません" in c.message for c in failed), failed


def _raises(*args, **kwargs):
    raise RuntimeError("boom")


def _stub(*args, **kwargs):
    raise NotImplementedError("ここを実装してください")


@pytest.mark.parametrize("bad", [_raises, _stub])
def test_raising_solution_is_reported(bad):
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "chunk_plan" == "None" else bad
    cases = _grader().check(fn, dict(CTX, handoff_ms=bad))
    assert cases and not any(c.passed for c in cases)


def test_the_solutions_plan_is_what_the_engine_does():
    cases = _grader().check(_solution(), {"handoff_ms": _solution_module().handoff_ms})
    engine = [c for c in cases if "エンジン" in c.name]
    assert len(engine) == 1 and engine[0].passed, engine


def test_looping_solution_is_reported_as_a_timeout():
    def loops(*args):
        while True:
            pass
    cases = _grader().check(loops, {"engine": False, "timeout_s": 0.2, "handoff_ms": loops})
    assert cases and not any(c.passed for c in cases)
    timed_out = [c for c in cases if "秒以内に終わりませんでした" in c.message]
    mod = _grader_module()
    assert len(timed_out) == len(mod.CASES) + len(mod.HANDOFF_CASES), [c.message for c in cases]


def _grader_module():
    import importlib
    return importlib.import_module("course.exercises.ex09_prefill_chunks")


def test_numpy_integers_and_a_tuple_are_a_plan():
    """The blind reading (ch09 #9): a correct plan of np.int64 values, or a tuple, passes; a bool or a float does not."""
    import numpy as np
    sol = _solution()
    for wrap in (lambda p: [np.int64(c) for c in p], tuple):
        cases = _grader().check(lambda L, d, b, w=wrap: w(sol(L, d, b)), CTX)
        assert cases and all(c.passed for c in cases), [c.message for c in cases if not c.passed]
    floats = _grader().check(lambda L, d, b: [float(c) for c in sol(L, d, b)], CTX)
    assert not all(c.passed for c in floats)


def test_a_numpy_array_is_told_its_type_and_tolist():
    """The blind reading (2026-12-07b ch09 #10): an np.ndarray plan fails with its type named and .tolist() hinted."""
    import numpy as np
    sol = _solution()
    cases = _grader().check(lambda L, d, b: np.array(sol(L, d, b)), CTX)
    bad = [c.message for c in cases if not c.passed]
    assert bad and all("ndarray" in m and ".tolist()" in m for m in bad), bad


def test_the_hand_off_is_graded_against_the_calculators_and_names_typical_mistakes():
    sol = _solution_module()
    grader = _grader()

    def messages(fn):
        return [c.message for c in grader.check(sol.chunk_plan, {"engine": False, "handoff_ms": fn})
                if not c.passed and "受け渡し" in c.name]
    assert messages(sol.handoff_ms) == []
    no_blocks = messages(lambda L, h, d, n, g, b=2, bs=16: n * L * 2 * h * d * b / (g * 1e9) * 1e3)
    assert no_blocks and all("ブロック単位" in m for m in no_blocks)      # only the non-multiple prompts fail
    assert all("ミリ秒" in m for m in messages(lambda *a: sol.handoff_ms(*a) / 1000))
    halves = messages(lambda *a: sol.handoff_ms(*a) / 2)
    assert any("半分の値" in m for m in halves) and any(m == "K と V の2つを数えてください（×2）。" for m in halves)
    missing = [c for c in grader.check(sol.chunk_plan, {"engine": False}) if not c.passed]
    assert [c.message for c in missing] == ["2つ目の関数 handoff_ms も grade に渡してください。"]
