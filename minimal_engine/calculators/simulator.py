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
   engine does request by request; 0 for GPU engines, large for a Python engine on a CPU). FLOPs: 2 x the
   layers' active params per token at the weights' precision (FP8/FP4 tensor cores), 2 x the lm_head's
   (vocab x hidden) per row that samples (each decode, and a prompt once, at the end of its last chunk, as the
   engine's ``logits_indices``), attention (``attention_flops_per_token``) at the BF16 rate; bytes: the weights
   the step's tokens touch (a MoE touches more experts as the batch grows) plus each decode's KV cache
   (``roofline.decode_step_bytes``). The step lives in ``sim_step`` (``step_time_s``).
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

from minimal_engine.calculators.cost import joules_per_token, usd_per_million_tokens
from minimal_engine.calculators.kv import max_concurrent_users, weight_bytes
from minimal_engine.calculators.sim_step import (DEFAULT_CONSTANTS, DTYPES, Hardware, SimConstants,  # noqa: F401
                                                 compute_dtype, get_hardware, get_sim_model, step_time_s,
                                                 weight_read_bytes)
from minimal_engine.calculators.sim_tables import SimModel


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
        mixed = step_time_s(m, hw, tp, decodes, context, chunk if input_len else 0, input_len, weight_dtype,
                            kv_dtype, sampled_prompts=min(chunk / input_len, 1.0) if input_len else 0)
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
        ends = sum(n == r[0] for r, n in chunks)                                   # final chunks: they sample
        t += step_time_s(m, hw, tp, len(running), input_len + output_len / 2, sum(n for _, n in chunks), input_len,
                         weight_dtype, kv_dtype, len(chunks), ends)["t"]
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
