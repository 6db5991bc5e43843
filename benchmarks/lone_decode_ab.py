"""Batch-1 decode on the CPU: a lone request's attention as one SDPA call over exactly its context, against the
masked batched path (two bmm, mask, softmax), at several context lengths, in one process.

    python benchmarks/lone_decode_ab.py --model synthetic:llama-125m --dtype bfloat16 --context 128 512 1024 2000

Two engines on the same weights: one always takes SDPA for a lone decode request, the other never does (the
engine itself chooses by `decode_groups.lone_decode_sdpa`). Each round times 20 pure decode steps of one request
whose prompt is the context length, both engines one after the other; prints the median step times and the
median of the per-round ratios (below 1: SDPA is faster).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

import torch

from minimal_engine import LLM
from minimal_engine.model import decode_groups

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch1_breakdown import step_ms  # noqa: E402


def engines(model, dtype: str) -> dict:
    """Two engines on the same weights; `forced(name)` makes the next steps take that engine's path."""
    return {name: LLM(None if model == "default" else model, dtype=dtype, device="cpu")
            for name in ("sdpa", "masked")}


@contextlib.contextmanager
def forced(name: str):
    """Within: a lone decode request attends with SDPA ("sdpa") or with the masked batched path ("masked"),
    whatever decode_groups.lone_decode_sdpa would choose."""
    rule = decode_groups.lone_decode_sdpa
    decode_groups.lone_decode_sdpa = lambda gqa, context: name == "sdpa"
    try:
        yield
    finally:
        decode_groups.lone_decode_sdpa = rule


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="synthetic:llama-125m", help="synthetic:NAME, a folder, or 'default'")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--context", type=int, nargs="+", default=[128, 512, 1024])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    e = engines(args.model, args.dtype)
    cfg = e["sdpa"].model_config
    print(f"{args.model} ({args.dtype}): {cfg.num_heads} query heads, {cfg.num_kv_heads} KV heads, "
          f"head dim {cfg.head_dim}")
    for ctx in args.context:
        t = {k: [] for k in e}
        for _ in range(args.rounds):
            for k, llm in e.items():
                with forced(k):
                    t[k].append(step_ms(llm, args.steps, prompt_len=ctx))
        ratios = [a / b for a, b in zip(t["sdpa"], t["masked"])]
        print(f"  context {ctx:5d}: SDPA {statistics.median(t['sdpa']):7.2f} ms, masked {statistics.median(t['masked']):7.2f} "
              f"ms, ratio {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
