"""Calculators for KV cache memory, latency metrics and serving cost.

This module is the single source of every number that appears in the
lessons, labs, quizzes and tests: a quiz answer, a lesson figure and a lab
readout all call these functions, so they cannot drift apart.

Everything here is plain Python (no torch, ipywidgets or matplotlib).
Units: bytes are plain bytes; "GB" means 10**9 bytes (as GPU datasheets
use it); time is in milliseconds where the name says ``_ms``.

Sections (the tables they use, with sources, are in ``minimal_engine.calculators.datasheets``)
--------
1. KV cache size (MHA / GQA / MQA / MLA).
2. Memory budgets: KV bytes for a request, users that fit in a GPU.
3. Latency metrics: TPOT <-> tok/s/user.
4. Output vs total tokens: output_share and the tok/s conversions.
5. Economics: $/M tokens, J/token, pJ/token (InferenceX's formulas).
6. One token's work: FLOPs per token, KV bytes written per step, generation with / without a KV cache.

"Output" vs "total" tokens
--------------------------
The course's tok/s counts *output* (generated) tokens, as most engines and
MLPerf do. InferenceX's ``tput_per_gpu`` and its $/M tokens and J/token
count *total* tokens (input + output). Names say which one they mean:
``output_tok_s`` / ``usd_per_m_output_tokens`` / ``j_per_output_token``
versus ``total_tok_s`` / ``usd_per_m_total_tokens`` / ``j_per_total_token``.
With ``input_len`` prompt tokens and ``output_len`` generated tokens per
request, ``output_share = output_len / (input_len + output_len)`` converts
one into the other (8k in / 1k out: 1024 / 9216 = 1/9).
The generic ``usd_per_million_tokens`` and ``joules_per_token`` count the
same kind of tokens as the tok/s passed to them.
"""
from __future__ import annotations

from minimal_engine.calculators.datasheets import (  # noqa: F401  (tables and lookups are part of this module's API)
    DTYPE_BYTES, GPU_COSTS, GPU_SPECS, INFERENCEX_MI355X_ROW, MODEL_SHAPES, GpuCost, GpuSpec, ModelShape,
    _check_positive, _lookup, bytes_per_value, get_gpu_cost, get_gpu_spec, get_model_shape,
)

__all__ = [
    "DTYPE_BYTES", "GPU_COSTS", "GPU_SPECS", "INFERENCEX_MI355X_ROW", "MODEL_SHAPES",
    "GpuCost", "GpuSpec", "ModelShape",
    "get_model_shape", "get_gpu_spec", "get_gpu_cost", "bytes_per_value",
    "kv_bytes_per_token_gqa", "kv_bytes_per_token_mla", "kv_bytes_per_token",
    "kv_bytes_per_token_if_mha", "naive_mha_kv_bytes_per_token", "kv_cache_bytes",
    "weight_bytes", "gpu_memory_bytes", "max_concurrent_users",
    "tpot_ms_from_tok_s_user", "tok_s_user_from_tpot_ms",
    "output_share", "output_tok_s_from_total", "total_tok_s_from_output",
    "usd_per_million_tokens", "joules_per_token", "picojoules_per_token",
    "joules_to_picojoules", "gpu_hour_price", "inferencex_economics",
    "cost_per_million_tokens", "energy_per_token",
    "attention_flops_per_token", "flops_per_token", "kv_bytes_written_per_step", "generation_flops",
    "no_cache_work_ratio", "tp_allreduce_bytes",
]
# 7. roofline arithmetic (chapter 2): ridge points, intensities, TPOT bounds, in their own module
from minimal_engine.calculators.roofline import *  # noqa: E402,F401,F403
from minimal_engine.calculators import roofline as _roofline_calc  # noqa: E402
__all__ += _roofline_calc.__all__
# 8. KV memory and batching arithmetic (chapters 4 and 5), in their own module
from minimal_engine.calculators.capacity import *  # noqa: E402,F401,F403
from minimal_engine.calculators import capacity as _capacity_calc  # noqa: E402
__all__ += _capacity_calc.__all__
# 9. KV hand-off between prefill and decode engines, chunked prefill steps (chapter 9), beside the transport
from minimal_engine.disagg.kv_connector import LINKS_GB_S, chunked_prefill_steps, kv_transfer_bytes, transfer_seconds  # noqa
__all__ += ["LINKS_GB_S", "chunked_prefill_steps", "kv_transfer_bytes", "transfer_seconds"]


