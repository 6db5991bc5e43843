"""Offline benchmark of our engine: replay a workload at a fixed maximum concurrency, sweep concurrency.

Max concurrency C means what it means in vLLM's bench client: at most C requests in flight. The loop below
adds requests to the LLMEngine until C are in flight, steps the engine, and adds the next one as soon as one
finishes, so a request's clock (arrival) starts when it enters, as when a client sends it. The engine's own
max_num_seqs must be >= C, or the engine itself would queue requests (run_offline refuses that).
"""
from __future__ import annotations

import time
from collections import deque

from minimal_engine.engine.metrics import summarize
from minimal_engine.bench.roofline import step_cost
from minimal_engine.sampling_params import SamplingParams
from minimal_engine.bench.workload import BenchRequest, random_requests


def run_offline(llm, requests: list[BenchRequest], max_concurrency: int, use_tqdm: bool = True,
                warmup: bool = True) -> dict:
    """Run the requests through llm.engine with at most max_concurrency in flight (greedy, ignore_eos).
    Returns metrics.summarize(...) (vLLM field names) plus the run's settings."""
    engine = llm.engine
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if max_concurrency > llm.config.max_num_seqs:
        raise ValueError(f"max_concurrency {max_concurrency} > the engine's max_num_seqs "
                         f"{llm.config.max_num_seqs}: build the LLM with max_num_seqs >= {max_concurrency}")
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine still has requests: a benchmark needs an idle engine")
    if warmup:                                   # first calls allocate and pick kernels: keep them out
        llm.generate([requests[0].prompt_ids[:16]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                     use_tqdm=False)
    bar = None
    if use_tqdm:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(requests), desc=f"engine C={max_concurrency}", unit="req")
    pending = deque(requests)
    in_flight: set[str] = set()
    finished = []
    start = time.perf_counter()
    try:
        while pending or in_flight:
            while pending and len(in_flight) < max_concurrency:
                r = pending.popleft()
                params = SamplingParams(temperature=0, max_tokens=r.output_len, ignore_eos=True)
                in_flight.add(engine.add_request(r.prompt_ids, params))
            for out in engine.step():
                if out.finished and out.request_id in in_flight:
                    in_flight.discard(out.request_id)
                    finished.append(out)
                    if bar:
                        bar.update(1)
    finally:
        for rid in in_flight:                    # on an interrupt, leave the engine clean
            engine.abort_request(rid)
        if bar:
            bar.close()
    duration = time.perf_counter() - start
    res = {"backend": "minimal_engine", "model": llm.model_name, "max_concurrency": max_concurrency,
           "num_prompts": len(requests)}
    res.update(summarize(finished, duration))
    spec = engine.speculator
    if spec is not None:                         # speculative decoding (features/spec_decode/): this run's drafts
        res.update(spec_figures(finished), spec_method=spec.method, num_speculative_tokens=spec.k)
    return res


def spec_figures(outputs) -> dict:
    """Speculative decoding over finished requests: drafts proposed and accepted, acceptance rate, and mean
    accepted length (tokens per verification step, 1 + accepted / steps, as vLLM's mean acceptance length)."""
    ms = [getattr(o, "metrics", o) for o in outputs]
    proposed, accepted = sum(m.num_draft_tokens for m in ms), sum(m.num_accepted_tokens for m in ms)
    steps = sum(m.num_spec_steps for m in ms)
    return {"spec_proposed": proposed, "spec_accepted": accepted, "spec_steps": steps,
            "spec_acceptance_rate": accepted / proposed if proposed else float("nan"),
            "spec_mean_accepted_length": 1 + accepted / steps if steps else float("nan")}


