"""Batch-1 decode on the CPU: the engine's Linear paths (model_runner.fast_cpu_linears) against the paths it
took before, in one process.

    python benchmarks/matvec_ab.py --model synthetic:llama-125m --rounds 5 [--dtype float32]

Two engines on the same weights; the second one's Linear layers are switched back to the earlier path:
  * bfloat16: oneDNN's pre-packed kernel for one row too (the engine now takes ATen's matrix-vector kernel there);
  * float32: plain nn.Linear, MKL (the engine now takes oneDNN's pre-packed weights for every row count).
Rounds alternate the two; each round measures the median TPOT of one request (128-token prompt, 64 new tokens),
and with `--more-rows` also the TTFT of one 400-token prompt and the output tok/s of 16 requests (64 in, 32 out)
(more rows per step: the paths for prefill and batches). Prints the per-round TPOT ratios and the medians
(TPOT and TTFT ratios below 1, tok/s ratio above 1: the engine's path is faster).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import random_requests, run_offline


def use_earlier_path(llm) -> int:
    """Point every Linear of the engine back at the earlier path (see the docstring); returns how many."""
    n = 0
    for m in llm.engine.runner.model.modules():
        if isinstance(m, torch.nn.Linear):
            if m.weight.dtype == torch.float32:
                vars(m).pop("forward", None)                      # nn.Linear.forward again
            else:
                p = torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), 1)
                b = None if m.bias is None else m.bias.detach()
                m.forward = lambda x, p=p, b=b: torch.ops.mkldnn._linear_pointwise(x, p, b, "none", [], "")
            n += 1
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the course's default model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--more-rows", action="store_true", help="also a 400-token prefill and 16 requests at once")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    kw = {"model": args.model} if args.model else {}
    engines = {"now": LLM(**kw, dtype=args.dtype, device="cpu"), "before": LLM(**kw, dtype=args.dtype, device="cpu")}
    print(f"{use_earlier_path(engines['before'])} linear layers switched back to the earlier path")
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
