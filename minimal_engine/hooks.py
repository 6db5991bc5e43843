"""Learner hooks checked where their output enters the engine.

The course lets a learner plug a function into the engine: ``LLM(decode_attention=fn)`` (chapter 3),
``LLM(quantization="int8", quantizer=fn)`` (chapter 6), ``LLM(speculative_config=...,
rejection_sampler=fn)`` or ``per_token_rule(rule)`` (chapter 8); ``scheduler_policy`` (chapter 5)
has its own check (engine/scheduling_policy.py). What such a function returns is checked here before
the engine uses it: the type (a numpy array is not a tensor), shape, dtype, range and NaN, with a
ValueError that names the hook, the function and what was expected. The learner's function always
gets copies of the engine's tensors, so changing its inputs in place cannot corrupt the model or the
KV cache. Only torch is imported: model/ and features/ both call these.
"""
from __future__ import annotations

import torch


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _what(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {list(x.shape)}"
    return f"{type(x).__module__}.{type(x).__name__}".replace("builtins.", "")


def _fail(hook: str, fn, expected: str, got: str) -> ValueError:
    hint = " (convert it with torch.from_numpy)" if "numpy" in got else ""
    return ValueError(f"the {hook} hook {_name(fn)!r} must return {expected}; "
                      f"it returned {got}{hint}")


def decode_attention(fn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """fn(q [H, Dh], k [L, KVH, Dh], v [L, KVH, Dh]) on copies; its answer must be a finite
    floating tensor of q's shape [H, Dh] (never reshaped: a transposed answer is refused)."""
    out = fn(q.clone(), k.clone(), v.clone())
    want = f"a floating-point torch.Tensor of shape [H, Dh] = {list(q.shape)}"
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise _fail("decode_attention", fn, want, _what(out))
    if tuple(out.shape) != tuple(q.shape):
        raise _fail("decode_attention", fn, want, _what(out))
    if not bool(torch.isfinite(out).all()):
        raise _fail("decode_attention", fn, want + " with finite values", "NaN or inf values")
    return out.to(q.dtype)


def quantizer(fn, weight: torch.Tensor) -> tuple:
    """fn(W [N, K]) on a detached copy (tied embeddings share the weight) -> its (w_q, scale) pair;
    features/quantization.check_quantized then checks their dtype, shape and values."""
    out = fn(weight.detach().clone())
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = f"a {len(out)}-tuple" if isinstance(out, (tuple, list)) else _what(out)
        raise _fail("quantizer", fn, "a pair (w_q int8 [N, K], scale [N])", got)
    return tuple(out)


def rejection_sampler(fn, target_probs, draft_probs, draft_ids: torch.Tensor, generator):
    """fn(target_probs [B, k+1, V], draft_probs [B, k, V] | None, draft_ids [B, k], generator) on
    copies -> (tokens [B, k+1], num_accepted [B]) checked: integer tensors, 0 <= num_accepted <= k,
    the accepted tokens equal the drafts (their K/V are already in the cache), ids in [0, V)."""
    b, k = draft_ids.shape
    vocab = target_probs.shape[-1]
    out = fn(target_probs.clone(), None if draft_probs is None else draft_probs.clone(),
             draft_ids.clone(), generator)
    want = f"(tokens [B, k+1] = {[b, k + 1]}, num_accepted [B] = {[b]}) as integer tensors"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise _fail("rejection_sampler", fn, want, _what(out))
    tokens, n = out
    for t, shape in ((tokens, (b, k + 1)), (n, (b,))):
        if not isinstance(t, torch.Tensor) or t.is_floating_point() or t.dtype == torch.bool \
                or tuple(t.shape) != shape:
            raise _fail("rejection_sampler", fn, want, _what(t))
    if bool(((n < 0) | (n > k)).any()):
        raise _fail("rejection_sampler", fn, f"num_accepted in [0, k = {k}]", f"{n.tolist()}")
    for r in range(b):
        m = int(n[r])
        if tokens[r, :m].tolist() != draft_ids[r, :m].tolist():
            raise _fail("rejection_sampler", fn, "the drafts themselves at the accepted positions",
                        f"tokens {tokens[r, :m].tolist()} for drafts {draft_ids[r, :m].tolist()}")
        if not all(0 <= x < vocab for x in tokens[r, :m + 1].tolist()):
            raise _fail("rejection_sampler", fn, f"token ids in [0, {vocab - 1}]",
                        f"{tokens[r, :m + 1].tolist()}")
    return tokens, n


def checked_rejection_sampler(fn):
    """fn with rejection_sample's signature, each answer checked by rejection_sampler() above."""
    def sampler(target_probs, draft_probs, draft_ids, generator=None):
        return rejection_sampler(fn, target_probs, draft_probs, draft_ids, generator)
    sampler.__name__ = _name(fn)
    return sampler


def per_token_rule(rule, out, vocab_size: int) -> tuple[bool, int]:
    """rule(p, q, draft, generator)'s answer -> (accepted, token) checked: a pair of a bool and a
    token id in [0, V)."""
    want = f"a pair (accepted: bool, token: int in [0, {vocab_size - 1}])"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise _fail("per_token_rule", rule, want, _what(out))
    accepted, token = (x.item() if type(x).__module__ == "numpy" else x for x in out)
    if isinstance(accepted, torch.Tensor) and accepted.numel() == 1:
        accepted = bool(accepted)
    if isinstance(token, torch.Tensor) and token.numel() == 1 and not token.is_floating_point():
        token = int(token)
    if not isinstance(accepted, bool) or isinstance(token, bool) or not isinstance(token, int) \
            or not 0 <= token < vocab_size:
        raise _fail("per_token_rule", rule, want, f"({accepted!r}, {token!r})")
    return accepted, token
