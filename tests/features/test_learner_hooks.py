"""Learner hooks checked where their output enters the engine (minimal_engine/hooks.py; attack round
3 L1, L2): a wrong shape, a numpy array, NaN, an out-of-vocabulary or negative token, an accepted
token that is not the draft, too many accepted drafts, or a 3-tuple from a quantizer each give a
ValueError naming the hook, the function and what was expected; the learner's functions get copies,
so an in-place quantizer leaves the tied embedding table as it was."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.features.spec_decode.rejection import per_token_rule, rejection_sample

PROMPT = "吾輩は猫である。吾輩は猫である。吾輩は猫である。吾輩は"


def attention(q, k, v):
    """Reference decode attention: q [H, Dh], k, v [L, KVH, Dh] -> [H, Dh]."""
    rep = q.shape[0] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    w = torch.einsum("hd,lhd->hl", q.float(), k.float()) / q.shape[-1] ** 0.5
    return torch.einsum("hl,lhd->hd", w.softmax(-1), v.float()).to(q.dtype)


def transposed(q, k, v):
    return attention(q, k, v).T.contiguous()


def as_numpy(q, k, v):
    return attention(q, k, v).numpy()


def with_nan(q, k, v):
    return torch.full_like(q, float("nan"))


def one_more_column(q, k, v):
    return torch.cat([attention(q, k, v), q[:, :1]], 1)


def vandal(q, k, v):                         # right answer, then it wrecks its inputs
    out = attention(q, k, v)
    q.zero_(), k.mul_(0), v.fill_(float("nan"))
    return out


@pytest.fixture(scope="module")
def greedy(llama_dir):
    llm = LLM(llama_dir, device="cpu", dtype="float32")
    return llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=6))[0].token_ids


@pytest.mark.parametrize("fn, said", [
    (transposed, "a torch.float32 tensor of shape"), (as_numpy, "torch.from_numpy"),
    (with_nan, "NaN or inf"), (one_more_column, "shape [H, Dh]")])
def test_decode_attention_answers_are_checked(llama_dir, fn, said):
    llm = LLM(llama_dir, device="cpu", dtype="float32", decode_attention=fn)
    with pytest.raises(ValueError) as e:
        llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=4))
    assert f"the decode_attention hook {fn.__name__!r} must return" in str(e.value)
    assert said in str(e.value)
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks                   # nothing left behind


def test_decode_attention_gets_copies(llama_dir, greedy):
    llm = LLM(llama_dir, device="cpu", dtype="float32", decode_attention=vandal)
    assert llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=6))[0].token_ids == greedy


def in_place_quantizer(w):                   # saves memory by rounding the weight itself
    with torch.no_grad():
        s = w.abs().amax(1).clamp(min=1e-8) / 127
        w.div_(s[:, None]).round_().clamp_(-127, 127)
        return w.to(torch.int8), s


def test_quantizer_gets_a_copy_and_a_wrong_answer_is_named():
    plain = LLM(device="cpu", quantization="int8")
    llm = LLM(device="cpu", quantization="int8", quantizer=in_place_quantizer)
    emb, mine = plain.model.embed_tokens.weight, llm.model.embed_tokens.weight
    assert torch.equal(mine, emb) and float(mine.abs().max()) < 10   # not rounded to ±127
    params = SamplingParams(temperature=0, max_tokens=8)
    assert llm.generate(PROMPT, params)[0].token_ids == plain.generate(PROMPT, params)[0].token_ids

    def three(w):
        return w.to(torch.int8), torch.ones(w.shape[0]), "extra"
    with pytest.raises(ValueError, match="quantizer hook 'three' must return a pair .* 3-tuple"):
        LLM(device="cpu", quantization="int8", quantizer=three)


def sampler_returning(fix):
    def bad_sampler(target, draft, ids, generator=None):
        tokens, n = rejection_sample(target, draft, ids, generator)
        return fix(tokens, n, ids)
    return bad_sampler


@pytest.mark.parametrize("fix, said", [
    (lambda t, n, ids: (t.float(), n), "integer tensors"),
    (lambda t, n, ids: (t, n + ids.shape[1] + 1), "num_accepted in [0, k"),
    (lambda t, n, ids: (t.numpy(), n.numpy()), "torch.from_numpy"),
    (lambda t, n, ids: (torch.cat([ids + 1, t[:, -1:]], 1), torch.full_like(n, ids.shape[1])),
     "the drafts themselves"),
    (lambda t, n, ids: (torch.full_like(t, 10 ** 6), torch.zeros_like(n)), "token ids in [0,"),
])
def test_rejection_sampler_answers_are_checked(llama_dir, fix, said):
    llm = LLM(llama_dir, device="cpu", dtype="float32", rejection_sampler=sampler_returning(fix),
              speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                  "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    out = llm.generate(PROMPT, SamplingParams(temperature=1.0, seed=3, max_tokens=12))[0]
    assert out.finish_reason == "error", out
    assert "the rejection_sampler hook 'bad_sampler' must return" in out.error and said in out.error
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks


@pytest.mark.parametrize("answer, said", [
    (lambda p, d: (True, 99_999), "(True, 99999)"), (lambda p, d: (False, -1), "(False, -1)"),
    (lambda p, d: (True, d, 0), "a pair (accepted: bool, token: int"),
    (lambda p, d: ("yes", d), "('yes',"),
])
def test_per_token_rule_answers_are_checked(llama_dir, answer, said):
    def rule(p, q, draft, generator):
        return answer(p, draft)
    llm = LLM(llama_dir, device="cpu", dtype="float32", rejection_sampler=per_token_rule(rule),
              speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                  "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    out = llm.generate(PROMPT, SamplingParams(temperature=1.0, seed=3, max_tokens=12))[0]
    assert out.finish_reason == "error" and "the per_token_rule hook 'rule'" in out.error, out
    assert said in out.error


def test_a_numpy_bool_and_integer_are_fine(llama_dir):
    def rule(p, q, draft, generator):
        return np.bool_(True), np.int64(draft)
    llm = LLM(llama_dir, device="cpu", dtype="float32", rejection_sampler=per_token_rule(rule),
              speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                  "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    out = llm.generate(PROMPT, SamplingParams(temperature=1.0, seed=3, max_tokens=8))[0]
    assert out.finish_reason in ("length", "stop") and out.error is None


def test_checks_pass_right_answers_unchanged():
    from minimal_engine import hooks
    q, k = torch.randn(4, 8), torch.randn(5, 2, 8)
    assert torch.equal(hooks.decode_attention(attention, q, k, k), attention(q, k, k))
    assert hooks.per_token_rule(lambda *a: None, (True, torch.tensor(3)), 10) == (True, 3)
