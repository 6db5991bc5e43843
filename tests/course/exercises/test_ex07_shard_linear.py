"""Exercise 07 (shard_linear): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest

import wrong_solutions_b as wrong

ROOT = Path(__file__).resolve().parents[3]
CTX = None


def _grader():
    import importlib
    return importlib.import_module("course.exercises.ex07_shard_linear").GRADER


def _solution():
    spec = importlib.util.spec_from_file_location("ex07_shard_linear_solution", ROOT / "exercises/solutions/ex07_shard_linear.py")
    sol_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol_mod)
    return sol_mod


def test_solution_passes():
    cases = _grader().check(_solution(), CTX)
    assert cases and all(c.passed for c in cases), [c for c in cases if not c.passed]


@pytest.mark.parametrize("name, promised", [
    ("tp_floor_split", "先頭のランクから1つずつ多く"),
    ("tp_rows_wrong_dim", "分ける次元が違います"),
    ("tp_concat_rows", "部分和"),
    ("tp_no_refusal", "ValueError"),
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
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "None" == "None" else bad
    cases = _grader().check(fn, CTX)
    assert cases and not any(c.passed for c in cases)
