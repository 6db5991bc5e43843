"""Batch-1 decode on the CPU (bf16): the engine's one-row path (ATen's matrix-vector kernel, model_runner.matvec)
against oneDNN's pre-packed matmul for every row count (the engine's path before), in one process.

    python benchmarks/matvec_ab.py --model synthetic:llama-125m --rounds 5

Two engines on the same weights; the second one's Linear layers are switched to the pre-packed oneDNN kernel for
one row too. Rounds alternate the two; each round is the median TPOT of one request (128-token prompt, 64 new
tokens). Prints the per-round ratios and their median (below 1: the matrix-vector path is faster).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

from minimal_engine import LLM
from minimal_engine.bench import random_requests, run_offline


def use_packed_for_one_row(llm) -> int:
    """Point every Linear of the engine at oneDNN's pre-packed kernel, one row included; returns how many."""
    n = 0
    for m in llm.engine.runner.model.modules():
        if isinstance(m, torch.nn.Linear):
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
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    kw = {"model": args.model} if args.model else {}
    engines = {"matvec": LLM(**kw, dtype="bfloat16", device="cpu"), "packed": LLM(**kw, dtype="bfloat16", device="cpu")}
    print(f"{use_packed_for_one_row(engines['packed'])} linear layers switched to the pre-packed kernel")
    vocab = engines["matvec"].model_config.vocab_size
    tpot = {k: [] for k in engines}
    for r in range(args.rounds):
        for k, llm in engines.items():
            one = random_requests(1, 128, 64, vocab, seed=r)
            tpot[k].append(run_offline(llm, one, 1, use_tqdm=False)["median_tpot_ms"])
        print(f"round {r + 1}: matvec {tpot['matvec'][-1]:.2f} ms, pre-packed {tpot['packed'][-1]:.2f} ms, "
              f"ratio {tpot['matvec'][-1] / tpot['packed'][-1]:.2f}")
    ratios = [a / b for a, b in zip(tpot["matvec"], tpot["packed"])]
    print(f"median TPOT: matvec {statistics.median(tpot['matvec']):.2f} ms, pre-packed "
          f"{statistics.median(tpot['packed']):.2f} ms; median ratio {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
