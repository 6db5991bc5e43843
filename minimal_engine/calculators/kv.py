"""KV cache size and memory budgets (chapters 1, 3 and 4): bytes per token, per request, users that fit.

The one source of the KV-bytes formula: ``ModelConfig.kv_bytes_per_token`` (the engine's pool),
``bench.roofline.step_cost``, the simulator and the KV hand-off (``transfer.kv_transfer_bytes``) all call
``kv_bytes_per_token_gqa`` / ``kv_bytes_per_token`` here. Plain Python (no torch); bytes are plain bytes,
"GB" is 10**9 bytes (as GPU datasheets use it).
"""
from __future__ import annotations

from minimal_engine.calculators.datasheets import (GpuSpec, ModelShape, _check_positive, bytes_per_value,
                                                   get_gpu_spec, get_model_shape)

__all__ = ["kv_bytes_per_token_gqa", "kv_bytes_per_token_mla", "kv_bytes_per_token", "kv_bytes_per_token_if_mha",
           "naive_mha_kv_bytes_per_token", "kv_cache_bytes", "kv_bytes_written_per_step", "weight_bytes",
           "gpu_memory_bytes", "max_concurrent_users"]


# ------------------------------------------------------- KV cache size (MHA / GQA / MQA / MLA)
def kv_bytes_per_token_gqa(layers: int, kv_heads: int, head_dim: int, bytes_per_value: float) -> int:
    """KV cache bytes per token for MHA, GQA and MQA.

    ``2 x layers x kv_heads x head_dim x bytes``: the 2 is one K and one V
    vector per KV head per layer. Use the number of *KV* heads, not query
    heads: GQA shares one KV head among several query heads (Llama 3.1 8B:
    32 query heads, 8 KV heads), MQA has a single KV head, MHA has as many
    KV heads as query heads.
    """
    for value, what in ((layers, "layers"), (kv_heads, "kv_heads"), (head_dim, "head_dim")):
        _check_positive(value, what)
    _check_positive(bytes_per_value, "bytes per value")
    return int(2 * layers * kv_heads * head_dim * bytes_per_value)


def kv_bytes_per_token_mla(layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
                           bytes_per_value: float) -> int:
    """KV cache bytes per token for MLA (Multi-head Latent Attention, DeepSeek V2/V3/R1).

    ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``. There is no
    factor 2: each layer caches one compressed latent (width ``kv_lora_rank``)
    from which both K and V are reconstructed, plus one small RoPE key
    (width ``qk_rope_head_dim``) shared by all heads. DeepSeek R1:
    61 x (512 + 64) = 35,136 values per token.
    """
    for value, what in ((layers, "layers"), (kv_lora_rank, "kv_lora_rank"),
                        (qk_rope_head_dim, "qk_rope_head_dim")):
        _check_positive(value, what)
    _check_positive(bytes_per_value, "bytes per value")
    return int(layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_value)


def kv_bytes_per_token(model: str | ModelShape, dtype: str | float = "bf16") -> int:
    """KV cache bytes per token of a model: the MLA formula if it uses MLA, else the GQA one."""
    shape = get_model_shape(model)
    nbytes = bytes_per_value(dtype)
    if shape.is_mla:
        return kv_bytes_per_token_mla(shape.layers, shape.kv_lora_rank, shape.qk_rope_head_dim, nbytes)
    return kv_bytes_per_token_gqa(shape.layers, shape.kv_heads, shape.head_dim, nbytes)


def kv_bytes_per_token_if_mha(model: str | ModelShape, dtype: str | float = "bf16") -> int:
    """What a GQA model would cache if every query head had its own KV head (plain MHA).

    The common mistake of putting query heads into the KV formula gives this
    number; for Llama 3.1 8B it is 4x the true size (32 vs 8 heads).
    """
    shape = get_model_shape(model)
    if shape.is_mla:
        return naive_mha_kv_bytes_per_token(shape, dtype)
    return kv_bytes_per_token_gqa(shape.layers, shape.heads, shape.head_dim, bytes_per_value(dtype))


