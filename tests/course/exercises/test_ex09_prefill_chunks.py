"""Exercise 09 (prefill_chunks): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest

import wrong_solutions_b as wrong

ROOT = Path(__file__).resolve().parents[3]
CTX = {'engine': False}


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


def _raises(*args, **kwargs):
    raise RuntimeError("boom")


def _stub(*args, **kwargs):
    raise NotImplementedError("ここを実装してください")


@pytest.mark.parametrize("bad", [_raises, _stub])
def test_raising_solution_is_reported(bad):
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "chunk_plan" == "None" else bad
    cases = _grader().check(fn, CTX)
    assert cases and not any(c.passed for c in cases)


def test_the_solutions_plan_is_what_the_engine_does():
    cases = _grader().check(_solution(), None)
    engine = [c for c in cases if "エンジン" in c.name]
    assert len(engine) == 1 and engine[0].passed, engine


def test_looping_solution_is_reported_as_a_timeout():
    def loops(*args):
        while True:
            pass
    cases = _grader().check(loops, {"engine": False, "timeout_s": 0.2})
    assert cases and not any(c.passed for c in cases)
    timed_out = [c for c in cases if "秒以内に終わりませんでした" in c.message]
    assert len(timed_out) == len(_grader_module().CASES), [c.message for c in cases]


def _grader_module():
    import importlib
    return importlib.import_module("course.exercises.ex09_prefill_chunks")
