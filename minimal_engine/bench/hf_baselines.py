"""Baselines: the same requests (same token ids, same output lengths, same weights) through transformers.

* run_hf_static: `model.generate` on static, left-padded batches of `batch_size` requests, one batch after
  the other. A batch runs until its longest output is done; shorter requests wait for it (that is the cost
  of static batching), but only their own tokens count as output.
  Timing: every request of a batch "arrives" when the batch starts (as in a client that keeps
  batch_size requests in flight). A streamer (`_StepClock`) records the wall time of each generation step:
  generate() calls put() once with the prompt, then once per step with the new tokens of the whole batch.
  Request i's token times are the first output_len[i] step times, so TTFT = first step time - batch start,
  and TPOT, ITL, E2EL follow with the same formulas as for our engine (metrics.summarize).
* run_hf_continuous: transformers' own continuous batching (`ContinuousBatchingManager`, what
  `model.generate_batch` runs), fed like our engine: at most max_concurrency requests in flight, each with
  its own max_new_tokens, its cache sized for that concurrency, after one untimed warm-up request. Timing: arrival = when add_request is called; token times = the manager's
  per-token timestamps (`record_timestamps=True`, time.perf_counter, as ours).
Both are greedy; end-of-sequence is ignored so that every request makes exactly output_len tokens.
"""
from __future__ import annotations

import time

import torch

from minimal_engine.engine.metrics import summarize
from minimal_engine.model.loader import hf_state_dict
from minimal_engine.engine.sequence import RequestMetrics
from minimal_engine.bench.workload import BenchRequest

HF_CONFIG = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}


def hf_model_for(llm):
    """A transformers model with the same weights as llm: loaded from llm's folder, or (synthetic shapes)
    built from the same config with our random weights copied in (loader.hf_state_dict splits qkv / gate_up)."""
    import transformers
    if llm.model_path is not None:
        return transformers.AutoModelForCausalLM.from_pretrained(llm.model_path, dtype=llm.dtype).to(llm.device).eval()
    c = llm.model_config
    rope = dict(c.rope_scaling or {"rope_type": "default"}, rope_theta=c.rope_theta)
    cfg = getattr(transformers, HF_CONFIG[c.variant])(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim,
        vocab_size=c.vocab_size, max_position_embeddings=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps,
        rope_parameters=rope, tie_word_embeddings=c.tie_word_embeddings, eos_token_id=None, bos_token_id=None,
        pad_token_id=0)
    with torch.device(llm.device):                # built where it runs (a GPU initialises 1B weights fast)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=llm.dtype).eval()
    missing, unexpected = model.load_state_dict(hf_state_dict(llm.model), strict=False)
    if [m for m in missing if not m.endswith("rotary_emb.inv_freq")] or unexpected:
        raise RuntimeError(f"weights do not line up with transformers: missing {missing[:3]}, extra {unexpected[:3]}")
    return model


class _StepClock:
    """A generate() streamer that only records when each step's tokens arrive."""

    def __init__(self):
        self.calls, self.times = 0, []

    def put(self, value):
        self.calls += 1
        if self.calls > 1:                       # the first call carries the prompt
            self.times.append(time.perf_counter())

    def end(self):
        pass


def _result(name: str, metrics: list, duration: float, concurrency: int, n: int) -> dict:
    res = {"backend": name, "max_concurrency": concurrency, "num_prompts": n}
    res.update(summarize(metrics, duration))
    return res