# ------------------------------------------------------- 1. KV cache size
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


# ---------------------------------------------------- 2. memory budgets
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


# ---------------------------------------------------- 3. latency metrics
def tpot_ms_from_tok_s_user(tok_s_user: float) -> float:
    """TPOT in ms from interactivity: ``1000 / tok_s_user`` (60 tok/s/user -> 16.67 ms)."""
    _check_positive(tok_s_user, "tok_s_user")
    return 1000.0 / tok_s_user


def tok_s_user_from_tpot_ms(tpot_ms: float) -> float:
    """Interactivity (tok/s/user) from TPOT: ``1000 / tpot_ms`` (InferenceX's ``intvty``)."""
    _check_positive(tpot_ms, "tpot_ms")
    return 1000.0 / tpot_ms


# ------------------------------------------------ 4. output vs total tokens
def _check_lengths(input_len: float, output_len: float) -> None:
    _check_positive(input_len, "input_len", allow_zero=True)
    _check_positive(output_len, "output_len")


def output_share(input_len: float, output_len: float) -> float:
    """Fraction of a request's tokens that are output tokens: ``output_len / (input_len + output_len)``.

    8k in / 1k out: 1024 / (8192 + 1024) = 1/9 = 0.111. 1k / 1k: 0.5.
    """
    _check_lengths(input_len, output_len)
    return output_len / (input_len + output_len)


def output_tok_s_from_total(total_tok_s: float, input_len: float, output_len: float) -> float:
    """Output tok/s hidden in a total (input + output) tok/s: ``total_tok_s x output_share``.

    InferenceX's MI355X row, 157.12 total tok/s/GPU at 8k/1k: 157.12 / 9 = 17.46 output tok/s/GPU.
    """
    _check_positive(total_tok_s, "total_tok_s", allow_zero=True)
    return total_tok_s * output_share(input_len, output_len)


def total_tok_s_from_output(output_tok_s: float, input_len: float, output_len: float) -> float:
    """Total (input + output) tok/s that goes with an output tok/s: ``output_tok_s / output_share``.

    Every request of ``input_len`` prompt tokens and ``output_len`` generated
    tokens processes ``input_len + output_len`` tokens; 100 output tok/s at
    8k/1k is 900 total tok/s.
    """
    _check_positive(output_tok_s, "output_tok_s", allow_zero=True)
    return output_tok_s / output_share(input_len, output_len)


# ---------------------------------------------------------- 5. economics
def usd_per_million_tokens(usd_per_gpu_hour: float, tok_s_per_gpu: float) -> float:
    """Cost per million tokens: ``($/GPU-hr) / (tok/s/gpu x 3600 / 1e6)``.

    The denominator is how many million tokens one GPU makes in an hour.
    The result counts the same tokens as ``tok_s_per_gpu``: pass total
    (input + output) tok/s for InferenceX's $/M tokens, output tok/s for
    $/M output tokens (or use :func:`cost_per_million_tokens` for both).
    """
    _check_positive(usd_per_gpu_hour, "usd_per_gpu_hour", allow_zero=True)
    _check_positive(tok_s_per_gpu, "tok_s_per_gpu")
    return usd_per_gpu_hour / (tok_s_per_gpu * 3600 / 1e6)


def joules_per_token(kw_per_gpu: float, tok_s_per_gpu: float) -> float:
    """Energy per token: ``kW per GPU x 1000 / (tok/s/gpu)`` (W = J/s, so J/s / tok/s = J/tok).

    Counts the same tokens as ``tok_s_per_gpu`` (InferenceX: total tokens).
    """
    _check_positive(kw_per_gpu, "kw_per_gpu", allow_zero=True)
    _check_positive(tok_s_per_gpu, "tok_s_per_gpu")
    return kw_per_gpu * 1000.0 / tok_s_per_gpu


