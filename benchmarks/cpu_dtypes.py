"""bfloat16 against float32 on this CPU, in one process: batch-1 TPOT and prefill tok/s, with the Linear kernels
each dtype took (minimal_engine/model/cpu_linears.py) and the CPU's capability.

    python benchmarks/cpu_dtypes.py [--model synthetic:llama-125m] [--rounds 5] [--threads 2]

On a CPU without native bf16 arithmetic (no AVX-512-BF16 or AMX on x86, no BF16 on ARM) bf16 matrix products are
converted to float32 inside the kernel, and oneDNN's pre-packed bf16 kernel does not run at all on AVX2-only x86:
bf16 may then lose to float32. To see an AVX2 machine's kernels on an AVX-512 one, cap both libraries:
`ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/cpu_dtypes.py` (same memory, AVX2 code paths).
Rounds alternate the dtypes; each round: the median TPOT of one request (128-token prompt, 64 new tokens) and
the tok/s of one 400-token prefill (prompt tokens / TTFT). Prints medians and min-max of the rounds, and ratios.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import random_requests, run_offline


def cpu_flags() -> str:
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith(("flags", "Features"))).split(":")[1].split()
    except (OSError, StopIteration):
        return "unknown"
    keep = ("avx2", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16", "asimd", "sve")
    return " ".join(f for f in keep if f in flags) or "none of " + ",".join(keep)


def measure(llm, rounds_seed: int, prefill_len: int) -> tuple[float, float]:
    vocab = llm.model_config.vocab_size
    one = random_requests(1, 128, 64, vocab, seed=rounds_seed)
    tpot = run_offline(llm, one, 1, use_tqdm=False)["median_tpot_ms"]
    long = random_requests(1, prefill_len, 1, vocab, seed=rounds_seed)[0].prompt_ids
    out = llm.generate([long], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)[0]
    return tpot, prefill_len / out.metrics.ttft


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the course's default model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prefill-len", type=int, default=400)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    kw = {"model": args.model} if args.model else {}
    engines = {d: LLM(**kw, dtype=d, device="cpu") for d in ("bfloat16", "float32")}
    caps = {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ}
    print(f"model {engines['float32'].model_name}, {args.threads} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, flags: {cpu_flags()}" + (f", capped by {caps}" if caps else ""))
    for d, llm in engines.items():
        print(f"  {d}: {llm.engine.runner.describe_kernels()}")
        measure(llm, 99, 32)                                   # warm-up
    got = {d: {"tpot": [], "prefill": []} for d in engines}
    for r in range(args.rounds):
        for d, llm in engines.items():
            tpot, tok_s = measure(llm, r, args.prefill_len)
            got[d]["tpot"].append(tpot)
            got[d]["prefill"].append(tok_s)
    for d, g in got.items():
        print(f"{d}: batch-1 TPOT median {statistics.median(g['tpot']):.2f} ms ({min(g['tpot']):.2f}-"
              f"{max(g['tpot']):.2f}); prefill {args.prefill_len} tokens median {statistics.median(g['prefill']):.0f} "
              f"tok/s ({min(g['prefill']):.0f}-{max(g['prefill']):.0f})")
    tr = [a / b for a, b in zip(got["bfloat16"]["tpot"], got["float32"]["tpot"])]
    pr = [a / b for a, b in zip(got["bfloat16"]["prefill"], got["float32"]["prefill"])]
    print(f"bf16 / fp32: TPOT {statistics.median(tr):.2f} ({min(tr):.2f}-{max(tr):.2f}; below 1: bf16 faster), "
          f"prefill tok/s {statistics.median(pr):.2f} ({min(pr):.2f}-{max(pr):.2f}; above 1: bf16 faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
