"""Exercise 10 (pareto_frontier): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest

import wrong_solutions_b as wrong

ROOT = Path(__file__).resolve().parents[3]
CTX = None


def _grader():
    import importlib
    return importlib.import_module("course.exercises.ex10_pareto_frontier").GRADER


def _solution():
    spec = importlib.util.spec_from_file_location("ex10_pareto_frontier_solution", ROOT / "exercises/solutions/ex10_pareto_frontier.py")
    sol_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol_mod)
    return sol_mod.pareto_frontier


def test_solution_passes():
    cases = _grader().check(_solution(), CTX)
    assert cases and all(c.passed for c in cases), [c for c in cases if not c.passed]


@pytest.mark.parametrize("name, promised", [
    ("pf_duplicates_dominate", "同じ座標の点どうしは支配し合いません"),
    ("pf_strict_only", "支配される点が残っています"),
    ("pf_returns_points", "点の番号（int）"),
    ("pf_unsorted", "小さい順"),
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
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "pareto_frontier" == "None" else bad
    cases = _grader().check(fn, CTX)
    assert cases and not any(c.passed for c in cases)


def test_numpy_integer_indices_pass_and_the_sweep_traces_two_curves():
    import numpy as np
    sol = _solution()
    cases = _grader().check(lambda pts: [np.int64(i) for i in sol(pts)], CTX)
    assert cases and all(c.passed for c in cases), [c.message for c in cases if not c.passed]
    from course.exercises.ex10_pareto_frontier import reference, sweep_points
    pts = sweep_points()
    assert len(pts) >= 12 and 2 < len(reference(pts)) < len(pts)     # two curves, some points dominated


def test_the_lessons_frontier_function_passes_the_grader():
    """Lesson 10 and its glossary define the frontier as lab10.pareto_front computes it; code that
    follows the lesson (here that function, wrapped to the exercise's signature) passes."""
    from course.labs import lab10

    def follows_the_lesson(points):
        pts = [{"interactivity": x, "output_tok_s_per_gpu": y, "i": i} for i, (x, y) in enumerate(points)]
        return sorted(p["i"] for p in lab10.pareto_front(pts))

    cases = _grader().check(follows_the_lesson, CTX)
    assert cases and all(c.passed for c in cases), [c for c in cases if not c.passed]


@pytest.mark.parametrize("wrap", [lambda idx: __import__("numpy").array(idx, dtype=int), set,
                                  lambda idx: (i for i in idx)], ids=["ndarray", "set", "generator"])
def test_right_indices_in_another_container_are_told_to_use_a_list(wrap):
    """Right indices in a numpy array, a set or a generator: the message names the container, not 'points'."""
    sol = _solution()
    cases = _grader().check(lambda pts: wrap(sol(pts)), CTX)
    failed = [c for c in cases if not c.passed]
    assert failed and all("list で返してください" in c.message and "点そのもの" not in c.message for c in failed)
