"""Batch-1 decode on the CPU: the engine's Linear kernels (minimal_engine.cpu_linears, probed on this CPU)
against a baseline, in one process.

    python benchmarks/matvec_ab.py --model synthetic:llama-125m --rounds 5 [--dtype float32] [--against plain]

Two engines on the same weights; the second one's Linear layers take the baseline's kernels:
  * --against earlier (default): the paths the engine took before the one-row changes. bfloat16: oneDNN's
    pre-packed kernel for one row too (the engine takes ATen's matrix-vector kernel there); float32: plain
    nn.Linear, MKL (the engine takes oneDNN's pre-packed weights for every row count). Needs oneDNN's
    pre-packing to run on this CPU in bf16 (AVX-512 or AVX-NE-CONVERT): refused with that reason elsewhere;
  * --against plain: plain F.linear everywhere, what a CPU where every probe fails runs (the fallback's cost).
Rounds alternate the two; each round measures the median TPOT of one request (128-token prompt, 64 new tokens),
and with `--more-rows` also the TTFT of one 400-token prompt and the output tok/s of 16 requests (64 in, 32 out)
(more rows per step: the paths for prefill and batches). Prints the kernels each engine took, the per-round TPOT
ratios and the medians (TPOT and TTFT ratios below 1, tok/s ratio above 1: the engine's path is faster).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import random_requests, run_offline
from minimal_engine.model.cpu_linears import (PLAIN, PREPACKED, CpuKernels, cpu_kernels, probe,
                                              use_cpu_linears)


def baseline_kernels(dtype: torch.dtype, against: str) -> CpuKernels:
    if against == "plain":
        return CpuKernels(dtype)
    if dtype == torch.float32:
        return CpuKernels(dtype, PLAIN, PLAIN)
    why = probe(PREPACKED, dtype)
    if why:
        raise SystemExit(f"--against earlier needs oneDNN's pre-packed bf16 kernel, which does not run here ({why}); "
                         f"use --against plain or --dtype float32")
    return CpuKernels(dtype, PREPACKED, PREPACKED)


def use_baseline(llm, against: str = "earlier") -> int:
    """Point every Linear of the engine at the baseline's kernels (see the docstring); returns how many."""
    model = llm.model
    kernels = use_cpu_linears(model, baseline_kernels(llm.dtype, against))
    return 0 if kernels is None else sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the course's default model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--more-rows", action="store_true", help="also a 400-token prefill and 16 requests at once")
    ap.add_argument("--against", default="earlier", choices=["earlier", "plain"], help="the baseline (see above)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    kw = {"model": args.model} if args.model else {}
    engines = {"now": LLM(**kw, dtype=args.dtype, device="cpu"), "before": LLM(**kw, dtype=args.dtype, device="cpu")}
    print(f"{use_baseline(engines['before'], args.against)} linear layers switched to the baseline ({args.against})")
    for k, llm in engines.items():
        print(f"  {k}: {llm.model.layers[0].mlp.down_proj.extra_repr()}")
    print(f"  engine's choice on this CPU: {cpu_kernels(engines['now'].model).describe()}")
    vocab = engines["now"].model_config.vocab_size
    tpot, ttft, tok_s = ({k: [] for k in engines} for _ in range(3))
    for r in range(args.rounds):
        for k, llm in engines.items():
            one = random_requests(1, 128, 64, vocab, seed=r)
            tpot[k].append(run_offline(llm, one, 1, use_tqdm=False)["median_tpot_ms"])
            if args.more_rows:
                long = random_requests(1, 400, 1, vocab, seed=r)[0].prompt_ids
                out = llm.generate([long], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)[0]
                ttft[k].append(out.metrics.ttft * 1000)
                many = random_requests(16, 64, 32, vocab, seed=r)
                tok_s[k].append(run_offline(llm, many, 16, use_tqdm=False)["output_throughput"])
        print(f"round {r + 1}: now {tpot['now'][-1]:.2f} ms, before {tpot['before'][-1]:.2f} ms, "
              f"ratio {tpot['now'][-1] / tpot['before'][-1]:.2f}")
    for name, d in (("TPOT ms", tpot), ("TTFT 400 tokens ms", ttft), ("16 requests tok/s", tok_s)):
        if d["now"]:
            ratios = [a / b for a, b in zip(d["now"], d["before"])]
            print(f"median {name} ({args.dtype}): now {statistics.median(d['now']):.2f}, before "
                  f"{statistics.median(d['before']):.2f}; median ratio {statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
