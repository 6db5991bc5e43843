"""The batch-size hint oneDNN packs a Linear weight for (`minimal_engine/model/cpu_linears.py` PACK_HINT): every
Linear layer of a model shape at 1, 3 and 32 rows for each hint (the matrix products alone), then the engine's
decode step with the float32 hint at 1 and at 16, alternating in one process.

    PYTHONPATH=. python benchmarks/pack_hint.py --threads 2
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 PYTHONPATH=. python benchmarks/pack_hint.py --threads 2  # AVX2
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import minimal_engine.model.cpu_linears as cl
from minimal_engine import LLM
from minimal_engine.bench.offline import decode_step_time

SHAPES = {"default": [(960, 320), (320, 320), (1728, 320), (320, 864)] * 6 + [(8192, 320)],
          "llama-125m": [(2304, 768), (768, 768), (6144, 768), (768, 3072)] * 12 + [(32000, 768)]}
MODELS = {"default": None, "llama-125m": "synthetic:llama-125m"}


def linears_ms(shapes, dtype, hint: int, rows: int, repeats: int = 9) -> float:
    """Median time of every Linear of `shapes` once, pre-packed for `hint`, at `rows` rows."""
    reorder, linear = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    packs = [reorder(torch.randn(o, i).to(dtype), hint) for o, i in shapes]
    xs = [torch.randn(rows, i).to(dtype) for _, i in shapes]

    def once():
        t = time.perf_counter()
        for p, x in zip(packs, xs):
            linear(x, p, None, "none", [], "")
        return time.perf_counter() - t
    once()
    return statistics.median(once() for _ in range(repeats)) * 1000


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {a.threads} threads")
    for name, shapes in SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            why = cl.probe(cl.PREPACKED, dtype)
            if why:                              # bf16 packing needs AVX-512 (BW/VL/DQ) or AVX-NE-CONVERT
                print(f"linears of {name:10s} {str(dtype)[6:]:8s}: no pre-packed kernel here ({why})")
                continue
            for hint in (1, 16):
                row = " ".join(f"{r} rows {linears_ms(shapes, dtype, hint, r):.2f} ms" for r in (1, 3, 32))
                print(f"linears of {name:10s} {str(dtype)[6:]:8s} hint {hint:2d}: {row}", flush=True)
    for name, model in MODELS.items():
        llms = {}
        for hint in (1, 16):
            cl.PACK_HINT[torch.float32] = hint
            llms[hint] = LLM(model, dtype="float32", max_num_seqs=32, kv_cache_memory=512 << 20)
        res: dict = {}
        for _ in range(a.rounds):
            for hint, llm in llms.items():
                for b in (1, 32):
                    res.setdefault((hint, b), []).append(decode_step_time(llm, b, 128, num_steps=10)["median_step_ms"])
        for (hint, b), v in sorted(res.items()):
            print(f"engine {name:10s} float32 hint {hint:2d} batch {b:2d}: decode step median {statistics.median(v):.2f} "
                  f"ms (min {min(v):.2f}, max {max(v):.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
