"""What each part of a batch-1 decode step costs, by taking it out: the step's median wall time with one part
replaced by a stand-in that does (almost) no work, against the whole step, in one process.

    python benchmarks/batch1_breakdown.py --model synthetic:llama-125m --steps 40

The profiler (`python -m minimal_engine.bench --profile`) adds ~1 us to every operator, which is a third of a
small operator's cost; this measures without it. The stand-ins change the numbers the model computes (the
tokens are meaningless while a part is out) but not the shapes, so every other operator runs as before:
  * linear layers (one row): a preallocated zero output, no weight read;
  * attention: returns q (no KV write, gather or SDPA);
  * RMSNorm: returns its input;
  * RoPE: q and k are not rotated.
The savings overlap and do not add up to the step: taking the linear layers out also leaves the caches warm for
every small operator, so their saving includes part of the others' cost.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import random_requests
from minimal_engine.model import llama


def step_ms(llm, steps: int, prompt_len: int = 128) -> float:
    """Median wall time of `steps` pure decode steps of one request."""
    engine = llm.engine
    prompt = random_requests(1, prompt_len, 1, llm.model_config.vocab_size, seed=0)[0].prompt_ids
    rid = engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=steps + 8, ignore_eos=True))
    try:
        for _ in range(4):                        # the prefill and warm-up decode steps
            engine.step()
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t)
    finally:
        engine.abort_request(rid)
    return statistics.median(times) * 1000


@contextmanager
def without(part: str, model):
    """Replace one part of the model by its stand-in for the duration of the block."""
    undo = []
    if part == "linear layers":
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                zero, full = torch.zeros(1, m.out_features, dtype=m.weight.dtype), m.forward
                m.forward = lambda x, z=zero, f=full: z if x.shape[0] == 1 else f(x)
                undo.append(lambda m=m, f=full: setattr(m, "forward", f))
    elif part == "attention":
        saved = llama.paged_attention
        llama.paged_attention = lambda q, *args: q
        undo.append(lambda: setattr(llama, "paged_attention", saved))
    elif part == "RMSNorm":
        saved = llama.RMSNorm.forward
        llama.RMSNorm.forward = lambda self, x: x
        undo.append(lambda: setattr(llama.RMSNorm, "forward", saved))
    elif part == "RoPE":
        saved = llama.rotate_half
        llama.rotate_half = torch.zeros_like      # qk * cos + 0 * sin: still two multiplies and an add
        undo.append(lambda: setattr(llama, "rotate_half", saved))
    else:
        raise ValueError(f"unknown part {part!r}")
    try:
        yield
    finally:
        for u in undo:
            u()


PARTS = ("linear layers", "attention", "RMSNorm", "RoPE")


def breakdown(llm, steps: int, rounds: int) -> dict:
    """Per part: median over rounds of (whole step - step without the part), and the whole step's median."""
    model = llm.model
    whole, saved = [], {p: [] for p in PARTS}
    for _ in range(rounds):
        w = step_ms(llm, steps)
        whole.append(w)
        for p in PARTS:
            with without(p, model):
                saved[p].append(w - step_ms(llm, steps))
    return {"step_ms": statistics.median(whole), **{p: statistics.median(v) for p, v in saved.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="synthetic:llama-125m", help="synthetic:NAME, a folder, or 'default'")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    llm = LLM(None if args.model == "default" else args.model, dtype=args.dtype, device="cpu")
    b = breakdown(llm, args.steps, args.rounds)
    print(f"batch-1 decode step of {args.model} ({args.dtype}, {args.threads} threads): {b['step_ms']:.2f} ms")
    for p in PARTS:
        print(f"  without {p:14s} {b['step_ms'] - b[p]:6.2f} ms: saves {b[p]:5.2f} ms ({b[p] / b['step_ms']:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
