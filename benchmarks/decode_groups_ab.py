"""Decode steps with the CPU's grouped gather against the old padded one (every request padded to the step's
longest context), in one process, alternating rounds.

    PYTHONPATH=. python benchmarks/decode_groups_ab.py --threads 2 --rounds 5 [--out benchmarks/results/x.json]

`decode_groups.GROUP_PADDING_SLACK` decides the groups (decode_groups.gathered_decode); an infinite slack puts every
request in one group padded to the longest, which is exactly the engine before 2026-12-05. For each case the
engine holds the requests of the case, all decoding (prompts prefilled first), and times pure decode steps:
  long + short   chapter 1's lab: four requests with 64-token prompts, with and without one 448-token request
  batch 1        one request, context 200
  batch 32       32 requests of equal context 300 (nothing to save: the two must be equal)
  mixed 32       32 requests with contexts spread from 40 to 440 (the default model holds 512)
Prints median step milliseconds per setting and the median (min-max) of per-round ratios new / old.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.model import decode_groups

CASES = {
    "4 short (64)": [64] * 4,
    "4 short (64) + 1 long (448)": [64] * 4 + [448],
    "batch 1 (200)": [200],
    "batch 32 (300 each)": [300] * 32,
    "mixed 32 (40-440)": [round(40 + i * 400 / 31) for i in range(32)],
}
SETTINGS = {"old (one padded group)": math.inf, "new (groups)": decode_groups.GROUP_PADDING_SLACK}


def decode_step_ms(llm, prompt_lens: list[int], steps: int, slack: float) -> float:
    """Median wall time of `steps` pure decode steps with these requests all decoding."""
    engine, vocab = llm.engine, llm.model_config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = [engine.add_request(torch.randint(5, vocab, (n,), generator=g).tolist(),
                              SamplingParams(temperature=0, max_tokens=steps + 8, ignore_eos=True))
           for n in prompt_lens]
    saved = decode_groups.GROUP_PADDING_SLACK
    try:
        while any(s.num_computed_tokens < s.num_prompt_tokens for s in engine.scheduler.running) or \
                engine.scheduler.waiting:          # prefill everything first
            engine.step()
        engine.step()
        decode_groups.GROUP_PADDING_SLACK = slack
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t)
    finally:
        decode_groups.GROUP_PADDING_SLACK = saved
        for rid in ids:
            engine.abort_request(rid)
    return statistics.median(times) * 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["default", "synthetic:llama-125m"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    print(f"{cpu}, torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), {args.threads} threads, "
          f"load {os.getloadavg()[0]:.1f}")
    results = {"cpu": cpu, "threads": args.threads, "load_before": os.getloadavg(), "cases": []}
    for model in args.model:
        dtype = "float32" if model == "default" else "bfloat16"
        llm = LLM(None if model == "default" else model, dtype=dtype, device="cpu", max_num_seqs=64)
        print(f"{model} ({dtype}):")
        for case, lens in CASES.items():
            t = {name: [] for name in SETTINGS}
            for r in range(args.rounds):
                names = list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]   # alternate which goes first
                for name in names:
                    t[name].append(decode_step_ms(llm, lens, args.steps, SETTINGS[name]))
            old, new = t["old (one padded group)"], t["new (groups)"]
            ratios = [b / a for a, b in zip(old, new)]
            row = {"model": model, "dtype": dtype, "case": case, "old_ms": old, "new_ms": new,
                   "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
            results["cases"].append(row)
            print(f"  {case:30s} old {statistics.median(old):7.2f} ms  new {statistics.median(new):7.2f} ms  "
                  f"new/old {row['ratio_median']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})")
    results["load_after"] = os.getloadavg()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
