"""Roofline arithmetic on published shapes and GPU datasheets (plain Python, no torch): chapters 2 and 8.

Re-exported by ``minimal_engine.calculators`` (quizzes call them by name through ``answer_from``).
The per-step counts of the engine's own model (from its config, with KV read and written) are in
``minimal_engine.bench.roofline.step_cost``, which measures this machine with torch and uses the formulas
here (``ridge_intensity``, ``roof_flops``) and in ``flops`` / ``kv``; the functions here use the
``ModelShape`` / ``GpuSpec`` tables.

    ridge_point("A100")                               # 312e12 / 2.039e12 = 153 FLOP/B
    weight_intensity(1)                               # decode at batch 1, BF16: 1 FLOP per weight byte
    decode_tpot_bound_ms("Llama 2 7B", "A100")        # 13.48 GB / 2.039 TB/s = 6.61 ms (151 tok/s)
    share_of_bound(104.9, 1000 / decode_tpot_bound_ms("Llama 2 7B", "A100"))   # gpt-fast: 0.69
"""
from __future__ import annotations

from minimal_engine.calculators.datasheets import (GpuSpec, ModelShape, _check_positive, bytes_per_value, get_gpu_spec,
                                                   get_model_shape)
from minimal_engine.calculators.flops import attention_flops_per_token
from minimal_engine.calculators.kv import kv_bytes_per_token

__all__ = ["ridge_intensity", "roof_flops", "gpu_peak_flops", "gpu_bandwidth", "ridge_point",
           "arithmetic_intensity", "matmul_intensity", "weight_intensity", "active_params",
           "active_weight_bytes", "decode_step_bytes", "decode_step_flops", "decode_tpot_bound_ms",
           "tpot_ms_from_bytes", "share_of_bound", "spec_tokens_per_step", "spec_speedup",
           "spec_roofline_speedup"]


def ridge_intensity(peak_flops: float, bandwidth: float) -> float:
    """FLOPs per byte where a roofline bends: peak FLOP/s / bandwidth (B/s). Below it a kernel is
    memory-bandwidth-bound, above it compute-bound. ``ridge_point`` (a datasheet GPU) and
    ``bench.roofline.ridge_point`` (a measured machine) both call it."""
    return peak_flops / bandwidth


def roof_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roof at an arithmetic intensity: min(peak FLOP/s, intensity x bandwidth)."""
    return min(peak_flops, intensity * bandwidth)


def gpu_peak_flops(gpu: str | GpuSpec) -> float:
    """Dense BF16 matmul FLOP/s of a GPU (datasheet TFLOPS x 1e12, no sparsity)."""
    spec = get_gpu_spec(gpu)
    if spec.bf16_tflops is None:
        raise ValueError(f"no dense BF16 TFLOPS for {spec.name} in GPU_SPECS")
    return spec.bf16_tflops * 1e12


def gpu_bandwidth(gpu: str | GpuSpec) -> float:
    """HBM bandwidth in bytes/s (datasheet TB/s x 1e12)."""
    return get_gpu_spec(gpu).hbm_tb_s * 1e12


def ridge_point(gpu: str | GpuSpec) -> float:
    """FLOPs per byte where a GPU's roofline bends (``ridge_intensity`` of its datasheet peaks).
    A100: 312e12 / 2.039e12 = 153 FLOP/B."""
    return ridge_intensity(gpu_peak_flops(gpu), gpu_bandwidth(gpu))


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte moved (FLOP/B)."""
    _check_positive(flops, "flops", allow_zero=True)
    _check_positive(nbytes, "bytes")
    return flops / nbytes


def matmul_intensity(m: int, n: int, k: int, dtype: str | float = "bf16") -> float:
    """Intensity of an (m x k) @ (k x n) matmul that reads both inputs and writes the output once:
    2mnk / ((mk + kn + mn) x bytes). Square n x n in BF16: n / 3."""
    for v, what in ((m, "m"), (n, "n"), (k, "k")):
        _check_positive(v, what)
    return 2 * m * n * k / ((m * k + k * n + m * n) * bytes_per_value(dtype))


def weight_intensity(tokens_per_step: int, dtype: str | float = "bf16") -> float:
    """FLOPs per byte of weights when one step multiplies ``tokens_per_step`` tokens by every weight:
    2 x tokens / bytes per weight. Decode at batch B: B tokens (BF16: B FLOP/B); a prefill chunk of N
    tokens: N. Activations and the KV cache are left out (see ``decode_step_bytes``)."""
    _check_positive(tokens_per_step, "tokens_per_step")
    return 2 * tokens_per_step / bytes_per_value(dtype)


