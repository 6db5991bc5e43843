"""One engine step for the chapter-10 simulator: its constants, the hardware, the step's time.

``step_time_s`` is part 1 of the model that ``simulator`` describes: ``max(FLOPs / (peak x
COMPUTE_EFF), bytes / (bandwidth x MEMORY_EFF))`` plus the all-reduces of tensor parallelism and
fixed times. It counts what the engine computes: the layers for every token of the step, the
``lm_head`` (``vocab x hidden``) only for the rows that sample a token (every decode, and the last
row of each prompt's final chunk: the engine's ``batch.logits_indices``, vLLM's ``logits_indices``),
and no FLOPs for the embedding lookup. ``simulator`` re-exports these names for the notebooks.
Plain Python (no torch).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from minimal_engine.calculators.datasheets import GpuSpec, _check_positive, bytes_per_value
from minimal_engine.calculators.flops import attention_flops_per_token
from minimal_engine.calculators.kv import kv_bytes_per_token, weight_bytes
from minimal_engine.calculators.roofline import active_params, decode_step_bytes
from minimal_engine.calculators.sim_tables import (SIM_GPUS, SIM_MODELS, SimGpu, SimModel,
                                                   model_from_hf_config)
from minimal_engine.calculators.transfer import allreduce_bytes


@dataclass(frozen=True)
class SimConstants:
    """The model's constants. ``[fit]``: ``sim_calibration.fit()`` on the ``fit`` points (rounded); ``[set]``: set
    by hand (an engine setting, or 0). docs/simulator.md shows the error on the held-out points."""

    compute_eff: float = 0.433         # share of dense peak FLOP/s a step's matmuls reach [fit]
    memory_eff: float = 0.7375         # share of HBM bandwidth a step's reads reach [fit]
    layer_overhead_us: float = 25.0    # fixed time per layer per step (kernel launches, syncs) [fit]
    moe_overhead_us: float = 66.7      # extra fixed time per MoE layer per step (routing, dispatch, combine) [fit]
    seq_overhead_us: float = 0.0       # fixed time per request per layer per step (not batched work) [set]
    allreduce_latency_us: float = 26.25  # fixed time of one all-reduce (plus bytes / link bandwidth) [fit]
    request_overhead_ms: float = 96.9  # serving overhead per TTFT under load, x (1 - 1/C); 0 when idle [fit]
    max_batched_tokens: int = 8192     # tokens per step (vLLM max_num_batched_tokens; InferenceX's scripts) [set]
    # vLLM gpu_memory_utilization defaulted to 0.9 in earlier releases
    # (e.g. https://docs.vllm.ai/en/v0.10.2/api/vllm/config/cache.html) and is 0.92 in current vLLM
    # (https://docs.vllm.ai/en/stable/api/vllm/config/cache/), both checked 2026-12-07; this keeps 0.9.
    memory_utilization: float = 0.9    # share of HBM the engine may use [set]


DEFAULT_CONSTANTS = SimConstants()
DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")


@dataclass(frozen=True)
class Hardware:
    """One GPU (or the learner's machine) for the simulator: memory, bandwidth, FLOP/s, link, power, constants."""

    name: str
    memory_bytes: float
    bandwidth: float                   # B/s
    flops: dict                        # compute dtype -> FLOP/s
    link_bytes_s: float                # B/s, one direction
    watts: float | None
    constants: SimConstants


def get_sim_model(model) -> SimModel:
    """A model by table name (``SIM_MODELS``), a :class:`SimModel`, or an HF config (dict, file or folder)."""
    if isinstance(model, SimModel):
        return model
    if isinstance(model, str) and model in SIM_MODELS:
        return SIM_MODELS[model]
    if isinstance(model, dict) or hasattr(model, "__fspath__") or (isinstance(model, str) and "/" in model):
        return model_from_hf_config(model)
    raise ValueError(f"unknown model {model!r}; known models: {', '.join(SIM_MODELS)} "
                     "(or an HF config.json as a dict, file or folder)")


def get_hardware(gpu, constants: SimConstants | None = None) -> Hardware:
    """A GPU by name (``SIM_GPUS``) or a custom spec dict.

    Custom keys: ``name``, ``memory_gb``; bandwidth as ``hbm_tb_s``, ``bandwidth_gb_s`` or ``bandwidth`` (B/s,
    as ``roofline.measure_machine`` returns it); BF16 compute as ``bf16_tflops``, ``gflops`` or ``flops_bf16``
    (FLOP/s); optional ``flops_fp32`` (FLOP/s, an FP32 engine), ``fp8_tflops``, ``fp4_tflops``, ``link_gb_s``,
    ``tgp_w`` and any :class:`SimConstants` field (``compute_eff``, ``layer_overhead_us``, ...) to replace it.
    """
    c = constants or DEFAULT_CONSTANTS
    if isinstance(gpu, str):
        if gpu not in SIM_GPUS:
            raise ValueError(f"unknown GPU {gpu!r}; known GPUs: {', '.join(SIM_GPUS)} (or a custom spec dict)")
        g: SimGpu = SIM_GPUS[gpu]
        s: GpuSpec = g.spec
        flops = {"bf16": s.bf16_tflops * 1e12, "fp8": (g.fp8_tflops or s.bf16_tflops) * 1e12}
        flops["fp4"] = g.fp4_tflops * 1e12 if g.fp4_tflops else flops["fp8"]
        # Memory: the marketed capacity (GpuSpec.memory_gb) read as 10^9 B, the same unit for every GPU. A runtime
        # sees more: nvidia-smi (NVML) totals are 81,559 MiB = 85.5e9 B for H100 80GB and 143,771 MiB = 150.8e9 B for
        # H200 141GB (https://thundergolfer.com/blog/nvidia-gpu-memory-capacity, checked 2026-12-07); no runtime
        # total is cited here for B200, MI300X or MI355X, so the marketed figure is kept for all. The memory limits
        # (max_concurrency) therefore lean low; the activation and CUDA-graph reservations the simulator does not
        # subtract lean the other way (lesson 10 prints H200's limit both ways).
        return Hardware(s.name, s.memory_gb * 1e9, s.hbm_tb_s * 1e12, flops, g.link_gb_s * 1e9, g.tgp_w, c)
    if not isinstance(gpu, dict):
        raise ValueError(f"gpu must be a name ({', '.join(SIM_GPUS)}) or a spec dict, got {gpu!r}")
    d = dict(gpu)
    bw = d.get("bandwidth") or (d["hbm_tb_s"] * 1e12 if "hbm_tb_s" in d else
                                d["bandwidth_gb_s"] * 1e9 if "bandwidth_gb_s" in d else None)
    fl = d.get("flops_bf16") or (d["bf16_tflops"] * 1e12 if "bf16_tflops" in d else
                                 d["gflops"] * 1e9 if "gflops" in d else None)
    if bw is None or fl is None or "memory_gb" not in d:
        raise ValueError("a custom GPU spec needs memory_gb, a bandwidth (hbm_tb_s, bandwidth_gb_s or bandwidth "
                         "in B/s) and a BF16 compute rate (bf16_tflops, gflops or flops_bf16 in FLOP/s)")
    for v, what in ((bw, "bandwidth"), (fl, "compute rate"), (d["memory_gb"], "memory_gb")):
        _check_positive(v, what)
    flops = {"bf16": fl, "fp8": d.get("fp8_tflops", 0) * 1e12 or fl}
    flops["fp4"] = d.get("fp4_tflops", 0) * 1e12 or flops["fp8"]
    if d.get("flops_fp32"):
        flops["fp32"] = d["flops_fp32"]
    fields = {k: d[k] for k in SimConstants.__dataclass_fields__ if k in d}
    return Hardware(str(d.get("name", "custom")), d["memory_gb"] * 1e9, bw, flops, d.get("link_gb_s", 50) * 1e9,
                    d.get("tgp_w"), replace(c, **fields))


def compute_dtype(weight_dtype: str) -> str:
    """The matmuls' precision: FP8/FP4 weights on FP8/FP4 tensor cores (else the next slower rate); INT8/INT4
    are weight-only (dequantised to BF16, as gpt-fast does)."""
    return {"fp8": "fp8", "fp4": "fp4", "fp32": "fp32"}.get(weight_dtype, "bf16")


def weight_read_bytes(model: SimModel, tokens: float, dtype: str,
                      sampled: float | None = None) -> float:
    """Weight bytes a step with ``tokens`` tokens reads (all GPUs). Dense: every layer weight once.
    MoE: the shared part plus each routed expert some token picks (idle with chance
    (1 - k/E)^tokens): active params to all of them. The ``lm_head`` only when a row samples
    (``sampled`` rows; default: any token), the embedding table only for the rows the step looks up
    (a table of unknown vocab counts whole, as a layer weight)."""
    total = weight_bytes(model.shape, dtype)
    if model.experts:
        frac = model.top_k / model.experts
        routed = (total - active_params(model.shape) * bytes_per_value(dtype)) / (1 - frac)
        total -= routed * (1 - frac) ** max(tokens, 1)
    vocab = (model.lm_head_params + model.embedding_params) * bytes_per_value(dtype)
    any_sampled = (tokens if sampled is None else sampled) > 0
    head = model.lm_head_params * bytes_per_value(dtype) * any_sampled
    rows = tokens * model.hidden * bytes_per_value(dtype) if model.vocab else 0   # embedding lookups
    return total - vocab + head + rows


def step_time_s(model: SimModel, hw: Hardware, tp: int, decodes: float, context: float, prefill_tokens: float,
                prompt_len: float, weight_dtype: str, kv_dtype: str, prefills: float | None = None,
                sampled_prompts: float | None = None) -> dict:
    """One engine step on a TP group: ``decodes`` requests at an average ``context``, plus
    ``prefill_tokens`` prompt tokens of ``prefills`` prompts (default 1 if any) ``prompt_len`` long,
    ``sampled_prompts`` of which end in this step and sample their first token (default: all
    ``prefills``; a share on average). The lm_head runs for the decodes and those prompts only.
    Returns t_compute, t_memory, t_comm and t (seconds)."""
    c, s = hw.constants, model.shape
    tokens = decodes + prefill_tokens
    prefills = prefills if prefills is not None else 1 if prefill_tokens else 0
    sampled = decodes + (prefills if sampled_prompts is None else sampled_prompts)   # lm_head rows
    body = active_params(s) - model.lm_head_params - model.embedding_params   # the layers' weights
    dense = 2 * body * tokens + 2 * model.lm_head_params * sampled             # matmuls with weights
    attn = sum(n * attention_flops_per_token(s.layers, s.heads, s.head_dim, int(ctx))   # decodes, prompt tokens
               for n, ctx in ((decodes, context), (prefill_tokens, (prompt_len + 1) / 2)))
    kv_shards = 1 if s.is_mla else min(tp, s.kv_heads)            # MLA's latent is replicated on every rank
    kv = decode_step_bytes(s, 1, int(context), weight_dtype, kv_dtype)["kv_bytes"] * decodes
    kv += kv_bytes_per_token(s, kv_dtype) * tokens                 # the new K and V written
    if compute_dtype(weight_dtype) not in hw.flops:
        raise ValueError(f"{hw.name} has no {weight_dtype} FLOP/s in its spec (a custom spec may give flops_fp32)")
    attn_rate = hw.flops["fp32" if weight_dtype == "fp32" else "bf16"]
    t_compute = (dense / hw.flops[compute_dtype(weight_dtype)] + attn / attn_rate) / tp / c.compute_eff
    t_memory = (weight_read_bytes(model, tokens, weight_dtype, sampled) / tp + kv / kv_shards) / (hw.bandwidth * c.memory_eff)
    ar_bytes = allreduce_bytes(model.hidden, tokens)              # two ring all-reduces per layer (tp > 1)
    t_comm = 2 * s.layers * (c.allreduce_latency_us * 1e-6 + 2 * (tp - 1) / tp * ar_bytes / hw.link_bytes_s) * (tp > 1)
    seqs = decodes + prefills
    overhead = s.layers * (c.layer_overhead_us + (c.moe_overhead_us if model.experts else 0)
                           + c.seq_overhead_us * seqs) * 1e-6
    t = max(t_compute, t_memory) + t_comm + overhead
    return {"t_compute": t_compute, "t_memory": t_memory, "t_comm": t_comm, "t": t,
            "bound": "compute" if t_compute > t_memory else "memory"}