def naive_mha_kv_bytes_per_token(model: str | ModelShape = "DeepSeek R1",
                                 dtype: str | float = "bf16") -> int:
    """KV bytes per token an MLA model would need if it cached full per-head K and V.

    Choice (stated because "head dim" is ambiguous for MLA): each of the
    ``heads`` query heads would cache a K of ``qk_nope_head_dim +
    qk_rope_head_dim`` (128 + 64 = 192 for DeepSeek R1) and a V of
    ``v_head_dim`` (128), the sizes in DeepSeek R1's config.json and what an
    MLA kernel materialises without weight absorption. So
    ``layers x heads x (qk_head_dim + v_head_dim) x bytes``:
    61 x 128 x 320 x 2 = 4,997,120 B/token in BF16, i.e. 40.9 GB for 8,192
    tokens (20.5 GB in FP8), versus 576 MB (288 MB) with MLA: 71x smaller.
    The rounder ``2 x 61 x 128 x 128`` (head dim 128 for both) gives 32.7 GB.
    """
    shape = get_model_shape(model)
    if not shape.is_mla:
        raise ValueError(f"{shape.name} does not use MLA; use kv_bytes_per_token_if_mha()")
    qk_head_dim = shape.qk_nope_head_dim + shape.qk_rope_head_dim
    return int(shape.layers * shape.heads * (qk_head_dim + shape.v_head_dim) * bytes_per_value(dtype))


# ---------------------------------------------------- memory budgets
def kv_cache_bytes(model: str | ModelShape, tokens: int, dtype: str | float = "bf16") -> int:
    """KV cache bytes for one request of ``tokens`` tokens (prompt + generated so far).

    DeepSeek R1, 8,192 tokens, FP8: 35,136 x 8,192 = 287,834,112 B (~288 MB).
    """
    _check_positive(tokens, "tokens", allow_zero=True)
    return kv_bytes_per_token(model, dtype) * int(tokens)


def weight_bytes(model: str | ModelShape, dtype: str | float = "bf16") -> int:
    """Approximate bytes of a model's weights: parameter count x bytes per value."""
    shape = get_model_shape(model)
    return int(shape.params * bytes_per_value(dtype))


def gpu_memory_bytes(gpu: str | GpuSpec, count: int = 1) -> int:
    """HBM capacity in bytes of ``count`` GPUs (datasheet GB = 10**9 bytes)."""
    _check_positive(count, "GPU count")
    return int(get_gpu_spec(gpu).memory_gb * 1e9 * count)


def max_concurrent_users(model: str | ModelShape, tokens_per_user: int, memory_bytes: float,
                         dtype: str | float = "bf16", weight_bytes: float = 0) -> int:
    """How many users' KV caches fit in ``memory_bytes`` after the weights are loaded.

    ``floor((memory_bytes - weight_bytes) / kv_cache_bytes(model, tokens_per_user))``.
    A real server also keeps activations and fragmentation headroom, so
    this is an upper bound.
    """
    _check_positive(memory_bytes, "memory_bytes")
    _check_positive(weight_bytes, "weight_bytes", allow_zero=True)
    _check_positive(tokens_per_user, "tokens_per_user")
    free = memory_bytes - weight_bytes
    if free <= 0:
        raise ValueError(f"weights ({weight_bytes:,.0f} B) do not fit in memory ({memory_bytes:,.0f} B)")
    return int(free // kv_cache_bytes(model, tokens_per_user, dtype))


def kv_bytes_written_per_step(model: str | ModelShape, batch: int = 1, dtype: str | float = "bf16") -> int:
    """KV bytes one decode step writes: one new token's K and V per request (``batch`` requests)."""
    _check_positive(batch, "batch")
    return kv_bytes_per_token(model, dtype) * int(batch)
