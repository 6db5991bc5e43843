"""Where the mixed workload's time goes in the engine: every step of one run timed and sorted by kind.

    PYTHONPATH=. python benchmarks/mixed_profile.py [--threads 2] [--out benchmarks/results/mixed_profile.json]

The workload is the speed issue's mixed one (`python -m minimal_engine.bench ... --input-len 512 --range-ratio 0.125
--output-len 256 --output-range-ratio 0.0625 --num-prompts 64 --max-concurrency 32 --seed 0`, 125M shape, bf16).
Each engine step is timed, with its model forward, and put in one of two kinds:
  * decode-only steps: rows = requests decoding; the gathered decode attention pads each request's context to
    its group's longest (decode_groups.GatheredDecode; before 2026-12-05, to the step's longest), so the script
    also sums real and padded context tokens;
  * steps with prefill: prefill tokens (chunked at max_num_batched_tokens) plus any decode rows riding along.
Then one decode-only step at the run's median batch and context is profiled (`bench.profile`), to split it into
linear layers, attention, KV copies and the rest. transformers' static batches for the same requests are counted
(padded prompt tokens and decode rows), not run: `--compare hf` in the bench measures them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from minimal_engine import LLM
from minimal_engine.bench.offline import run_offline
from minimal_engine.bench.profile import format_profile, profile_decode_steps
from minimal_engine.bench.workload import random_requests


class StepLog:
    """`with StepLog(model) as log:` records each forward's rows, prefill tokens, context tokens and time
    (log.rows); on exit the model's own forward is back."""

    def __init__(self, model):
        self.model, self.rows = model, []

    def __enter__(self):
        forward = self.model.forward

        def timed(input_ids, batch, kv_caches):
            t = time.perf_counter()
            out = forward(input_ids, batch, kv_caches)
            d = batch.num_decodes
            real = padded = 0
            for g in getattr(batch.decode, "groups", []):       # GatheredDecode (decode_groups.py)
                if g.padding is not None:                        # [n, 1, 1, W * block_size], True = padding
                    padded += g.padding.numel()
                    real += g.padding.numel() - int(g.padding.sum())
                else:                                            # a lone request: exactly its context
                    real += g.context_len
                    padded += g.context_len
            self.rows.append({"decodes": d, "prefill_tokens": int(input_ids.numel()) - d, "context_real": real,
                              "context_padded": padded, "forward_s": time.perf_counter() - t})
            return out
        self.model.forward = timed
        return self

    def __exit__(self, *exc):
        del self.model.forward                                   # the class's forward again


def summarize(rows: list[dict]) -> dict:
    dec = [r for r in rows if r["prefill_tokens"] == 0]
    pre = [r for r in rows if r["prefill_tokens"] > 0]
    real = sum(r["context_real"] for r in dec)
    return {
        "steps": len(rows), "forward_s": sum(r["forward_s"] for r in rows),
        "decode_only": {"steps": len(dec), "seconds": sum(r["forward_s"] for r in dec),
                        "median_rows": statistics.median(r["decodes"] for r in dec) if dec else 0,
                        "median_ms": statistics.median(r["forward_s"] for r in dec) * 1000 if dec else 0,
                        "rows": sum(r["decodes"] for r in dec),
                        "padded_over_real_context": sum(r["context_padded"] for r in dec) / real if real else 0,
                        "median_context": statistics.median(r["context_real"] / r["decodes"] for r in dec) if dec else 0},
        "with_prefill": {"steps": len(pre), "seconds": sum(r["forward_s"] for r in pre),
                         "prefill_tokens": sum(r["prefill_tokens"] for r in pre),
                         "decode_rows": sum(r["decodes"] for r in pre)},
    }


def static_batches(reqs, size: int) -> dict:
    """What transformers' static batches of `size` compute for the same requests: each batch pads its prompts to
    the longest and runs until its longest output."""
    prompt = decode = 0
    for i in range(0, len(reqs), size):
        b = reqs[i:i + size]
        prompt += len(b) * max(len(r.prompt_ids) for r in b)
        decode += len(b) * max(r.output_len for r in b)
    return {"prompt_tokens": prompt, "decode_rows": decode,
            "useful_prompt_tokens": sum(len(r.prompt_ids) for r in reqs), "useful_output_tokens": sum(r.output_len for r in reqs)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="synthetic:llama-125m")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the summary and the profile as JSON here")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    llm = LLM(a.model, dtype=a.dtype, max_num_seqs=64, seed=0)
    reqs = random_requests(64, 512, 256, llm.model_config.vocab_size, 0.125, 0.0625, seed=0)
    run_offline(llm, reqs[:2], 2, use_tqdm=False)                       # warm-up
    with StepLog(llm.model) as log:
        t = time.perf_counter()
        res = run_offline(llm, reqs, 32, use_tqdm=False, warmup=False)
        wall = time.perf_counter() - t
    s = summarize(log.rows)
    s.update(wall_s=wall, output_tok_s=res["output_throughput"], static_batches_of_32=static_batches(reqs, 32))
    d = s["decode_only"]
    print(f"run: {wall:.1f} s wall, {res['output_throughput']:.0f} output tok/s; forward {s['forward_s']:.1f} s "
          f"(engine outside the forward {wall - s['forward_s']:.1f} s)")
    print(f"decode-only steps: {d['steps']} taking {d['seconds']:.1f} s; median {d['median_rows']} rows, "
          f"{d['median_ms']:.1f} ms, context {d['median_context']:.0f}; padded / real context "
          f"{d['padded_over_real_context']:.2f}")
    w = s["with_prefill"]
    print(f"steps with prefill: {w['steps']} taking {w['seconds']:.1f} s; {w['prefill_tokens']} prefill tokens "
          f"({w['seconds'] / max(1, w['prefill_tokens']) * 1000:.2f} ms per token incl. {w['decode_rows']} decode rows)")
    print("transformers' static batches of 32 (counted):", s["static_batches_of_32"])
    prof = profile_decode_steps(llm, int(d["median_rows"]), int(d["median_context"]))
    print(format_profile(prof))
    if a.out:
        Path(a.out).write_text(json.dumps({"argv": vars(a), "summary": s, "profile": prof,
                                           "kernels": llm.engine.runner.describe_kernels()}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
