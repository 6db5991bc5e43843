"""Exercise 08 (rejection_sample): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest

import wrong_solutions_b as wrong

ROOT = Path(__file__).resolve().parents[3]
CTX = {'n_draws': 6000, 'engine': False}


def _grader():
    import importlib
    return importlib.import_module("course.exercises.ex08_rejection_sample").GRADER


def _solution():
    spec = importlib.util.spec_from_file_location("ex08_rejection_sample_solution", ROOT / "exercises/solutions/ex08_rejection_sample.py")
    sol_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol_mod)
    return sol_mod.rejection_sample


def test_solution_passes():
    cases = _grader().check(_solution(), CTX)
    assert cases and all(c.passed for c in cases), [c for c in cases if not c.passed]


@pytest.mark.parametrize("name, promised", [
    ("rs_resample_p", "残差の分布"),
    ("rs_accept_if_p_ge_q", "p >= q のときだけ"),
    ("rs_accept_with_p", "確率 p(x)"),
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
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "rejection_sample" == "None" else bad
    cases = _grader().check(fn, CTX)
    assert cases and not any(c.passed for c in cases)


def test_engine_decodes_speculatively_with_the_solution():
    cases = _grader().check(_solution(), {"n_draws": 3000})
    engine = [c for c in cases if "エンジン" in c.name]
    assert len(engine) == 1 and engine[0].passed, engine


def test_per_token_rule_keeps_the_engine_samplers_distribution():
    """The seam's adapter (the learner's one-draft rule as a batched sampler) gives the same acceptance and first-token
    distribution as the engine's rejection_sample: 4000 fixed-seed draws, tolerance 5 standard errors."""
    import torch
    from minimal_engine.features.spec_decode.rejection import per_token_rule, rejection_sample
    g = torch.Generator().manual_seed(0)
    p = torch.rand(1, 4, 6, generator=g).softmax(-1)
    q = torch.rand(1, 3, 6, generator=g).pow(3)
    q = q / q.sum(-1, keepdim=True)
    stats = []
    for sampler in (rejection_sample, per_token_rule(_solution())):
        gg, total, first = torch.Generator().manual_seed(1), 0, torch.zeros(6)
        for _ in range(4000):
            t, n = sampler(p, q, torch.multinomial(q[0], 1, generator=gg).T, gg)
            total, first[int(t[0, 0])] = total + int(n), first[int(t[0, 0])] + 1
        stats.append((total / 4000, first / 4000))
    assert abs(stats[0][0] - stats[1][0]) < 5 * (1.0 / 4000) ** 0.5 * 1.2
    assert ((stats[1][1] - p[0, 0]).abs() <= 5 * (p[0, 0] * (1 - p[0, 0]) / 4000).sqrt() + 0.002).all()
