"""Exercise 06 (quantize_int8): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest
import torch

import wrong_solutions_b as wrong

ROOT = Path(__file__).resolve().parents[3]
CTX = {'engine': False}


def _grader():
    import importlib
    return importlib.import_module("course.exercises.ex06_quantize_int8").GRADER


def _solution():
    spec = importlib.util.spec_from_file_location("ex06_quantize_int8_solution", ROOT / "exercises/solutions/ex06_quantize_int8.py")
    sol_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol_mod)
    return sol_mod.quantize_int8_per_channel


def test_solution_passes():
    cases = _grader().check(_solution(), CTX)
    assert cases and all(c.passed for c in cases), [c for c in cases if not c.passed]


@pytest.mark.parametrize("name, promised", [
    ("q_per_tensor", "行ごとに別のスケール"),
    ("q_floor", "torch.round"),
    ("q_float", "int8"),
    ("q_zero_scale", "0 で割らない"),
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
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "quantize_int8_per_channel" == "None" else bad
    cases = _grader().check(fn, CTX)
    assert cases and not any(c.passed for c in cases)


def test_engine_runs_with_the_solution_and_a_floor_quantizer_is_caught_before_it():
    cases = _grader().check(_solution(), None)
    engine = [c for c in cases if "エンジン" in c.name or "BF16" in c.name]
    assert len(engine) == 2 and all(c.passed for c in engine), engine
    assert not any("エンジン" in c.name for c in _grader().check(wrong.q_floor, None))


def _bf16_scale(w):
    """The model solution, but the scale returned in bfloat16 (as the engine stores it): refused with the dtype as
    the reason, not with 'the formula is wrong' (blind reading 2026-12-07, ch06 #6)."""
    q, scale = _solution()(w)
    return q, scale.to(torch.bfloat16)


def test_a_bfloat16_scale_is_refused_with_the_dtype_as_the_reason():
    failed = [c for c in _grader().check(_bf16_scale, CTX) if not c.passed]
    assert failed and all("float32 で返してください" in c.message for c in failed), [c.message for c in failed]
    assert not any("各行の絶対値の最大 ÷ 127" in c.message for c in failed)


def _as_list(w):
    scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
    return [torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale]


def test_a_list_return_is_shown_by_type_and_length_not_by_its_values():
    failed = [c for c in _grader().check(_as_list, CTX) if not c.passed]
    assert failed and all(c.got == "list（2 要素）" for c in failed), [c.got for c in failed]
