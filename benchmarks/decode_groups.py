"""A/B in one process: decode attention in one padded group vs in groups of similar context length.

    python benchmarks/decode_groups.py [--threads 2] [--repeats 2] [--out benchmarks/results]

Same engine, same weights (synthetic ~125M Llama shape, bfloat16, CPU), same requests; only
`model_runner.GROUP_COST_TOKENS` changes: a huge value puts every decode in one group padded to the longest
context (the engine before grouping), the default splits them (see `model_runner.group_by_length`).
Two measurements, alternating A and B on each repeat (the machine is shared and noisy):
  * pure decode steps of 32 requests whose prompts are uniform in 64..768 tokens (median step time);
  * the mixed workload of benchmarks/README.md (a): 64 requests, input 64-512, output 16-256, concurrency 32.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from minimal_engine import LLM, model_runner
from minimal_engine.bench.offline import decode_step_time, run_offline
from minimal_engine.bench.workload import random_requests

ONE_GROUP = 10 ** 9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="llama-125m"); ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2); ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    llm = LLM(f"synthetic:{a.shape}", dtype="bfloat16", device="cpu", max_num_seqs=32)
    reqs = random_requests(64, 512, 256, llm.model_config.vocab_size, range_ratio=0.125,
                           output_range_ratio=0.0625, seed=0)
    default = model_runner.GROUP_COST_TOKENS
    res = {"one_group": {"step_ms": [], "output_tok_s": [], "median_tpot_ms": []},
           "grouped": {"step_ms": [], "output_tok_s": [], "median_tpot_ms": []}}
    for r in range(a.repeats):
        for name, cost in (("one_group", ONE_GROUP), ("grouped", default)):
            model_runner.GROUP_COST_TOKENS = cost
            d = decode_step_time(llm, 32, 768, num_steps=10, seed=r, range_ratio=64 / 768)
            m = run_offline(llm, reqs, 32, use_tqdm=False)
            res[name]["step_ms"].append(d["median_step_ms"])
            res[name]["output_tok_s"].append(m["output_throughput"])
            res[name]["median_tpot_ms"].append(m["median_tpot_ms"])
            print(f"repeat {r} {name:9s}: decode step (32 requests, context ~{d['mean_context']}) "
                  f"{d['median_step_ms']:.1f} ms; mixed C=32 {m['output_throughput']:.1f} out tok/s, "
                  f"median TPOT {m['median_tpot_ms']:.1f} ms", flush=True)
    model_runner.GROUP_COST_TOKENS = default
    med = {k: {f: statistics.median(v) for f, v in d.items()} for k, d in res.items()}
    ratios = {f: med["grouped"][f] / med["one_group"][f] for f in med["grouped"]}
    print("medians:", json.dumps(med, indent=1))
    print("grouped / one group:", {k: round(v, 3) for k, v in ratios.items()})
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "decode_groups.json").write_text(json.dumps(
            dict(runs=res, medians=med, ratios=ratios, threads=a.threads, shape=a.shape,
                 torch=torch.__version__), indent=1))


if __name__ == "__main__":
    main()