def joules_to_picojoules(joules: float) -> float:
    """1 J = 10**12 pJ."""
    _check_positive(joules, "joules", allow_zero=True)
    return joules * 1e12


def picojoules_per_token(kw_per_gpu: float, tok_s_per_gpu: float) -> float:
    """Energy per token in pJ: ``joules_per_token(...) x 1e12`` (a unit conversion only)."""
    return joules_to_picojoules(joules_per_token(kw_per_gpu, tok_s_per_gpu))


def cost_per_million_tokens(usd_per_hour: float, output_tok_s: float, input_len: float,
                            output_len: float) -> dict:
    """$/M output tokens and $/M total tokens from a *measured output* tok/s.

    For a learner's sweep: ``output_tok_s`` is what the engine reports
    (generated tokens per second of the whole machine), ``usd_per_hour`` the
    price of that machine per hour, and every request has ``input_len``
    prompt and ``output_len`` generated tokens. Returns
    ``{"usd_per_m_output_tokens", "usd_per_m_total_tokens", "output_tok_s",
    "total_tok_s"}``. The total figure is the one comparable to InferenceX.
    $2/hr at 100 output tok/s, 8k/1k: $5.56/M output tokens, $0.62/M total.
    """
    _check_positive(output_tok_s, "output_tok_s")
    total = total_tok_s_from_output(output_tok_s, input_len, output_len)
    return {
        "usd_per_m_output_tokens": usd_per_million_tokens(usd_per_hour, output_tok_s),
        "usd_per_m_total_tokens": usd_per_million_tokens(usd_per_hour, total),
        "output_tok_s": float(output_tok_s),
        "total_tok_s": total,
    }


def energy_per_token(watts: float, output_tok_s: float, input_len: float, output_len: float) -> dict:
    """J per output token and J per total token from power (W) and a *measured output* tok/s.

    ``watts / output_tok_s`` and ``watts / total_tok_s`` (W = J/s). Returns
    ``{"j_per_output_token", "j_per_total_token"}``; InferenceX quotes the
    total one. 2,650 W at 17.46 output tok/s (8k/1k) gives 151.8 J per output
    token and 16.9 J per total token.
    """
    _check_positive(watts, "watts", allow_zero=True)
    _check_positive(output_tok_s, "output_tok_s")
    total = total_tok_s_from_output(output_tok_s, input_len, output_len)
    return {
        "j_per_output_token": joules_per_token(watts / 1000.0, output_tok_s),
        "j_per_total_token": joules_per_token(watts / 1000.0, total),
    }


def gpu_hour_price(gpu: str | GpuCost, tier: str = "hyperscaler") -> float:
    """InferenceX's $/GPU-hr for ``tier`` in {"hyperscaler", "neocloud", "rental_3yr"}."""
    cost = get_gpu_cost(gpu)
    tiers = {"hyperscaler": cost.hyperscaler, "neocloud": cost.neocloud, "rental_3yr": cost.rental_3yr}
    return _lookup(tiers, tier, "price tier")


def inferencex_economics(gpu: str | GpuCost, total_tok_s_per_gpu: float, tier: str = "hyperscaler",
                         input_len: float | None = None, output_len: float | None = None) -> dict:
    """$/M tokens and J/token for one TOTAL (input + output) throughput on one GPU, as InferenceX computes them.

    Reproduces the published MI355X row: 157.12 total tok/s/gpu with the
    hyperscaler-owned price ($1.48/GPU-hr) and 2.65 kW gives $2.62/M total
    tokens and 16.9 J/total token. (The neocloud price, $1.90, would give $3.36.)
    With ``input_len`` and ``output_len`` it also returns the output-only
    equivalents (``output_tok_s_per_gpu``, ``usd_per_m_output_tokens``,
    ``j_per_output_token``): at 8k/1k, 9x the total-token figures.
    """
    cost = get_gpu_cost(gpu)
    price = gpu_hour_price(cost, tier)
    out = {
        "gpu": cost.name,
        "tier": tier,
        "usd_per_gpu_hour": price,
        "total_tok_s_per_gpu": float(total_tok_s_per_gpu),
        "usd_per_m_total_tokens": usd_per_million_tokens(price, total_tok_s_per_gpu),
        "j_per_total_token": joules_per_token(cost.all_in_kw, total_tok_s_per_gpu),
        "pj_per_total_token": picojoules_per_token(cost.all_in_kw, total_tok_s_per_gpu),
    }
    if input_len is not None or output_len is not None:
        output_tok_s = output_tok_s_from_total(total_tok_s_per_gpu, input_len, output_len)
        out["output_tok_s_per_gpu"] = output_tok_s
        out["usd_per_m_output_tokens"] = usd_per_million_tokens(price, output_tok_s)
        out["j_per_output_token"] = joules_per_token(cost.all_in_kw, output_tok_s)
    return out


