"""Exercise 07 (shard_linear): the grader passes the model solution, fails typical wrong ones with the promised
message, and reports a raising, an unimplemented and a looping solution instead of crashing."""
import importlib.util
from pathlib import Path

import pytest
import torch

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


def _sizes(total, n):
    return [total // n + (1 if r < total % n else 0) for r in range(n)]


def _checked(w, r, n, dim):
    if not 0 <= r < n:
        raise ValueError("rank")
    s = _sizes(w.shape[dim], n)
    return w.narrow(dim, sum(s[:r]), s[r])


def _combine(parts, split):
    return torch.cat(parts, -1) if split == "columns" else torch.stack(parts).sum(0)


INTERLEAVED = {"shard_columns": lambda w, r, n: _checked(w, r, n, 0) if r >= n else w[r::n],
               "shard_rows": lambda w, r, n: _checked(w, r, n, 1) if r >= n else w[:, r::n], "combine": _combine}
ROWS_UNCHECKED = {"shard_columns": lambda w, r, n: _checked(w, r, n, 0),
                  "shard_rows": lambda w, r, n: w[:, sum(_sizes(w.shape[1], n)[:r]):sum(_sizes(w.shape[1], n)[:r + 1])],
                  "combine": _combine}


def test_interleaved_shards_are_told_to_be_contiguous():
    failed = [c for c in _grader().check(INTERLEAVED, CTX) if not c.passed]
    assert failed and all("連続した区間" in c.message for c in failed if "シャード" in c.name), failed
    mlp = [c for c in failed if "MLP" in c.name]          # the MLP cases point to the shards, not to combine
    assert mlp and all("シャードの確かめ" in c.message and "連結" not in c.message for c in mlp), mlp


def _last_gets_rest(w, r, n, dim):
    """Contiguous, but the remainder on the last rank: right shapes only where the split is even."""
    _checked(w, r, n, dim)
    base = w.shape[dim] // n
    return w.narrow(dim, r * base, base if r < n - 1 else w.shape[dim] - base * (n - 1))


REMAINDER_LAST = {"shard_columns": lambda w, r, n: _last_gets_rest(w, r, n, 0),
                  "shard_rows": lambda w, r, n: _last_gets_rest(w, r, n, 1), "combine": _combine}


def test_a_contiguous_shard_at_the_wrong_offset_is_not_called_interleaved():
    """Blind reading 2026-12-07d ch07 #5: shard_rows(w [5, 4], rank=1, world=3) with the remainder on the last rank
    has the right shape [5, 1] but starts at 1, not 2: the message names the offset, not w[r::world]."""
    failed = [c for c in _grader().check(REMAINDER_LAST, CTX) if not c.passed and "shard_rows" in c.input]
    hit = [c for c in failed if "rank=1, world=3" in c.input]
    assert hit and "1 から始まっています" in hit[0].message, hit
    inter = [c for c in _grader().check(INTERLEAVED, CTX) if not c.passed and "shard_columns" in c.input]
    assert inter and any("飛び飛びの取り方になっています" in c.message for c in inter), inter


def test_shard_rows_without_a_range_check_fails():
    failed = [c for c in _grader().check(ROWS_UNCHECKED, CTX) if not c.passed]
    assert [c.input for c in failed] == ["shard_rows(w, rank=2, world=2)", "shard_rows(w, rank=-1, world=2)"], failed


def test_a_negative_rank_must_be_refused_too():
    """tensor_split(...)[rank] with only rank >= world rejected returns the last shard for rank=-1 (planted)."""
    def split(dim):
        def f(w, r, n):
            if r >= n:
                raise ValueError("rank")
            return torch.tensor_split(w, n, dim=dim)[r]
        return f
    fns = {"shard_columns": split(0), "shard_rows": split(1), "combine": _combine}
    failed = [c for c in _grader().check(fns, CTX) if not c.passed]
    assert [c.input for c in failed] == ["shard_columns(w, rank=-1, world=2)", "shard_rows(w, rank=-1, world=2)"]
    assert all("負の数も" in c.message for c in failed)


def _raises(*args, **kwargs):
    raise RuntimeError("boom")


def _stub(*args, **kwargs):
    raise NotImplementedError("ここを実装してください")


@pytest.mark.parametrize("bad", [_raises, _stub])
def test_raising_solution_is_reported(bad):
    fn = {"shard_columns": bad, "shard_rows": bad, "combine": bad} if "None" == "None" else bad
    cases = _grader().check(fn, CTX)
    assert cases and not any(c.passed for c in cases)


def test_a_wrong_column_combine_shows_h_not_the_passing_y():
    """Blind reading 2026-12-07b ch07 #7: torch.cat(parts, 0) for "columns" with a right row sum (planted) fails the
    MLP case; its got column shows the column output h (its shape), not y's tiny difference that passed."""
    cat0 = {"shard_columns": lambda w, r, n: _checked(w, r, n, 0), "shard_rows": lambda w, r, n: _checked(w, r, n, 1),
            "combine": lambda parts, split: torch.cat(parts, 0) if split == "columns" else torch.stack(parts).sum(0)}
    mlp = {c.input.split("world=")[1]: c for c in _grader().check(cat0, CTX) if "MLP" in c.name and not c.passed}
    assert sorted(mlp) == ["2", "3"], mlp              # world 1: one part is right; world 3: cat raises (4 vs 3 columns)
    assert mlp["2"].got == "列分割の出力 h の形 [6, 5]（正しくは [3, 10]）" and "連結" in mlp["2"].message, mlp
    # the columns in the wrong order: h has the right shape, and got shows h's difference (planted)
    rev = dict(cat0, combine=lambda parts, split: torch.cat(parts[::-1], -1) if split == "columns"
               else torch.stack(parts).sum(0))
    mlp = [c for c in _grader().check(rev, CTX) if "MLP" in c.name and not c.passed]
    assert len(mlp) == 2 and all(c.got.startswith("列分割の出力 h の最大の差 ") for c in mlp), mlp
    assert float(mlp[0].got.split()[-1]) > 1e-3, mlp
