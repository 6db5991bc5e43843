"""One token's work (chapters 2, 3 and 10): FLOPs per token, generation with / without a KV cache, and the
parameter counts of a Llama-style layer.

The one source of these formulas: ``roofline.decode_step_flops``, the simulator's step,
``bench.roofline.step_cost`` / ``weight_counts`` (the engine's own model, from its ModelConfig) and
``sim_tables.model_from_hf_config`` call them. Plain Python (no torch).
"""
from __future__ import annotations

from minimal_engine.calculators.datasheets import ModelShape, _check_positive, get_model_shape

__all__ = ["attention_flops_per_token", "flops_per_token", "generation_flops", "matmul_params", "no_cache_work_ratio",
           "attention_weight_count", "mlp_weight_count"]


def attention_weight_count(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """Weights of one layer's attention projections (no biases): q, k, v (``hidden x (heads + 2 kv_heads) x
    head_dim``) and o (``heads x head_dim x hidden``)."""
    return hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden


def mlp_weight_count(hidden: int, intermediate: int) -> int:
    """Weights of one SwiGLU MLP (gate, up and down projections): ``3 x hidden x intermediate``."""
    return 3 * hidden * intermediate


def attention_flops_per_token(layers: int, heads: int, head_dim: int, context_len: int) -> int:
    """Attention FLOPs of one query token over ``context_len`` cached tokens, all layers.

    ``4 x layers x heads x head_dim x context_len``: per (query head, cached token) a dot product q.k and a
    weighted sum of v, each head_dim multiply-adds (2 FLOPs each). ``minimal_engine.bench.roofline.step_cost``
    calls it with the causal (query, key) pairs of a step (query heads, not KV heads: GQA shares K/V, not the work).
    """
    for value, what in ((layers, "layers"), (heads, "heads"), (head_dim, "head_dim")):
        _check_positive(value, what)
    _check_positive(context_len, "context_len", allow_zero=True)
    return 4 * layers * heads * head_dim * int(context_len)


def matmul_params(model: str | ModelShape) -> float:
    """Weights one token multiplies (one multiply-add each): ``params`` less an untied input embedding table
    (``ModelShape.embedding_params``: a lookup of one row, no matmul). A tied table is lm_head's matrix, so
    it stays. Llama 3.1 8B: 8.03e9 - 128,256 x 4,096 = 7.50e9, what the engine's model multiplies
    (``bench.roofline.weight_counts``: layers + lm_head, up to the RMSNorm weights)."""
    s = get_model_shape(model)
    return s.params - s.embedding_params


def flops_per_token(model: str | ModelShape, context_len: int) -> float:
    """FLOPs of one decode token: ``2 x matmul_params`` (one multiply-add per weight it multiplies) plus the
    attention term.

    Llama 3.1 8B at a context of 8,192: 2 x 7.50e9 + 4 x 32 x 32 x 128 x 8,192 = 15.01e9 + 4.29e9, the sum of
    ``course.demos.decode_shapes`` over the engine's stages. ``2 x params`` would count the untied embedding
    table too (1.05e9 more).
    """
    s = get_model_shape(model)
    return 2 * matmul_params(s) + attention_flops_per_token(s.layers, s.heads, s.head_dim, context_len)


def generation_flops(model: str | ModelShape, prompt_len: int, output_len: int, kv_cache: bool = True) -> float:
    """FLOPs to generate ``output_len`` tokens after a ``prompt_len`` prompt, with or without a KV cache.

    With the cache each position is computed once: the prompt, then ``output_len - 1`` new tokens (the last
    token is never fed back). Without it, step ``i`` recomputes all ``prompt_len + i`` positions. A position
    ``p`` costs ``flops_per_token(model, p + 1)`` (it attends to itself and everything before it). lm_head is
    counted at every position, in both paths; the engine (``x[batch.logits_indices]``), like vLLM, applies it to
    the sampled rows only, which makes both totals, and the no-cache ratio, a little smaller.
    """
    _check_positive(prompt_len, "prompt_len")
    _check_positive(output_len, "output_len")
    s = get_model_shape(model)
    a = attention_flops_per_token(s.layers, s.heads, s.head_dim, 1)
    w = matmul_params(s)

    def prefix(n: int) -> float:                 # positions 0 .. n-1: sum of 2 x matmul_params + a x (p + 1)
        return 2 * w * n + a * n * (n + 1) // 2

    if kv_cache:
        return prefix(prompt_len + output_len - 1)
    return sum(prefix(prompt_len + i) for i in range(int(output_len)))


def no_cache_work_ratio(model: str | ModelShape, prompt_len: int, output_len: int) -> float:
    """How many times more FLOPs generation takes without a KV cache than with it."""
    return generation_flops(model, prompt_len, output_len, False) / generation_flops(model, prompt_len, output_len)