def active_params(model: str | ModelShape) -> float:
    """Parameters one token uses: all of them for a dense model, the activated ones for a MoE."""
    s = get_model_shape(model)
    return s.active_params or s.params


def active_weight_bytes(model: str | ModelShape, dtype: str | float = "bf16") -> float:
    """Bytes of the weights one token reads: active parameters x bytes per value (DeepSeek R1, FP8: 37 GB)."""
    return active_params(model) * bytes_per_value(dtype)


def decode_step_bytes(model: str | ModelShape, batch: int = 1, context: int = 0, dtype: str | float = "bf16",
                      kv_dtype: str | float | None = None) -> dict:
    """Bytes one decode step reads: the active weights once, plus each request's KV cache (``context``
    tokens each). Returns weight_bytes, kv_bytes and bytes (their sum). A MoE at a large batch touches
    more experts than one token does; this counts the active parameters once (a lower bound)."""
    _check_positive(batch, "batch")
    _check_positive(context, "context", allow_zero=True)
    w = active_weight_bytes(model, dtype)
    kv = kv_bytes_per_token(model, dtype if kv_dtype is None else kv_dtype) * context * batch
    return {"weight_bytes": w, "kv_bytes": kv, "bytes": w + kv}


def decode_step_flops(model: str | ModelShape, batch: int = 1, context: int = 0) -> float:
    """FLOPs of one decode step: per request 2 x the active params it multiplies (less an untied input
    embedding table, a lookup: ``ModelShape.embedding_params``, as ``flops.matmul_params``) plus attention
    over ``context`` tokens (``flops.attention_flops_per_token``: 4 x layers x heads x head_dim x context)."""
    s = get_model_shape(model)
    weights = active_params(s) - s.embedding_params
    return batch * (2 * weights + attention_flops_per_token(s.layers, s.heads, s.head_dim, context))


def tpot_ms_from_bytes(nbytes: float, bandwidth_bytes_s: float) -> float:
    """Time to read ``nbytes`` at ``bandwidth_bytes_s``, in ms: the memory bound of a decode step."""
    _check_positive(nbytes, "bytes")
    _check_positive(bandwidth_bytes_s, "bandwidth")
    return nbytes / bandwidth_bytes_s * 1000


def decode_tpot_bound_ms(model: str | ModelShape, gpu: str | GpuSpec, batch: int = 1, context: int = 0,
                         dtype: str | float = "bf16") -> float:
    """Roofline TPOT of a decode step on one GPU, in ms: the larger of bytes / bandwidth and
    FLOPs / peak. Llama 2 7B, BF16, batch 1 on an A100: 13.48 GB / 2.039 TB/s = 6.61 ms."""
    t_mem = tpot_ms_from_bytes(decode_step_bytes(model, batch, context, dtype)["bytes"], gpu_bandwidth(gpu))
    t_cmp = decode_step_flops(model, batch, context) / gpu_peak_flops(gpu) * 1000
    return max(t_mem, t_cmp)


def share_of_bound(measured: float, bound: float) -> float:
    """measured / bound for rates (tok/s): 0.69 means 69% of what the roofline allows."""
    _check_positive(measured, "measured")
    _check_positive(bound, "bound")
    return measured / bound


# ---- speculative decoding (chapter 8): Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
# Decoding" (ICML 2023), eq. 1 and theorem 3.8
def spec_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens per target step with k drafts, each accepted with probability alpha: (1 - a^(k+1)) / (1 - a)."""
    if not 0 <= alpha <= 1 or k < 0:
        raise ValueError(f"alpha must be in [0, 1] and k >= 0, got alpha={alpha!r}, k={k!r}")
    return k + 1.0 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def spec_speedup(alpha: float, k: int, c: float) -> float:
    """Speedup when one draft token costs c target steps and verifying k+1 tokens costs one step (memory-bound)."""
    return spec_tokens_per_step(alpha, k) / (k * c + 1)


def spec_roofline_speedup(model: str | ModelShape, gpu: str | GpuSpec, batch: int, k: int, alpha: float,
                          context: int = 0, c: float = 0.0) -> float:
    """The same with the roofline's verify step: B x (k+1) tokens read the weights once but cost (k+1) x the
    FLOPs, so the gain fades once the step is compute-bound (large batch). c: draft cost per token, in plain steps."""
    t1 = decode_tpot_bound_ms(model, gpu, batch, context)
    t_mem = tpot_ms_from_bytes(decode_step_bytes(model, batch, context)["bytes"], gpu_bandwidth(gpu))
    t_verify = max(t_mem, (k + 1) * decode_step_flops(model, batch, context) / gpu_peak_flops(gpu) * 1000)
    return spec_tokens_per_step(alpha, k) * t1 / (t_verify + k * c * t1)
