"""Lab 8: how long the default model's Linear layers alone take at a few batch sizes (the weight pass
inside one decode step), to split the step's "fixed time" on this CPU::

    t = linear_pass_ms((1, 4, 8))      # {1: ms, 4: ms, 8: ms}: every Linear layer once, B rows each

Each layer is the engine's own module (CpuLinear, the kernel the engine chose at load), fed B rows, as
in a decode step of B requests (lm_head included: it also runs on one row per request). The figure is
the minimum over ``repeats`` passes. If the time hardly grows from 1 to 4 rows, the extra rows are
hidden behind reading the weights (the roofline idea behind a GPU's small batches; whether it holds on
this CPU, and how large a share of the step the pass is, is measured, not assumed), so the weight pass
is part of the per-step fixed time that batching and speculation share; the rest of the step is Python,
attention, sampling and the scheduler.
"""
from __future__ import annotations

import time

import torch

from course.runtime import cached_llm
from minimal_engine import LLM


def _model(device: str = "cpu"):
    return cached_llm(("lab8", "linears", device),
                      lambda: LLM(None, device=device, max_num_seqs=1, kv_cache_memory=16 << 20)).model


def linear_pass_ms(batches=(1, 4, 8), repeats: int = 30, device: str = "cpu") -> dict[int, float]:
    """Minimum time (ms) of one pass through every Linear layer of the default model with B rows."""
    layers = [m for m in _model(device).modules() if isinstance(m, torch.nn.Linear)]
    out = {}
    with torch.inference_mode():
        for b in batches:
            xs = [torch.randn(b, m.in_features, dtype=m.weight.dtype, device=m.weight.device) for m in layers]
            for m, x in zip(layers, xs):          # warm-up (first calls are slow)
                m(x)
            best = float("inf")
            for _ in range(repeats):
                t = time.perf_counter()
                for m, x in zip(layers, xs):
                    m(x)
                best = min(best, time.perf_counter() - t)
            out[b] = best * 1000
    return out


def weight_bytes(device: str = "cpu") -> int:
    """Bytes of the Linear layers' weights (what one pass reads)."""
    return sum(m.weight.numel() * m.weight.element_size() for m in _model(device).modules()
               if isinstance(m, torch.nn.Linear))


__all__ = ["linear_pass_ms", "weight_bytes"]
