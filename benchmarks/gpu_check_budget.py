"""How long `make gpu-check`'s GPU sections should take on a lent GPU: roofline bounds and step counts.

    PYTHONPATH=. python3 benchmarks/gpu_check_budget.py [--gpu H200] [--overhead-ms 6]

For each piece of work gpu_check.py does, the FLOPs and bytes of every step (minimal_engine.bench.roofline.step_cost,
the datasheet GPU of minimal_engine.calculators.datasheets) give a lower bound, and the number of steps times a per-step
overhead (Python, kernel launches; an assumption, not a measurement: no GPU has run this project yet) gives the
part the roofline does not see. gpu_check.py stores this estimate in its JSON beside the wall time it measured,
so a GPU run shows how far the estimate was off. The request lengths are those gpu_check.py draws (same seeds).
"""
from __future__ import annotations

import argparse
import sys

from minimal_engine.bench import random_requests
from minimal_engine.bench.roofline import gpu_machine, step_cost
from minimal_engine.model.synthetic import synthetic_config

SHAPES = ("llama-3.2-1b", "qwen3-0.6b")
DECODE_BATCHES = (1, 32, 128, 256)        # gpu_check.check_speed, graphs on and off up to 32
STEP_PROMPT, STEP_STEPS = 128, 10 + 16    # decode_step_time: prompt 128, max_tokens num_steps + 16


def work_bound(cfg, machine, decode_batches: list[list[int]], prefills: list[int]) -> float:
    """Seconds: each decode step's bound (contexts of its rows) + each prompt's prefill bound."""
    t = sum(step_cost(cfg, 2, ctx, machine=machine)["t_bound"] for ctx in decode_batches if ctx)
    return t + sum(step_cost(cfg, 2, prefill_lens=[n], machine=machine)["t_bound"] for n in prefills)


def continuous(reqs) -> tuple[list[list[int]], list[int]]:
    """All requests at once (the engine, generate_batch): step t decodes every request still generating."""
    longest = max(r.output_len for r in reqs)
    steps = [[r.input_len + t for r in reqs if r.output_len > t] for t in range(1, longest)]
    return steps, [r.input_len for r in reqs]


def static(reqs, batch: int) -> tuple[list[list[int]], list[int]]:
    """generate in static batches: every row is padded to the batch's longest prompt and runs its longest output."""
    steps, prefills = [], []
    for i in range(0, len(reqs), batch):
        group = reqs[i:i + batch]
        pad, longest = max(r.input_len for r in group), max(r.output_len for r in group)
        steps += [[pad + t] * len(group) for t in range(1, longest)]
        prefills += [pad] * len(group)
    return steps, prefills


def section_estimates(gpu: str = "H200", overhead_ms: float = 6.0) -> dict:
    machine = gpu_machine(gpu)
    out = {"gpu": gpu, "overhead_ms_per_step (assumed)": overhead_ms, "sections": {}}

    def add(name, cfg, steps, prefills):
        bound = work_bound(cfg, machine, steps, prefills)
        n = len(steps) + len(prefills)
        out["sections"][name] = {"steps": n, "roofline_s": bound, "estimate_s": bound + n * overhead_ms / 1000}

    for shape in SHAPES:
        cfg = synthetic_config(shape)
        one = random_requests(3, 128, 128, cfg.vocab_size, seed=0)
        steps = [[r.input_len + t] for r in one for t in range(1, r.output_len)]
        add(f"batch-1 TPOT {shape} (engine + transformers)", cfg, steps * 2, [r.input_len for r in one] * 2)
        runs = [b for b in DECODE_BATCHES for _ in ((0, 1) if b <= 32 else (0,))]
        add(f"decode steps {shape}", cfg, [[STEP_PROMPT + t] * b for b in runs for t in range(STEP_STEPS)],
            [STEP_PROMPT] * sum(runs))
    cfg = synthetic_config("qwen3-0.6b")
    reqs = random_requests(256, 1024, 1024, cfg.vocab_size, 100 / 1024, 100 / 1024, seed=0)
    add("nano-vllm workload: engine", cfg, *continuous(reqs))
    add("nano-vllm workload: generate, static batches of 64", cfg, *static(reqs, 64))
    add("nano-vllm workload: generate_batch", cfg, *continuous(reqs))
    out["total_estimate_s"] = sum(s["estimate_s"] for s in out["sections"].values())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--overhead-ms", type=float, default=6.0, help="assumed per-step overhead")
    args = ap.parse_args(argv)
    est = section_estimates(args.gpu, args.overhead_ms)
    print(f"{args.gpu}, assumed overhead {args.overhead_ms} ms per step (forward or prefill)")
    for name, s in est["sections"].items():
        print(f"  {name:55s} {s['steps']:6d} steps  roofline {s['roofline_s']:7.2f} s  estimate {s['estimate_s']:7.1f} s")
    print(f"total estimate {est['total_estimate_s']:.0f} s (model building and the correctness section come on top)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
