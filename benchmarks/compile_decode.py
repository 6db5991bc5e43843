"""Issue 30's compiled decode step, tried: `torch.compile` of the model's decode forward on the static-buffer path
(`cuda_graphs=True` on the CPU runs the same padded buffers without capturing), against the same path eager.

    MINIMAL_ENGINE_CPU_KERNELS=plain PYTHONPATH=. python benchmarks/compile_decode.py --model default

With the engine's pre-packed oneDNN linears (the default fast path) inductor (torch 2.13) fails to lower
`mkldnn._linear_pointwise` on its opaque packed weight, so the script is meant for the plain kernels. It prints the
compile time per batch size and the step times, eager and compiled, for three alternating rounds.
"""
from __future__ import annotations

import argparse
import time

import torch

from minimal_engine import LLM
from minimal_engine.bench.offline import decode_step_time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="default", help="'default' or any LLM model (synthetic:NAME, a folder)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = None if a.model == "default" else a.model
    kw = dict(max_num_seqs=32, kv_cache_memory=256 << 20, dtype=a.dtype, cuda_graphs=True)
    eager, compiled = LLM(model, **kw), LLM(model, **kw)
    graphs = compiled.engine.runner.graphs
    graphs.model = torch.compile(graphs.model, dynamic=False)
    for b in (1, 32):
        t = time.perf_counter()
        decode_step_time(compiled, b, 64, num_steps=2)
        print(f"compile and warm-up, batch {b}: {time.perf_counter() - t:.1f} s", flush=True)
    for r in range(3):
        for b in (1, 32):
            e = decode_step_time(eager, b, 64, num_steps=15)["median_step_ms"]
            c = decode_step_time(compiled, b, 64, num_steps=15)["median_step_ms"]
            print(f"round {r} batch {b}: eager {e:.2f} ms, compiled {c:.2f} ms ({c / e:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
