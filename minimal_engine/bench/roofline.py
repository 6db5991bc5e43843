"""Roofline readout: how fast this machine can compute and move bytes, and what that allows one engine step.

A step of the engine cannot be faster than either of two bounds:
    compute bound = FLOPs of the step / peak FLOP/s        (prefill: many tokens per weight read)
    memory bound  = bytes the step must read / bandwidth   (decode: every weight read for few tokens)
`measure_machine()` measures the peaks here in a few seconds (matmul in fp32 and bf16, each with a plain `a @ b`
and with the kernel the engine's Linear layers take, the faster of the two; a large copy, a reduction and a
matrix-vector product); `step_cost()` counts FLOPs and bytes of one step of a model shape.
The formulas themselves (KV bytes, attention FLOPs, weight counts, ridge point, roof) are the plain-Python
ones of ``minimal_engine.calculators`` (kv, flops, roofline); this module adds the measurement (torch).

What step_cost counts (and leaves out, on purpose, to stay readable):
  * FLOPs: 2 x (linear weights of the layers) per token, attention scores and weighted sums
    (2 x 2 x heads x head_dim per cached token per query token), and the lm_head (2 x hidden x vocab)
    only for rows that sample (one per request), as the engine computes logits only there.
  * bytes: every layer weight and the lm_head once per step (the embedding table only for the rows
    looked up), K and V of the whole context read once per request, the new K and V written once.
    Activations are left out: they are small next to weights at these batch sizes.
"""
from __future__ import annotations

import math
import time

import torch

from minimal_engine.calculators.flops import attention_flops_per_token
from minimal_engine.calculators.roofline import gpu_bandwidth, gpu_peak_flops, ridge_intensity, roof_flops
from minimal_engine.config import ModelConfig
from minimal_engine.param_counts import weight_counts  # noqa: F401  (weight_counts: importable from here)


