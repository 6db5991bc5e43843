"""Exercise 03: the model solution passes; typical mistakes fail with the message their hint promises."""

import pytest
import torch

from course.exercises import grade
from solution_loader import load


def solution():
    return load("ex03_attention_decode", "attention_decode")


def test_solution_passes():
    r = grade("03_attention_decode", solution())
    assert r.passed, str(r)


def tiled_heads(q, k, v):           # repeat instead of repeat_interleave: wrong head mapping
    g = q.shape[0] // k.shape[1]
    k, v = k.repeat(1, g, 1), v.repeat(1, g, 1)
    return torch.einsum("ht,thd->hd", (torch.einsum("hd,thd->ht", q, k) / q.shape[1] ** 0.5).softmax(-1), v)


def unscaled(q, k, v):
    g = q.shape[0] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return torch.einsum("ht,thd->hd", torch.einsum("hd,thd->ht", q, k).softmax(-1), v)


def softmax_over_heads(q, k, v):
    g = q.shape[0] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return torch.einsum("ht,thd->hd", (torch.einsum("hd,thd->ht", q, k) / q.shape[1] ** 0.5).softmax(0), v)


def scaled_by_positions(q, k, v):   # 1/sqrt(T) instead of 1/sqrt(D): no specific diagnosis, the generic one
    g = q.shape[0] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return torch.einsum("ht,thd->hd", (torch.einsum("hd,thd->ht", q, k) / k.shape[0] ** 0.5).softmax(-1), v)


@pytest.mark.parametrize("fn, promised", [(tiled_heads, "repeat_interleave"), (unscaled, "1/√D"),
                                          (softmax_over_heads, "ヘッドの方向でとっています"),
                                          (scaled_by_positions, "スコアのスケール（1/√D、D はヘッド次元）")])
def test_wrong_solutions_fail_with_their_message(fn, promised):
    r = grade("03_attention_decode", fn, engine=False)
    assert not r.passed
    assert any(promised in c.message for c in r.cases if not c.passed), str(r)
    if fn is scaled_by_positions:        # the blind reading: it was told to fix the softmax's dimension
        assert not any("ヘッドの方向" in c.message for c in r.cases), str(r)


def test_case_names_say_what_they_test():
    from course.exercises.ex03_attention_decode import check
    names = [c.name for c in check(solution(), {"engine": False})]
    assert "ヘッド次元 64 の GQA（H = 8, KVH = 4, D = 64）" in names
    assert not any("既定モデル" in n for n in names)        # the default model is MHA with 5 heads


def test_raising_and_looping_are_reported():
    def looping(q, k, v):
        while True:
            pass
    r = grade("03_attention_decode", lambda q, k, v: q @ k)
    assert not r.passed and any("RuntimeError" in c.message for c in r.cases)
    r = grade("03_attention_decode", looping, timeout_s=0.2)
    assert not r.passed and any("秒以内に終わりませんでした" in c.message for c in r.cases)


def test_the_engine_decodes_through_the_given_attention():
    """LLM(decode_attention=fn): every decode row goes through fn (counted), the tokens equal the engine's own with
    a correct fn, and an attention that ignores the scores changes them (so the engine case can catch one)."""
    from course.exercises.ex03_attention_decode import ENGINE_PROMPTS, engine_tokens
    calls = []

    def counted(q, k, v):
        calls.append(k.shape[0])
        return solution()(q, k, v)

    def uniform(q, k, v):                     # averages V: no scores at all
        g = q.shape[0] // k.shape[1]
        return v.float().mean(0).repeat_interleave(g, 0)
    assert engine_tokens(counted) == engine_tokens(None)
    from minimal_engine.config import DEFAULT_MODEL, ModelConfig
    layers = ModelConfig.from_folder(DEFAULT_MODEL).num_layers
    assert len(calls) == len(ENGINE_PROMPTS) * 11 * layers     # 11 decode steps after each first token, every layer
    assert engine_tokens(uniform) != engine_tokens(None)
