"""A model's FLOP/s roof on this machine (chapter 2's lab and lesson): the largest of the matrix products timed,
the engine's own Linear kernel on this model's layer shapes included, so that no engine step beats its roof by
using a faster kernel than the one timed (review of 2026-12-07, chapter 2, defect 1: a plain fp32 ``a @ b`` was
slower than the engine's oneDNN pre-packed Linear layers on an AMD EPYC, and lab 2's prefill steps ran above
their "roof")::

    m = model_peaks("default")          # machine_peaks + the engine's kernel on the model's layer shapes
    print(peak_text(m))                 # what the peak is and how it was measured (one Japanese line)
"""
from __future__ import annotations

from minimal_engine.bench import roofline

from course.labkit.machine import machine_peaks
from course.runtime import get_llm

PEAK_ROWS = 512                            # tokens of the model-shaped products that the FLOP/s peak includes


def layer_shapes(cfg) -> list[tuple[int, int]]:
    """(in, out) features of one decoder layer's Linear layers, fused as in ``minimal_engine/model/llama.py``:
    qkv_proj, o_proj, gate_up_proj, down_proj."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return [(cfg.hidden_size, q + 2 * kv), (q, cfg.hidden_size), (cfg.hidden_size, 2 * cfg.intermediate_size),
            (cfg.intermediate_size, cfg.hidden_size)]


def model_linear_rate(cfg, dtype, device: str = "cpu", rows: int = PEAK_ROWS) -> float:
    """FLOP/s of the engine's Linear kernel on this model's layer shapes (``rows`` tokens), the fastest shape: the
    roof's model-shaped part, and (lab 2) the same kernel timed again between a long prefill's repeats."""
    return max(roofline.measure_linear_flops(dtype, i, rows, o, device=device) for i, o in layer_shapes(cfg))


def with_model_peak(machine: dict, cfg, dtype, rows: int = PEAK_ROWS) -> dict:
    """``machine`` with its ``flops_<dtype>`` raised to the engine's Linear kernel on this model's own layer shapes
    (``rows`` tokens), where that is faster: small layers that fit the CPU's caches can run faster than the
    1024 x 1024 product of ``machine_peaks``, and a roof the engine's steps beat is no roof."""
    import torch
    name = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    best = model_linear_rate(cfg, dtype, machine.get("device", "cpu"), rows)
    return {**machine, f"linear_model_{name}": best, f"flops_{name}": max(machine[f"flops_{name}"], best)}


def peak_text(m: dict, key: str = "flops_fp32") -> str:
    """One Japanese line: what the FLOP/s peak is and how it was measured (the largest of what was timed)."""
    name = key.split("_")[1]
    parts = [f"正方行列を素の a @ b で {m[f'mm_{name}'] / 1e9:.0f}",
             f"正方行列をエンジンの線形層のカーネルで {m[f'linear_{name}'] / 1e9:.0f}"]
    if f"linear_model_{name}" in m:
        parts.append(f"このモデルの線形層の形をエンジンのカーネルで {m[f'linear_model_{name}'] / 1e9:.0f}")
    return f"ピーク演算性能（{name}）: " + "、".join(parts) + f" GFLOP/s → いちばん速い {m[key] / 1e9:.0f} GFLOP/s を屋根にします"


def model_peaks(model="default", threads: int | None = None, device: str = "cpu") -> dict:
    """``machine_peaks`` plus the engine's Linear kernel on the model's layer shapes (``with_model_peak``)."""
    llm = get_llm(model, device)
    return with_model_peak(machine_peaks(threads, device), llm.model_config, llm.dtype)


__all__ = ["PEAK_ROWS", "layer_shapes", "model_linear_rate", "model_peaks", "peak_text", "with_model_peak"]