def _best_time(fn, repeats: int) -> float:
    fn()                                     # warm-up (allocations, kernel selection)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure_matmul_flops(dtype=torch.float32, n: int = 1024, repeats: int = 5, device="cpu") -> float:
    """FLOP/s of an n x n by n x n matmul (2 n^3 FLOPs), best of `repeats`."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    return 2 * n ** 3 / _best_time(lambda: (a @ b, sync()), repeats)


def measure_linear_flops(dtype=torch.float32, n: int = 1024, rows: int | None = None, out_features: int | None = None,
                         repeats: int = 5, device="cpu") -> float:
    """FLOP/s of the kernel the engine's Linear layers take here: x [rows, n] through an n -> out_features Linear
    (2 rows n out FLOPs; rows and out_features default to n), best of `repeats`. On the CPU the Linear is
    replaced as the engine replaces its own
    (``model.cpu_linears.use_cpu_linears``: oneDNN pre-packed weights where that kernel runs here, else plain
    F.linear), so a peak taken from this is never beaten by the engine's matrix products for using a faster kernel
    than the one timed (a plain fp32 `a @ b` can take a slower path than the pre-packed weights on some CPUs)."""
    from torch import nn

    from minimal_engine.model.cpu_linears import use_cpu_linears
    rows, out = rows or n, out_features or n
    model = nn.Sequential(nn.Linear(n, out, bias=False)).to(device=device, dtype=dtype)
    if torch.device(device).type == "cpu":
        use_cpu_linears(model)
    x = torch.randn(rows, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    with torch.inference_mode():
        return 2 * rows * n * out / _best_time(lambda: (model(x), sync()), repeats)


def measure_bandwidth(megabytes: int = 128, repeats: int = 5, device="cpu") -> dict:
    """Bytes/s of a large copy (reads + writes both counted) and of a sum (reads only)."""
    x = torch.ones(megabytes * (1 << 20) // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    nbytes = x.numel() * 4
    copy = 2 * nbytes / _best_time(lambda: (y.copy_(x), sync()), repeats)
    total = nbytes / _best_time(lambda: (x.sum(), sync()), repeats)
    return {"copy": copy, "sum": total}


def measure_matvec_bandwidth(n: int = 4096, dtype=torch.bfloat16, repeats: int = 10, device="cpu") -> float:
    """Bytes/s of a matrix-vector product (the matrix is read once), with PyTorch's default kernel for `v @ w.T`:
    the kind of work a batch-1 decode step does. (The engine's own one-row kernels on the CPU, which can be faster,
    are compared in benchmarks/matvec_kernels.py.)"""
    w = torch.randn(n, n, device=device).to(dtype)
    v = torch.randn(1, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    return w.numel() * w.element_size() / _best_time(lambda: (v @ w.T, sync()), repeats)


QUICK_MIN_MB = 128     # quick mode's smallest bandwidth buffer: 4x a 32 MiB L3. On an AMD EPYC with 32 MiB L3 a 64 MB
                       # sum read 20-29 GB/s and an 8 MB matvec 22-23 GB/s against 11-16 GB/s at 128-512 MB (blind
                       # reading 2026-12-07b ch02 second #6): a buffer the last-level cache holds measures the cache


def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """The CPU's largest cache (bytes), from Linux's sysfs (``index*/size`` such as '32768K'); None elsewhere."""
    import glob
    import os
    sizes = []
    for d in glob.glob(os.path.join(root, "index*")):
        try:
            text = open(os.path.join(d, "size")).read().strip().upper()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes) if sizes else None


def bandwidth_buffer_mb(quick: bool, device="cpu") -> int:
    """Megabytes of the bandwidth probes' buffers, in both modes (``quick`` is kept for callers): at least
    QUICK_MIN_MB and 4x the last-level cache on a CPU, so that the probes read memory, not the cache (final blind
    reading ch02 #3: full mode's 4096 x 4096 bf16 matvec was 32 MiB, the size of this EPYC's L3)."""
    llc = last_level_cache_bytes() if torch.device(device).type == "cpu" else None
    return max(QUICK_MIN_MB, 4 * (llc or 0) // (1 << 20))


def matvec_size(megabytes: int, itemsize: int = 2) -> int:
    """n of an n x n matrix of at least ``megabytes`` MiB (a multiple of 256)."""
    n = math.isqrt(megabytes * (1 << 20) // itemsize)
    return -(-n // 256) * 256


def measure_machine(device="cpu", quick: bool = False) -> dict:
    """This machine's peaks: flops_fp32, flops_bf16 (FLOP/s) and bandwidth, bw_copy, bw_sum, bw_matvec (B/s).
    Each peak is the largest of its measurements, as a bound should never be beaten: `bandwidth` of the three
    bandwidths, `flops_<dtype>` of an n x n matmul `a @ b` (``mm_<dtype>``) and the engine's Linear kernel on the
    same shape (``linear_<dtype>``, see measure_linear_flops). ``quick`` takes smaller matmuls; in both modes the
    bandwidth buffers, the matvec's matrix included, are ``bandwidth_buffer_mb`` (beyond the last-level cache)."""
    n, mb = (512 if quick else 1024), bandwidth_buffer_mb(quick, device)
    bw = measure_bandwidth(mb, device=device)
    res = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        res[f"mm_{name}"] = measure_matmul_flops(dtype, n, device=device)
        res[f"linear_{name}"] = measure_linear_flops(dtype, n, device=device)
        res[f"flops_{name}"] = max(res[f"mm_{name}"], res[f"linear_{name}"])
    res.update(bw_copy=bw["copy"], bw_sum=bw["sum"],
               bw_matvec=measure_matvec_bandwidth(matvec_size(mb), device=device))
    res["bandwidth"] = max(res["bw_copy"], res["bw_sum"], res["bw_matvec"])
    return res


def step_cost(cfg: ModelConfig, dtype_bytes: int, decode_contexts=(), prefill_lens=(), machine: dict | None = None,
              flops_key: str | None = None) -> dict:
    """FLOPs and bytes of one step, and its time bounds on `machine` (from measure_machine).

    decode_contexts: for each decoding request, its context length (tokens in the cache after this step).
    prefill_lens:    for each request prefilled in this step, its whole prompt length (no cached prefix).
    Returns tokens, flops, weight_bytes, kv_read_bytes, kv_write_bytes, kv_bytes (read + written), bytes,
    intensity (flops / bytes), and with a machine: t_compute, t_memory, t_bound (seconds) and bound
    ("memory" or "compute": which one is larger).
    """
    w = weight_counts(cfg)
    kv_tok = cfg.kv_bytes_per_token(dtype_bytes)
    d, p = list(decode_contexts), list(prefill_lens)
    tokens = len(d) + sum(p)
    rows = len(d) + len(p)                                   # rows that sample a token
    attn_pairs = sum(d) + sum(n * (n + 1) // 2 for n in p)   # (query, key) pairs, causal
    attn = attention_flops_per_token(cfg.num_layers, cfg.num_heads, cfg.head_dim, attn_pairs)
    flops = 2 * w["layers"] * tokens + attn + 2 * w["lm_head"] * rows
    weight_bytes = (w["layers"] + w["norms"] + w["lm_head"]) * dtype_bytes + tokens * cfg.hidden_size * dtype_bytes
    kv_read = (sum(d) + sum(p)) * kv_tok                     # read each request's context once
    kv_write = tokens * kv_tok                               # write the new tokens' K and V
    res = {"tokens": tokens, "flops": flops, "weight_bytes": weight_bytes, "kv_read_bytes": kv_read,
           "kv_write_bytes": kv_write, "kv_bytes": kv_read + kv_write, "bytes": weight_bytes + kv_read + kv_write}
    res["intensity"] = flops / res["bytes"]                  # FLOPs per byte (arithmetic intensity)
    if machine is not None:
        key = flops_key or ("flops_bf16" if dtype_bytes == 2 else "flops_fp32")
        res["t_compute"] = flops / machine[key]
        res["t_memory"] = res["bytes"] / machine["bandwidth"]
        res["t_bound"] = max(res["t_compute"], res["t_memory"])
        res["bound"] = "compute" if res["t_compute"] > res["t_memory"] else "memory"
    return res


def gpu_machine(gpu: str) -> dict:
    """A GPU from the datasheet table (``minimal_engine.calculators.datasheets.GPU_SPECS``) as a machine for step_cost:
    dense BF16 FLOP/s and HBM bandwidth. Only ``flops_bf16`` is set: predict BF16 steps (dtype_bytes=2)."""
    return {"name": gpu, "flops_bf16": gpu_peak_flops(gpu), "bandwidth": gpu_bandwidth(gpu), "datasheet": True}


def ridge_point(machine: dict, flops_key: str = "flops_bf16") -> float:
    """FLOPs per byte where the machine's roofline bends: peak FLOP/s / bandwidth (``calculators.roofline``)."""
    return ridge_intensity(machine[flops_key], machine["bandwidth"])


def attainable_flops(intensity: float, machine: dict, flops_key: str = "flops_bf16") -> float:
    """The roof at an intensity: min(peak FLOP/s, intensity x bandwidth) (``calculators.roofline.roof_flops``)."""
    return roof_flops(intensity, machine[flops_key], machine["bandwidth"])


def format_machine(m: dict) -> str:
    return (f"matmul fp32 {m['flops_fp32'] / 1e9:.0f} GFLOP/s, bf16 {m['flops_bf16'] / 1e9:.0f} GFLOP/s; "
            f"bandwidth copy {m['bw_copy'] / 1e9:.1f} GB/s, sum {m['bw_sum'] / 1e9:.1f} GB/s, "
            f"matvec {m['bw_matvec'] / 1e9:.1f} GB/s")