# ------------------------------------------- 6. one token's work and the KV cache (chapter 3)
def attention_flops_per_token(layers: int, heads: int, head_dim: int, context_len: int) -> int:
    """Attention FLOPs of one query token over ``context_len`` cached tokens, all layers.

    ``4 x layers x heads x head_dim x context_len``: per (query head, cached token) a dot product q.k and a
    weighted sum of v, each head_dim multiply-adds (2 FLOPs each). The same term as in
    ``minimal_engine.bench.roofline.step_cost`` (query heads, not KV heads: GQA shares K/V, not the work).
    """
    for value, what in ((layers, "layers"), (heads, "heads"), (head_dim, "head_dim")):
        _check_positive(value, what)
    _check_positive(context_len, "context_len", allow_zero=True)
    return 4 * layers * heads * head_dim * int(context_len)


def flops_per_token(model: str | ModelShape, context_len: int) -> float:
    """FLOPs of one decode token: ``2 x params`` (one multiply-add per weight) plus the attention term.

    Llama 3.1 8B at a context of 8,192: 2 x 8.03e9 + 4 x 32 x 32 x 128 x 8,192 = 16.06e9 + 4.29e9.
    ``params`` counts the embedding table too (a lookup, no FLOPs), so this rounds up slightly.
    """
    s = get_model_shape(model)
    return 2 * s.params + attention_flops_per_token(s.layers, s.heads, s.head_dim, context_len)


def kv_bytes_written_per_step(model: str | ModelShape, batch: int = 1, dtype: str | float = "bf16") -> int:
    """KV bytes one decode step writes: one new token's K and V per request (``batch`` requests)."""
    _check_positive(batch, "batch")
    return kv_bytes_per_token(model, dtype) * int(batch)


def generation_flops(model: str | ModelShape, prompt_len: int, output_len: int, kv_cache: bool = True) -> float:
    """FLOPs to generate ``output_len`` tokens after a ``prompt_len`` prompt, with or without a KV cache.

    With the cache each position is computed once: the prompt, then ``output_len - 1`` new tokens (the last
    token is never fed back). Without it, step ``i`` recomputes all ``prompt_len + i`` positions. A position
    ``p`` costs ``flops_per_token(model, p + 1)`` (it attends to itself and everything before it).
    """
    _check_positive(prompt_len, "prompt_len")
    _check_positive(output_len, "output_len")
    s = get_model_shape(model)
    a = attention_flops_per_token(s.layers, s.heads, s.head_dim, 1)

    def prefix(n: int) -> float:                 # positions 0 .. n-1: sum of 2 x params + a x (p + 1)
        return 2 * s.params * n + a * n * (n + 1) // 2

    if kv_cache:
        return prefix(prompt_len + output_len - 1)
    return sum(prefix(prompt_len + i) for i in range(int(output_len)))


def no_cache_work_ratio(model: str | ModelShape, prompt_len: int, output_len: int) -> float:
    """How many times more FLOPs generation takes without a KV cache than with it."""
    return generation_flops(model, prompt_len, output_len, False) / generation_flops(model, prompt_len, output_len)


def tp_allreduce_bytes(layers: int, hidden_size: int, tokens: int = 1, bytes_per_value: float = 2) -> int:
    """Bytes tensor parallelism all-reduces in one step (chapter 7): 2 per layer (after o_proj and down_proj)
    of [tokens, hidden] values, whatever the TP size (a ring moves 2 (N-1)/N of it per GPU)."""
    return int(2 * layers * hidden_size * tokens * bytes_per_value)
