"""A roofline performance simulator: TTFT, TPOT, tok/s per GPU and cost for a model served on GPUs (chapter 10).

    simulate(model="llama-3.3-70b", gpu="H100", num_gpus=2, tp=2, weight_dtype="fp8", kv_dtype="fp8",
             input_len=5000, output_len=500, concurrency=25)
    -> {"ttft_ms", "tpot_ms", "output_tok_s_per_gpu", "total_tok_s_per_gpu", "interactivity", "fits",
        "max_concurrency", ...}  (+ "usd_per_m_*_tokens", "joules_per_*token" with usd_per_gpu_hour, kw_per_gpu)
    simulate_sweep(..., concurrencies=[1, 2, 4, ...]) -> one such dict per concurrency (a frontier)

The model, in four parts (every number it prints is a prediction, 予測, not a measurement):

1. One engine step on one GPU takes ``max(FLOPs / (peak x COMPUTE_EFF), bytes / (bandwidth x MEMORY_EFF))``
   plus fixed costs: the roofline of chapter 2 with two efficiencies, plus per layer LAYER_OVERHEAD (launches,
   syncs), MOE_OVERHEAD for a MoE layer (routing, dispatch, combine) and SEQ_OVERHEAD per request (work an
   engine does request by request; 0 for GPU engines, large for a Python engine on a CPU). FLOPs: 2 x active
   params per token at the weights' precision (FP8/FP4 tensor cores), attention (``attention_flops_per_token``)
   at the BF16 rate; bytes: the weights the step's tokens touch (a MoE touches more experts as the batch grows)
   plus each decode's KV cache (``roofline.decode_step_bytes``).
2. Tensor parallelism splits FLOPs and bytes over ``tp`` GPUs and adds two ring all-reduces per layer of
   ``transfer.allreduce_bytes`` each: ``ALLREDUCE_LATENCY + 2 (tp - 1) / tp x bytes / link bandwidth``.
3. Steady serving at a concurrency C (a closed loop: each finished request is replaced at once, as in
   InferenceX): each step holds the decodes of the requests past their prefill and the prefill tokens of
   arriving requests (chunked, at most MAX_BATCHED_TOKENS per step, vLLM's ``max_num_batched_tokens``).
   TPOT = the step time; a prompt takes ceil-free ``input_len / free budget`` steps plus an M/D/1 wait when
   prefills queue (behind the other C - 1, so none at C = 1); Little's law gives requests/s = C / E2EL.
   Requests beyond what the KV cache holds wait in a queue (their wait is in TTFT; throughput stops growing).
   Serving overhead, apart from the steps: TTFT + REQUEST_OVERHEAD x (1 - 1/C) (C per replica: queues of HTTP,
   tokenizer, scheduler behind the others in flight): 0 when idle (batch-1 TTFT = prefill steps), full under load.
4. Memory: weights / tp plus the KV of (input_len + output_len) tokens per request within
   MEMORY_UTILIZATION of HBM (``kv.max_concurrent_users``).

It cannot predict software maturity (kernels, scheduler, one framework against another), speculative decoding
/ MTP, prefix-cache hits, stream chunking of ITL, power capping, disaggregation, expert load imbalance. Constants:
[fit] by ``tools.sim_calibration`` or [set] by hand; GPUs, models: sim_tables; error by group: docs/simulator.md.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from minimal_engine.calculators.cost import joules_per_token, usd_per_million_tokens
from minimal_engine.calculators.datasheets import GpuSpec, _check_positive, bytes_per_value
from minimal_engine.calculators.flops import attention_flops_per_token
from minimal_engine.calculators.kv import kv_bytes_per_token, max_concurrent_users, weight_bytes
from minimal_engine.calculators.roofline import active_params, decode_step_bytes
from minimal_engine.calculators.sim_tables import SIM_GPUS, SIM_MODELS, SimGpu, SimModel, model_from_hf_config
from minimal_engine.calculators.transfer import allreduce_bytes


@dataclass(frozen=True)
class SimConstants:
    """The model's constants. ``[fit]``: ``sim_calibration.fit()`` on the ``fit`` points (rounded); ``[set]``: set
    by hand (an engine setting, or 0). docs/simulator.md shows the error on the held-out points."""

    compute_eff: float = 0.433         # share of dense peak FLOP/s a step's matmuls reach [fit]
    memory_eff: float = 0.8125         # share of HBM bandwidth a step's reads reach [fit]
    layer_overhead_us: float = 37.5    # fixed time per layer per step (kernel launches, syncs) [fit]
    moe_overhead_us: float = 70.8      # extra fixed time per MoE layer per step (routing, dispatch, combine) [fit]
    seq_overhead_us: float = 0.0       # fixed time per request per layer per step (not batched work) [set]
    allreduce_latency_us: float = 20.0  # fixed time of one all-reduce (plus bytes / link bandwidth) [fit]
    request_overhead_ms: float = 100.0  # serving overhead per TTFT under load, x (1 - 1/C); 0 when idle [fit]
    max_batched_tokens: int = 8192     # tokens per step (vLLM max_num_batched_tokens; InferenceX's scripts) [set]
    memory_utilization: float = 0.9    # share of HBM the engine may use (vLLM gpu_memory_utilization) [set]


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


def weight_read_bytes(model: SimModel, tokens: float, dtype: str) -> float:
    """Weight bytes a step with ``tokens`` tokens reads (all GPUs). Dense: every weight once. MoE: the shared part
    plus each routed expert some token picks (idle with chance (1 - k/E)^tokens): active params to all of them."""
    total = weight_bytes(model.shape, dtype)
    if not model.experts:
        return total
    frac = model.top_k / model.experts
    routed = (total - active_params(model.shape) * bytes_per_value(dtype)) / (1 - frac)
    return total - routed * (1 - frac) ** max(tokens, 1)


def step_time_s(model: SimModel, hw: Hardware, tp: int, decodes: float, context: float, prefill_tokens: float,
                prompt_len: float, weight_dtype: str, kv_dtype: str, prefills: float | None = None) -> dict:
    """One engine step on a TP group: ``decodes`` requests at an average ``context``, plus ``prefill_tokens``
    prompt tokens of ``prefills`` prompts (default 1 if any) ``prompt_len`` long. Returns t_compute, t_memory,
    t_comm and t (seconds)."""
    c, s = hw.constants, model.shape
    tokens = decodes + prefill_tokens
    dense = 2 * active_params(s) * tokens                          # matmuls with the weights
    attn = sum(n * attention_flops_per_token(s.layers, s.heads, s.head_dim, int(ctx))   # decodes, prompt tokens
               for n, ctx in ((decodes, context), (prefill_tokens, (prompt_len + 1) / 2)))
    kv_shards = 1 if s.is_mla else min(tp, s.kv_heads)            # MLA's latent is replicated on every rank
    kv = decode_step_bytes(s, 1, int(context), weight_dtype, kv_dtype)["kv_bytes"] * decodes
    kv += kv_bytes_per_token(s, kv_dtype) * tokens                 # the new K and V written
    if compute_dtype(weight_dtype) not in hw.flops:
        raise ValueError(f"{hw.name} has no {weight_dtype} FLOP/s in its spec (a custom spec may give flops_fp32)")
    attn_rate = hw.flops["fp32" if weight_dtype == "fp32" else "bf16"]
    t_compute = (dense / hw.flops[compute_dtype(weight_dtype)] + attn / attn_rate) / tp / c.compute_eff
    t_memory = (weight_read_bytes(model, tokens, weight_dtype) / tp + kv / kv_shards) / (hw.bandwidth * c.memory_eff)
    ar_bytes = allreduce_bytes(model.hidden, tokens)              # two ring all-reduces per layer (tp > 1)
    t_comm = 2 * s.layers * (c.allreduce_latency_us * 1e-6 + 2 * (tp - 1) / tp * ar_bytes / hw.link_bytes_s) * (tp > 1)
    seqs = decodes + (prefills if prefills is not None else 1 if prefill_tokens else 0)
    overhead = s.layers * (c.layer_overhead_us + (c.moe_overhead_us if model.experts else 0)
                           + c.seq_overhead_us * seqs) * 1e-6
    t = max(t_compute, t_memory) + t_comm + overhead
    return {"t_compute": t_compute, "t_memory": t_memory, "t_comm": t_comm, "t": t,
            "bound": "compute" if t_compute > t_memory else "memory"}


def max_concurrency_for(model: SimModel, hw: Hardware, num_gpus: int, tp: int, weight_dtype: str, kv_dtype: str,
                        tokens_per_request: int) -> int:
    """Requests whose whole KV cache (``tokens_per_request`` tokens) fits beside the weights, over all
    ``num_gpus // tp`` replicas: ``kv.max_concurrent_users`` on one TP group's usable HBM
    (KV split over min(tp, kv_heads) ranks; MLA's latent is replicated). 0 when the weights do not fit."""
    s = model.shape
    shards = 1 if s.is_mla else min(tp, s.kv_heads)
    usable, w = hw.memory_bytes * hw.constants.memory_utilization, weight_bytes(s, weight_dtype) / tp   # per GPU
    if w >= usable:
        return 0
    per_group = max_concurrent_users(s, tokens_per_request, usable * shards, kv_dtype, w * shards)
    return per_group * (num_gpus // tp)


def _check_args(num_gpus, tp, weight_dtype, kv_dtype, input_len, output_len, concurrency):
    for v, what in ((num_gpus, "num_gpus"), (tp, "tp"), (output_len, "output_len"), (concurrency, "concurrency")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{what} must be a positive integer, got {v!r}")
    if isinstance(input_len, bool) or not isinstance(input_len, int) or input_len < 0:
        raise ValueError(f"input_len must be a non-negative integer, got {input_len!r}")
    if num_gpus % tp:
        raise ValueError(f"num_gpus ({num_gpus}) must be a multiple of tp ({tp}): replicas = num_gpus / tp")
    for v, what in ((weight_dtype, "weight_dtype"), (kv_dtype, "kv_dtype")):
        if v not in DTYPES:
            raise ValueError(f"{what} must be one of {', '.join(DTYPES)}, got {v!r}")


def simulate(model="llama-3.3-70b", gpu="H100", num_gpus: int = 2, tp: int = 2, weight_dtype: str = "fp8",
             kv_dtype: str = "fp8", input_len: int = 5000, output_len: int = 500, concurrency: int = 25,
             usd_per_gpu_hour: float | None = None, kw_per_gpu: float | None = None,
             constants: SimConstants | None = None) -> dict:
    """Predicted (予測) steady-state serving of ``concurrency`` requests in flight (all GPUs together).

    Returns ttft_ms, tpot_ms, e2el_ms, interactivity (tok/s/user = 1000 / tpot_ms), requests_s,
    output_tok_s_per_gpu, total_tok_s_per_gpu (input + output, InferenceX's unit), fits, max_concurrency,
    batch (decodes per step), bound, and with cost inputs usd_per_m_total_tokens, usd_per_m_output_tokens,
    joules_per_token (per total token, as InferenceX) and joules_per_output_token.
    """
    _check_args(num_gpus, tp, weight_dtype, kv_dtype, input_len, output_len, concurrency)
    m, hw = get_sim_model(model), get_hardware(gpu, constants)
    c = hw.constants
    replicas = num_gpus // tp
    max_conc = max_concurrency_for(m, hw, num_gpus, tp, weight_dtype, kv_dtype, input_len + output_len)
    out = {"model": m.name, "gpu": hw.name, "num_gpus": num_gpus, "tp": tp, "weight_dtype": weight_dtype,
           "kv_dtype": kv_dtype, "input_len": input_len, "output_len": output_len, "concurrency": concurrency,
           "fits": concurrency <= max_conc, "max_concurrency": max_conc, "predicted": True}
    if max_conc < replicas:                                   # the weights (or one request) do not fit
        nan = float("nan")
        return out | dict.fromkeys(("ttft_ms", "tpot_ms", "e2el_ms", "interactivity", "requests_s", "batch",
                                    "output_tok_s_per_gpu", "total_tok_s_per_gpu"), nan) | {"bound": "memory"}
    conc = concurrency / replicas                             # per TP group
    running = min(conc, max_conc // replicas)                 # the rest waits for KV space
    context = input_len + output_len / 2                      # average context of a decoding request
    others = 1 - 1 / max(conc, 1.0)                           # a request waits behind the others, never itself
    serving = c.request_overhead_ms * 1e-3 * others           # serving overhead, apart from the steps: 0 when idle
    t_avg, ttft, f = 0.0, 0.0, 0.0
    for _ in range(200):                                      # fixed point of the steady state
        e2el = ttft + (output_len - 1) * t_avg
        decodes = running * (output_len - 1) * t_avg / e2el if e2el > 0 else running
        prefill = running / e2el * input_len * t_avg if e2el > 0 else 0.0   # prompt tokens per step
        chunk = max(min(input_len, c.max_batched_tokens - decodes), 1.0)     # one prompt's tokens per step
        mixed = step_time_s(m, hw, tp, decodes, context, chunk if input_len else 0, input_len, weight_dtype, kv_dtype)
        dec = step_time_s(m, hw, tp, decodes, context, 0, input_len, weight_dtype, kv_dtype)
        f = min(prefill / chunk, 0.95) if input_len else 0.0  # share of steps that carry a prompt chunk
        service = max(input_len / chunk, 1.0) * mixed["t"]    # the prompt's own steps
        new = (f * mixed["t"] + (1 - f) * dec["t"],                                        # TPOT
               service * (1 + f / (2 * (1 - f)) * others) + serving)  # TTFT: M/D/1 wait, not for itself
        if abs(new[0] - t_avg) + abs(new[1] - ttft) < 1e-12:
            break
        t_avg, ttft = 0.5 * (t_avg + new[0]), 0.5 * (ttft + new[1])
    t, step = t_avg, dec                                     # bound: that of the decode steps
    e2el = ttft + (output_len - 1) * t
    req_s = running / e2el * replicas
    ttft += (conc - running) / (req_s / replicas)             # queued beyond the KV cache: wait for a slot
    out.update(ttft_ms=ttft * 1e3, tpot_ms=t * 1e3, e2el_ms=(ttft + (output_len - 1) * t) * 1e3,
               interactivity=1 / t, requests_s=req_s, batch=decodes, bound=step["bound"],
               output_tok_s_per_gpu=req_s * output_len / num_gpus,
               total_tok_s_per_gpu=req_s * (input_len + output_len) / num_gpus)
    if usd_per_gpu_hour is not None:
        out["usd_per_m_total_tokens"] = usd_per_million_tokens(usd_per_gpu_hour, out["total_tok_s_per_gpu"])
        out["usd_per_m_output_tokens"] = usd_per_million_tokens(usd_per_gpu_hour, out["output_tok_s_per_gpu"])
    if kw_per_gpu is not None:
        out["joules_per_token"] = joules_per_token(kw_per_gpu, out["total_tok_s_per_gpu"])
        out["joules_per_output_token"] = joules_per_token(kw_per_gpu, out["output_tok_s_per_gpu"])
    return out


def simulate_sweep(model="llama-3.3-70b", gpu="H100", concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                   **kwargs) -> list[dict]:
    """:func:`simulate` at each concurrency (a frontier: tok/s/GPU against tok/s/user)."""
    if not concurrencies:
        raise ValueError("concurrencies must not be empty")
    return [simulate(model, gpu, concurrency=int(n), **kwargs) for n in concurrencies]


def simulate_batch(model, gpu, num_gpus: int = 1, tp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                   input_len: int = 64, output_len: int = 32, concurrency: int = 4, max_num_seqs: int = 64,
                   constants: SimConstants | None = None) -> dict:
    """Predicted (予測) run of ``concurrency`` requests arriving at once (chapter 1), step by step: running decodes,
    then prompt chunks within MAX_BATCHED_TOKENS (at most ``max_num_seqs`` requests). Returns ttft_ms, tpot_ms
    (medians), tok_s (output tokens / makespan), total_tok_s, tok_s_per_user (1000 / tpot_ms), duration_s."""
    _check_args(num_gpus, tp, weight_dtype, kv_dtype, input_len, output_len, concurrency)
    m, hw = get_sim_model(model), get_hardware(gpu, constants)
    todo = [[input_len, output_len, None, None] for _ in range(concurrency)]   # prompt left, tokens left, t1, tN
    t = 0.0
    while any(r[1] for r in todo):
        running = [r for r in todo if r[0] == 0 and r[1] and r[2] is not None][:max_num_seqs]
        budget, chunks = hw.constants.max_batched_tokens - len(running), []
        for r in todo:
            if r[0] and budget > 0 and len(running) + len(chunks) < max_num_seqs:
                chunks.append((r, min(r[0], budget)))
                budget -= chunks[-1][1]
        t += step_time_s(m, hw, tp, len(running), input_len + output_len / 2, sum(n for _, n in chunks), input_len,
                         weight_dtype, kv_dtype, len(chunks))["t"]
        for r in running:
            r[1], r[3] = r[1] - 1, t
        for r, n in chunks:
            r[0] -= n
            if r[0] == 0:
                r[1], r[2], r[3] = r[1] - 1, t, t                              # the prefill samples token 1
    ttft = sorted(r[2] for r in todo)[concurrency // 2]
    tpot = sorted((r[3] - r[2]) / (output_len - 1) for r in todo)[concurrency // 2] if output_len > 1 else float("nan")
    return {"concurrency": concurrency, "ttft_ms": ttft * 1e3, "tpot_ms": tpot * 1e3, "duration_s": t,
            "tok_s": concurrency * output_len / t, "total_tok_s": concurrency * (input_len + output_len) / t,
            "tok_s_per_user": 1e3 / (tpot * 1e3), "predicted": True}