@torch.inference_mode()
def run_hf_static(model, requests: list[BenchRequest], batch_size: int, pad_token_id: int = 0,
                  use_tqdm: bool = True, warmup: bool = True) -> dict:
    """Static batches through model.generate (see the module docstring for the timing method)."""
    from transformers.generation.streamers import BaseStreamer
    clock_cls = type("StepClock", (_StepClock, BaseStreamer), {})
    gen = dict(do_sample=False, eos_token_id=None, pad_token_id=pad_token_id)
    if warmup:
        ids = torch.tensor([requests[0].prompt_ids[:16]], device=model.device)
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, **gen)
    batches = [requests[i:i + batch_size] for i in range(0, len(requests), batch_size)]
    bar = None
    if use_tqdm:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(requests), desc=f"hf static B={batch_size}", unit="req")
    metrics = []
    start = time.perf_counter()
    for batch in batches:
        width = max(r.input_len for r in batch)
        ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(batch):            # left padding: every prompt ends at the same column
            ids[i, width - r.input_len:] = torch.tensor(r.prompt_ids)
            mask[i, width - r.input_len:] = 1
        new = max(r.output_len for r in batch)
        clock = clock_cls()
        t0 = time.perf_counter()
        ids, mask = ids.to(model.device), mask.to(model.device)
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=None, streamer=clock, **gen)
        if out.shape[1] - width != new or len(clock.times) != new:
            raise RuntimeError(f"transformers made {out.shape[1] - width} tokens, expected {new}")
        for r in batch:
            times = clock.times[:r.output_len]
            metrics.append(RequestMetrics(t0, first_token_time=times[0], finished_time=times[-1],
                                          token_times=times, num_prompt_tokens=r.input_len))
        if bar:
            bar.update(len(batch))
    duration = time.perf_counter() - start
    if bar:
        bar.close()
    return _result("hf_generate_static", metrics, duration, batch_size, len(requests))


def run_hf_continuous(model, requests: list[BenchRequest], max_concurrency: int, use_tqdm: bool = True,
                      timeout_s: float = 600.0) -> dict:
    """transformers' continuous batching (the engine behind generate_batch), at most max_concurrency in flight."""
    import transformers
    gc = transformers.GenerationConfig(do_sample=False, max_new_tokens=max(r.output_len for r in requests),
                                       eos_token_id=None, pad_token_id=0)
    longest = max(r.input_len + r.output_len for r in requests)
    cbc = transformers.ContinuousBatchingConfig(      # sized like our engine: 16-token pages, 2048-token steps,
        page_size=16, num_blocks=max_concurrency * -(-longest // 16) + 4, max_batch_tokens=2048,  # room for C
        max_requests_per_batch=max_concurrency)   # (left alone it sizes its cache to most of free memory)
    bar = None
    if use_tqdm:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(requests), desc=f"hf continuous C={max_concurrency}", unit="req")
    metrics, arrival, pending = [], {}, list(enumerate(requests))[::-1]
    with model.continuous_batching_context_manager(generation_config=gc, continuous_batching_config=cbc,
                                                   block=True, timeout=5) as manager:
        manager.add_request(requests[0].prompt_ids[:16], request_id="warmup", max_new_tokens=4)
        while (w := manager.get_result(timeout=timeout_s)) is not None and not w.is_finished():
            pass                                  # the manager builds its cache lazily: keep that out of the clock
        start = time.perf_counter()
        deadline = start + timeout_s
        while pending or arrival:
            while pending and len(arrival) < max_concurrency:
                i, r = pending.pop()
                rid = f"bench_{i}"
                arrival[rid] = (time.perf_counter(), r)
                manager.add_request(r.prompt_ids, request_id=rid, max_new_tokens=r.output_len,
                                    record_timestamps=True)
            out = manager.get_result(timeout=1)
            if time.perf_counter() > deadline or (out is None and not manager.is_running()):
                raise RuntimeError("transformers' continuous batching stopped or ran past the time limit")
            if out is None or not out.is_finished():
                continue
            if out.error is not None:
                raise RuntimeError(f"transformers' continuous batching failed: {out.error}")
            t0, r = arrival.pop(out.request_id)
            times = list(out.timestamps)[:r.output_len]
            metrics.append(RequestMetrics(t0, first_token_time=times[0], finished_time=times[-1],
                                          token_times=times, num_prompt_tokens=r.input_len))
            if bar:
                bar.update(1)
        duration = time.perf_counter() - start
    if bar:
        bar.close()
    return _result("hf_generate_batch", metrics, duration, max_concurrency, len(requests))
