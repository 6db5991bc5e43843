"""Where a decode step's time goes: torch.profiler over a few pure decode steps (`python -m minimal_engine.bench
--profile`).

    from minimal_engine.bench.profile import profile_decode_steps, format_profile
    print(format_profile(profile_decode_steps(llm, batch_size=1, prompt_len=128)))

The table lists the operators with the most *self* time (time inside the operator itself, not in the operators
it calls), per step. The breakdown sorts that time into
  * linear layers (the weight matrices: mm / addmm / oneDNN's packed linear), with the weight bytes they
    read per second: at batch 1 this is the number to compare with the machine's bandwidth;
  * attention matmuls (bmm), KV copies (index_select / index_copy / gathers),
  * everything else: the many small element-wise operators (norms, RoPE, residual adds, casts);
  * outside operators: the rest of the step's wall time (Python, the scheduler, building the step's tensors).
On CUDA the operators' CPU time is the launch cost; the GPU kernels' own time is in the CUDA columns.
"""
from __future__ import annotations

import time

import torch

from minimal_engine.bench.roofline import weight_counts
from minimal_engine.sampling_params import SamplingParams
from minimal_engine.bench.workload import random_requests

LINEAR = ("aten::mm", "aten::addmm", "aten::mv", "aten::addmv_", "mkldnn::_linear_pointwise",
          "aten::_weight_int8pack_mm")   # aten::mv: the one-row bf16 path (model/cpu_linears.py)
ATTENTION = ("aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
             "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention")
KV_COPIES = ("aten::index_select", "aten::index_copy_", "aten::index", "aten::gather")


def profile_decode_steps(llm, batch_size: int = 1, prompt_len: int = 128, num_steps: int = 5,
                         row_limit: int = 15, seed: int = 0) -> dict:
    """Profile num_steps pure decode steps of batch_size requests (prefill and one warm-up step not profiled)."""
    from torch.profiler import ProfilerActivity, profile
    engine = llm.engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine still has requests: profiling needs an idle engine")
    reqs = random_requests(batch_size, prompt_len, 1, llm.model_config.vocab_size, seed=seed)
    params = SamplingParams(temperature=0, max_tokens=num_steps + 8, ignore_eos=True)
    ids = [engine.add_request(r.prompt_ids, params) for r in reqs]
    cuda = llm.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        seqs = [engine.seqs[i] for i in ids]
        while any(s.num_computed_tokens < s.num_prompt_tokens for s in seqs):
            engine.step()
        engine.step()                                         # warm-up decode step
        with profile(activities=activities) as prof:
            t = time.perf_counter()
            for _ in range(num_steps):
                engine.step()
            wall = (time.perf_counter() - t) / num_steps
    finally:
        for i in ids:
            engine.abort_request(i)
    events = prof.key_averages()
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    self_ms = {e.key: e.self_cpu_time_total / 1000 / num_steps for e in events}   # per step
    total = sum(self_ms.values())
    linear = sum(v for k, v in self_ms.items() if k in LINEAR)
    w = weight_counts(llm.model_config)
    weight_bytes = (w["layers"] + w["lm_head"]) * llm.dtype.itemsize
    breakdown = {"step_ms": wall * 1000, "linear_ms": linear,
                 "linear_GBps": weight_bytes / (linear / 1000) / 1e9 if linear else None,
                 "attention_ms": sum(v for k, v in self_ms.items() if k in ATTENTION),
                 "kv_copies_ms": sum(v for k, v in self_ms.items() if k in KV_COPIES),
                 "operators_per_step": sum(e.count for e in events) / num_steps}
    breakdown["other_ops_ms"] = total - linear - breakdown["attention_ms"] - breakdown["kv_copies_ms"]
    breakdown["outside_ops_ms"] = max(0.0, breakdown["step_ms"] - total)
    return {"batch_size": batch_size, "prompt_len": prompt_len, "num_steps": num_steps, "device": str(llm.device),
            "breakdown": breakdown, "table": events.table(sort_by=sort, row_limit=row_limit)}


def format_profile(p: dict) -> str:
    b = p["breakdown"]
    gbps = f" ({b['linear_GBps']:.1f} GB/s of weights)" if b["linear_GBps"] else ""
    lines = [f"decode step profile: batch {p['batch_size']}, prompt {p['prompt_len']}, {p['num_steps']} steps on "
             f"{p['device']} (self time per step; the profiler itself slows the step a little)",
             f"  step {b['step_ms']:.2f} ms = linear layers {b['linear_ms']:.2f} ms{gbps}"
             f" + attention matmuls {b['attention_ms']:.2f} ms + KV copies {b['kv_copies_ms']:.2f} ms"
             f" + other operators {b['other_ops_ms']:.2f} ms + outside operators (Python etc.) {b['outside_ops_ms']:.2f} ms",
             f"  {b['operators_per_step']:.0f} operator calls per step", "", p["table"]]
    return "\n".join(lines)
