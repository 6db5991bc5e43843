"""Chapter 8's closing figures: speculative decoding against no speculation at k = 1, 2, 3, 4, 8, for the n-gram proposer,
the shipped (distilled) draft model and the earlier undistilled one, at batch 1, on repetitive and on ordinary text
(the default model, greedy).

    PYTHONPATH=. python3 benchmarks/spec_decode_k_sweep.py --out results/spec_decode_k_sweep.json

Each (text, k) is one `course.labs.lab08.run_spec_lab` call: the four engines (none, ngram, draft_model,
draft_model_lm) run the same
prompts (64 tokens) to 64 output tokens, alternating, `--repeats` times; tok/s and TPOT are medians, the speedup is
tok/s over the no-speculation engine's in the same call; acceptance per draft position as vLLM reports it. Also each
draft model's step cost c (lab8.measure_draft_cost) and the machine (CPU model, flags, torch threads).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.llamacpp_bench import machine_info
from course.labs import lab08 as lab8


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    rows, t0 = [], time.time()
    print(f"{'text':10s} {'k':>2s} {'method':12s} {'tok/s':>7s} {'TPOT ms':>8s} {'speedup':>8s} {'TPOT ratio':>10s} "
          f"{'accept':>7s} {'len/step':>8s} same")
    for text in ("repetitive", "ordinary"):
        for k in (1, 2, 3, 4, 8):
            r = lab8.run_spec_lab(prompt_len=a.prompt_len, k=k, concurrency=1, output_len=a.output_len, text=text,
                                  repeats=a.repeats, methods=tuple(lab8.METHODS))
            for m, x in r["methods"].items():
                row = {"text": text, "k": k, "method": m, "same_tokens": r["same_tokens"], "load": r["load"],
                       **{f: x[f] for f in ("tok_s", "tok_s_min", "tok_s_max", "tpot_ms", "speedup", "tpot_ratio",
                                            "acceptance_rate", "acceptance_by_position", "mean_accepted_length",
                                            "proposed", "accepted")}}
                rows.append(row)
                print(f"{text:10s} {k:2d} {m:12s} {x['tok_s']:7.1f} {x['tpot_ms']:8.2f} {x['speedup']:8.2f} "
                      f"{x['tpot_ratio']:10.2f} {x['acceptance_rate']:7.3f} {x['mean_accepted_length']:8.2f} "
                      f"{r['same_tokens']} {[round(p, 2) for p in x['acceptance_by_position']]}", flush=True)
    cost = {m: lab8.measure_draft_cost(method=m) for m in ("draft_model", "draft_model_lm")}
    for m, c in cost.items():
        print(f"{m}: draft step {c['draft_step_ms']:.2f} ms, target decode step {c['target_step_ms']:.2f} ms, "
              f"c = {c['c']:.2f}, break-even acceptance at k=2: {lab8.break_even_alpha(2, c['c']):.2f}")
    machine = dict(machine_info(), torch_threads=torch.get_num_threads())
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"rows": rows, "draft_cost": cost, "machine": machine,
                                           "seconds": time.time() - t0}, indent=1))
        print("wrote", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
