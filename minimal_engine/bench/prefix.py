"""Shared-system-prompt benchmark: TTFT with prefix caching off and on, on the same requests.

Every request is one system prompt of `shared_len` random tokens followed by its own random part (vLLM's
benchmark has the same idea as `--prefix-len` of its random dataset). Two engines on the same weights, one
with `enable_prefix_caching=True`, take turns (off, on, off, on, ...); each run is `run_offline` at a fixed
concurrency, the caching engine's cache emptied first (so each repeat starts cold and only the shared prefix,
not a replayed prompt, can hit). The result is the ratio median TTFT off / median TTFT on per repeat, and its median over repeats.

    python -m minimal_engine.bench --model synthetic:llama-125m --shared-prefix-len 256 --input-len 32 \\
        --output-len 8 --num-prompts 16 --max-concurrency 4 --repeats 3
"""
from __future__ import annotations

import random
import statistics

from minimal_engine.bench.offline import run_offline
from minimal_engine.bench.workload import BenchRequest, random_requests


def shared_prefix_requests(num: int, shared_len: int, input_len: int, output_len: int, vocab_size: int,
                           range_ratio: float = 1.0, seed: int = 0) -> list[BenchRequest]:
    """num requests: the same `shared_len` random tokens, then each its own random part (random_requests)."""
    prefix = [random.Random(seed + 1).randrange(vocab_size) for _ in range(shared_len)]
    tails = random_requests(num, input_len, output_len, vocab_size, range_ratio, seed=seed)
    return [BenchRequest(prefix + r.prompt_ids, r.output_len) for r in tails]


def run_prefix_compare(llm_off, llm_on, requests: list[BenchRequest], max_concurrency: int, repeats: int = 1,
                       use_tqdm: bool = False) -> dict:
    """Alternate the two engines `repeats` times; return their runs and the TTFT ratios (off / on)."""
    runs, per_repeat = [], []
    for rep in range(repeats):
        off = run_offline(llm_off, requests, max_concurrency, use_tqdm=use_tqdm)
        bm = llm_on.engine.block_manager
        bm.reset_prefix_cache()                 # every repeat starts cold: the first requests compute the prefix
        q0, h0 = bm.cache.queries, bm.cache.hits
        on = run_offline(llm_on, requests, max_concurrency, use_tqdm=use_tqdm)
        on["prefix_cache_hit_rate"] = (bm.cache.hits - h0) / max(1, bm.cache.queries - q0)
        off["backend"], on["backend"] = "prefix_caching_off", "prefix_caching_on"
        for r in (off, on):
            r["repeat"] = rep
        runs += [off, on]
        per_repeat.append(off["median_ttft_ms"] / on["median_ttft_ms"])
    return {"runs": runs, "ttft_ratios": per_repeat, "median_ttft_ratio": statistics.median(per_repeat)}


def run_prefix_bench(args) -> tuple[list, dict]:
    """The CLI's --shared-prefix-len: build both engines, run, print the ratio."""
    from minimal_engine.llm import LLM
    kw = dict(dtype=args.dtype, device=args.device, max_num_seqs=max(64, *args.max_concurrency), seed=args.seed)
    llm_off, llm_on = LLM(args.model, **kw), LLM(args.model, enable_prefix_caching=True, **kw)
    rows, extra = [], {"model": llm_off.model_name, "shared_prefix_len": args.shared_prefix_len, "prefix": []}
    for c in args.max_concurrency:
        reqs = shared_prefix_requests(args.num_prompts or 10 * c, args.shared_prefix_len, args.input_len,
                                      args.output_len, llm_off.model_config.vocab_size, args.range_ratio, args.seed)
        res = run_prefix_compare(llm_off, llm_on, reqs, c, args.repeats, use_tqdm=not args.no_tqdm)
        rows += res["runs"]
        hit = statistics.median(r["prefix_cache_hit_rate"] for r in res["runs"] if "prefix_cache_hit_rate" in r)
        extra["prefix"].append({"max_concurrency": c, "ttft_ratios": res["ttft_ratios"],
                                "median_ttft_ratio": res["median_ttft_ratio"], "hit_rate": hit})
        print(f"shared prefix {args.shared_prefix_len} tokens, C={c}: median TTFT off / on = "
              f"{res['median_ttft_ratio']:.2f}x over {args.repeats} repeat(s) "
              f"({', '.join(f'{x:.2f}' for x in res['ttft_ratios'])}); prefix cache hit rate {hit:.0%}")
    return rows, extra