def add_bounds(res: dict, requests: list[BenchRequest], model_config, dtype_bytes: int, machine: dict) -> dict:
    """Roofline bounds next to the measured medians: TTFT of a mean prompt prefilled alone, TPOT of a decode
    step with max_concurrency requests at the mean context (input + half the output)."""
    n = len(requests)
    mean_in = sum(r.input_len for r in requests) / n
    mean_out = sum(r.output_len for r in requests) / n
    batch = min(res["max_concurrency"], n)
    prefill = step_cost(model_config, dtype_bytes, prefill_lens=[round(mean_in)], machine=machine)
    decode = step_cost(model_config, dtype_bytes, decode_contexts=[round(mean_in + mean_out / 2)] * batch,
                       machine=machine)
    res["bound_ttft_ms"] = prefill["t_bound"] * 1000
    res["bound_tpot_ms"] = decode["t_bound"] * 1000
    res["bound_output_throughput"] = batch / decode["t_bound"]
    return res


def run_sweep(llm, concurrencies, input_len: int, output_len: int, range_ratio: float = 1.0,
              output_range_ratio: float | None = None, num_prompts: int | None = None, seed: int = 0,
              requests_for=None, machine: dict | None = None, use_tqdm: bool = True) -> list[dict]:
    """One run_offline per max concurrency; num_prompts defaults to 10 x concurrency (InferenceX).
    requests_for(concurrency) -> list[BenchRequest] overrides the random workload (e.g. a dataset).
    With `machine` (roofline.measure_machine()) each row also gets bound_ttft_ms and bound_tpot_ms."""
    rows = []
    for c in concurrencies:
        if requests_for is not None:
            reqs = requests_for(c)
        else:
            reqs = random_requests(num_prompts or 10 * c, input_len, output_len, llm.model_config.vocab_size,
                                   range_ratio, output_range_ratio, seed)
        row = run_offline(llm, reqs, c, use_tqdm=use_tqdm)
        row.update(input_len=input_len, output_len=output_len, range_ratio=range_ratio)
        if machine is not None:
            add_bounds(row, reqs, llm.model_config, llm.dtype.itemsize, machine)
        rows.append(row)
    return rows


def decode_step_time(llm, batch_size: int, prompt_len: int, num_steps: int = 10, seed: int = 0,
                     range_ratio: float = 1.0) -> dict:
    """Median wall time of a pure decode step with batch_size requests whose prompts have prompt_len tokens
    (or lengths uniform in [range_ratio * prompt_len, prompt_len]). Prefill runs first (not timed); then each
    engine.step() is one decode token for every request."""
    engine = llm.engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine still has requests: a measurement needs an idle engine")
    if batch_size > llm.config.max_num_seqs:
        raise ValueError(f"batch_size {batch_size} > max_num_seqs {llm.config.max_num_seqs}")
    reqs = random_requests(batch_size, prompt_len, 1, llm.model_config.vocab_size, range_ratio, seed=seed)
    params = SamplingParams(temperature=0, max_tokens=num_steps + 16, ignore_eos=True)
    ids = [engine.add_request(r.prompt_ids, params) for r in reqs]
    try:
        seqs = [engine.seqs[i] for i in ids]
        while any(s.num_computed_tokens < s.num_prompt_tokens for s in seqs):   # prefill (and first token)
            engine.step()
        engine.step()                                                      # one untimed decode step
        times, comm = [], []
        for _ in range(num_steps):
            c0, t = engine.comm_stats, time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t)
            if c0 is not None:               # tensor parallelism: this step's all-reduces (features/tensor_parallel/)
                c1 = engine.comm_stats
                comm.append((c1["seconds"] + c1["send_seconds"] - c0["seconds"] - c0["send_seconds"],
                             c1["all_reduces"] - c0["all_reduces"], c1["bytes"] - c0["bytes"]))
    finally:
        for i in ids:
            engine.abort_request(i)
    times.sort()
    context = round(sum(len(r.prompt_ids) for r in reqs) / len(reqs) + 2 + num_steps // 2, 1)
    out = {"batch_size": batch_size, "prompt_len": prompt_len, "median_step_ms": times[len(times) // 2] * 1000,
           "min_step_ms": times[0] * 1000, "mean_context": context}
    if comm:
        comm.sort()
        out.update(comm_ms=comm[len(comm) // 2][0] * 1000, all_reduces_per_step=comm[0][1],
                   comm_bytes_per_step=comm[0][2], comm_share=comm[len(comm) // 2][0] * 1000 / out["median_step_ms"])
    return out
