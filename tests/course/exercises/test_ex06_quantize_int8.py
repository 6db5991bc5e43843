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
    ("q_per_tensor", "テンソル全体で1つのスケール"),
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
    engine = [c for c in cases if "エンジン" in c.name or c.name.startswith("BF16 との比較")]
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


def _gpt_fast_rule(w):
    """gpt-fast's quantize.py (commit 0055c42): scale = amax / 127.5, q in [-128, 127] (blind reading ch06b #4)."""
    w = w.float()
    scale = w.abs().amax(1).clamp_min(1e-12) / 127.5
    return torch.round(w / scale[:, None]).clamp(-128, 127).to(torch.int8), scale


def _gpt_fast_scale_only(w):
    w = w.float()
    scale = w.abs().amax(1).clamp_min(1e-12) / 127.5
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def test_gpt_fasts_rule_is_named_not_called_wrong():
    for fn in (_gpt_fast_rule, _gpt_fast_scale_only):
        failed = [c for c in _grader().check(fn, CTX) if not c.passed]
        assert failed and all("gpt-fast" in c.message for c in failed), [c.message for c in failed]


def _per_column(w):
    w = w.float()
    scale = w.abs().amax(0).clamp_min(1e-12) / 127
    return torch.round(w / scale[None, :]).clamp(-127, 127).to(torch.int8), scale


def test_a_per_column_scale_is_named_as_such():
    failed = [c for c in _grader().check(_per_column, CTX) if not c.passed]
    assert any("列（入力）ごとではなく" in c.message for c in failed), [c.message for c in failed]


def _no_float(w):
    """The formula without w.float(): right on float32 matrices, a BF16 scale on the engine's BF16 weights."""
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def test_a_bf16_unit_case_catches_a_solution_without_float_before_the_engine():
    cases = _grader().check(_no_float, CTX)
    failed = [c for c in cases if not c.passed]
    assert [c.name for c in failed] == [c.name for c in cases if "BF16 のランダム" in c.name], [c.name for c in failed]
    assert "float32 で返してください" in failed[0].message
    hint = _grader().hints[-1]
    assert "w = w.float()" in hint


def _bf16_division(w):
    """torch.round, but the division in BF16 (a float32 scale cast to w's dtype): the quotient rounds to BF16's spacing
    (0.5 near 100), so the error exceeds scale / 2 on the BF16 case; the grader names the division, not floor."""
    scale = w.abs().amax(dim=1).float().clamp_min(1e-12) / 127
    return torch.round(w / scale.to(w.dtype)[:, None]).clamp(-127, 127).to(torch.int8), scale


def test_bf16_division_is_named_not_called_floor():
    failed = [c for c in _grader().check(_bf16_division, CTX) if not c.passed]
    assert len(failed) == 1 and "BF16 のランダム" in failed[0].name, [c.name for c in failed]
    assert "w = w.float() にしてから割り" in failed[0].message and "floor" not in failed[0].message


def test_a_square_per_column_scale_is_named_too():
    from course.exercises.ex06_quantize_int8 import _judge
    w = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [100.0, 1.0, -1.0]])
    scale = w.abs().amax(0) / 127
    why = _judge(w, (torch.round(w / scale[None, :]).clamp(-127, 127).to(torch.int8), scale))
    assert "列（入力）ごとの最大" in why


def _plus_eps(w, eps=1e-8):
    """torch.round and a float32 scale, but amax / 127 + eps on every row (to avoid dividing by zero): the matrix cases
    passed it and the engine case then failed (blind reading 2026-12-07b ch06 #1: 4 of 32 tokens, 13,671 q flipped)."""
    w = w.float()
    scale = w.abs().amax(1) / 127 + eps
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


@pytest.mark.parametrize("eps", [1e-8, 1e-10])
def test_an_additive_epsilon_is_caught_on_the_matrices_and_named(eps):
    failed = [c for c in _grader().check(lambda w: _plus_eps(w, eps), CTX) if not c.passed]
    assert failed and all("全部の行に小さな値" in c.message for c in failed), [c.message for c in failed]


@pytest.mark.parametrize("variant", ["reciprocal", "float64", "times127"])
def test_equivalent_formulas_still_pass(variant):
    def fn(w):
        w = w.double() if variant == "float64" else w.float()
        amax = w.abs().amax(1).clamp_min(1e-12)
        scale = amax / 127
        x = {"reciprocal": w * (1 / scale)[:, None], "float64": w / scale[:, None], "times127": w / amax[:, None] * 127}
        return torch.round(x[variant]).clamp(-127, 127).to(torch.int8), scale.float()
    cases = _grader().check(fn, CTX)
    assert all(c.passed for c in cases), [c.message for c in cases if not c.passed]


def _half_up(w):
    """Round half up (floor(x + 0.5)): meets the error bound; the small matrix's tie row names the rule
    (blind reading reviews10 ch06 #3)."""
    w = w.float()
    scale = w.abs().amax(1).clamp_min(1e-12) / 127
    return torch.floor(w / scale[:, None] + 0.5).clamp(-127, 127).to(torch.int8), scale


def _bf16_scale_division(w):
    """Divides in BF16, then returns scale.float(): named as a BF16 scale (reviews10 ch06 #4)."""
    scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale.float()


def test_round_half_up_and_bf16_division_are_named():
    failed = [c for c in _grader().check(_half_up, CTX) if not c.passed]
    assert failed and all("偶数へ丸めます" in c.message for c in failed), [c.message for c in failed]
    failed = [c for c in _grader().check(_bf16_scale_division, CTX) if not c.passed]
    assert failed and all("BF16 のまま計算" in c.message for c in failed), [c.message for c in failed]
