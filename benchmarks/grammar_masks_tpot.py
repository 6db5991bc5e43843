"""A heavy grammar beside a plain stream (issue 42, attack round 3 H3): the plain stream's TPOT
beside the heavy grammar over its TPOT alone, with the masks filled on the MaskPool's thread while
the model runs (overlap) and, as the control, on the engine's thread inside the step (as before).

    PYTHONPATH=. python benchmarks/grammar_masks_tpot.py [--rounds 5] [--cost 0.7 3]

The heavy grammar's mask is made to cost `--cost` of a plain decode step (measured each round): the
fill sleeps that long with the GIL released, as llguidance does while it computes a mask, so the
figure does not depend on how fast this machine computes a real mask. TPOT: the lower quartile of the
gaps between tokens (a loaded machine only adds to a gap), runs alternating in one process, the ratio
taken per round; prints the median and min-max of the per-round ratios. Beside the heavy request
the plain one runs in batches of two where alone it runs alone, which costs a little by itself. A
mask cheaper than a step is hidden behind the forward pass; a dearer one makes the scheduler leave
the heavy request out of the steps its mask is not ready for (GrammarMatcher.late). A timing,
so a benchmark (run it on a quiet machine), not a unit test: tests/features/test_structured_masks.py checks where
the masks are filled, which no load changes.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time

import llguidance.torch
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.config import DEFAULT_MODEL, ModelConfig
from minimal_engine.features.structured_masks import MaskPool
from minimal_engine.sampling_params import StructuredOutputsParams as Constraint

TOKENS = 24
PLAIN = SamplingParams(temperature=0, max_tokens=TOKENS, ignore_eos=True)
HEAVY = SamplingParams(temperature=0, max_tokens=TOKENS,
                       structured_outputs=Constraint(json={"const": "吾輩は猫である。" * 400}))


def make_llm(overlap: bool, delay: dict) -> LLM:
    def fill(executor, pairs, masks):               # a mask that costs delay["s"], GIL released
        time.sleep(delay["s"])
        llguidance.torch.fill_next_token_bitmask_par(executor, pairs, masks)
    vocab = ModelConfig.from_folder(DEFAULT_MODEL).vocab_size
    return LLM(max_num_seqs=2, num_kv_blocks=32,
               grammar_masks=MaskPool(vocab, overlap=overlap, fill=fill))


def tpot(llm: LLM, beside_heavy: bool, beside_plain: bool = False) -> float:
    """The lower quartile of the plain stream's gaps between tokens: alone, beside HEAVY, or beside
    a second plain request (what running two at a time costs without a grammar)."""
    if beside_heavy or beside_plain:
        other = HEAVY if beside_heavy else PLAIN
        out = llm.generate(["吾輩は", "猫"], [PLAIN, other], use_tqdm=False)[0]
    else:
        out = llm.generate(["吾輩は"], PLAIN, use_tqdm=False)[0]
    t = out.metrics.token_times
    return statistics.quantiles([b - a for a, b in zip(t, t[1:])], n=4)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cost", type=float, nargs="+", default=[0.7, 3.0],
                    help="a heavy mask's cost, in plain steps (each value a run of its own)")
    args = ap.parse_args()
    delay = {"s": 0.0}
    llms = {"overlap": make_llm(True, delay), "serial": make_llm(False, delay)}
    for llm in llms.values():                       # warm-up; the grammar compiles once
        tpot(llm, True)
    print(f"{platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}, "
          f"{args.rounds} rounds per cost")
    for cost in args.cost:
        ratios: dict[str, list[float]] = {name: [] for name in llms}
        pairs: list[float] = []                     # beside a plain request / alone
        for _ in range(args.rounds):
            delay["s"] = 0.0
            alone = {name: tpot(llm, False) for name, llm in llms.items()}
            pairs.append(tpot(llms["overlap"], False, beside_plain=True) / alone["overlap"])
            delay["s"] = cost * min(alone.values())
            for name, llm in llms.items():
                ratios[name].append(tpot(llm, True) / alone[name])
        print(f"heavy mask = {cost} plain step ({1000 * delay['s']:.1f} ms in the last round)")
        print(f"  control  plain TPOT beside a plain request / alone: median "
              f"{statistics.median(pairs):.2f} (min {min(pairs):.2f}, max {max(pairs):.2f})")
        for name, r in ratios.items():
            print(f"  {name:8s} plain TPOT beside heavy / alone: median {statistics.median(r):.2f} "
                  f"(min {min(r):.2f}, max {max(r):.2f})")
    print(f"  threads that filled masks: {sorted({t.name for t in threading.enumerate()})}")


if __name__ == "__main__":
    main()
