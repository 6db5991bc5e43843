"""One-row (batch-1) matrix products on the CPU: how fast each kernel reads weights that stream from memory.

    python benchmarks/matvec_kernels.py --model synthetic:llama-125m --threads 2 [--dtype float32]

The weights are the per-layer matrices of the model's shape (q/k/v, o, gate/up, down), one set per layer, so
a pass reads as many bytes as a decode step's layers do and the weights do not stay in the cache. Each kernel
multiplies one row by every matrix in turn; the median pass time gives GB/s of weight bytes read:
  * oneDNN with the weight pre-packed (the engine's bf16 path for more than one row, its fp32 path for all;
    left out where it fails its probe on this CPU: bf16 needs AVX-512 or AVX-NE-CONVERT, see cpu_linears.py);
  * plain `F.linear` (bf16: oneDNN where the CPU runs it, the weight laid out again on every call; fp32: MKL's
    matrix-vector product);
  * bf16 only: ATen's matrix-vector kernel through `torch.mv` (`cpu_linears.matvec`, the engine's one-row path,
    oneDNN switched off for each call), the same product as F.linear with oneDNN switched off for the whole pass,
    and `_weight_int8pack_mm` on int8 weights (chapter 6's one-row INT8 kernel; GB/s of int8 bytes; left out
    where it fails its probe);
and, for the same bytes, a plain `sum` over one buffer: what this machine streams at all.
`--in-cache` repeats one layer's matrices instead (they stay in the cache): the order of the kernels changes.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from minimal_engine.model.cpu_linears import PREPACKED, matvec, probe, probe_int8pack
from minimal_engine.model.synthetic import SHAPES


def layer_shapes(cfg: dict) -> list[tuple[int, int]]:
    h, i, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    qkv = (cfg["num_heads"] + 2 * cfg["num_kv_heads"]) * dh
    return [(qkv, h), (h, cfg["num_heads"] * dh), (2 * i, h), (h, i)]


def median_s(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def onednn_off(fn):
    """fn() with oneDNN switched off for the whole process, once around the whole pass."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return fn()
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def kernel_speeds(shapes: list[tuple[int, int]], layers: int, reps: int = 15, dtype=torch.bfloat16) -> dict:
    """GB/s of weight bytes for each kernel over `layers` sets of matrices of `shapes` ([out, in])."""
    torch.manual_seed(0)
    ws = [torch.randn(n, k).to(dtype) for _ in range(layers) for n, k in shapes]
    xs = {k: torch.randn(1, k).to(dtype) for _, k in shapes}
    size = torch.finfo(dtype).bits // 8
    nbytes = sum(w.numel() * size for w in ws)
    runs = {"plain_f_linear": (lambda: [F.linear(xs[w.shape[1]], w) for w in ws], nbytes)}
    if probe(PREPACKED, dtype) is None:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in ws]
        runs["onednn_prepacked"] = (lambda: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none",
                                                                                [], "") for w, p in zip(ws, packed)],
                                    nbytes)
    if dtype == torch.bfloat16:
        scales = [w.float().abs().amax(1).clamp(min=1e-8) / 127 for w in ws]
        q8 = [(w.float() / s[:, None]).round().to(torch.int8) for w, s in zip(ws, scales)]
        s16 = [s.bfloat16() for s in scales]
        runs["aten_mv"] = (lambda: [matvec(xs[w.shape[1]], w, None) for w in ws], nbytes)
        runs["f_linear_onednn_off"] = (lambda: onednn_off(lambda: [F.linear(xs[w.shape[1]], w) for w in ws]), nbytes)
        if probe_int8pack(dtype) is None:
            runs["int8pack_mm"] = (lambda: [torch.ops.aten._weight_int8pack_mm(xs[w.shape[1]], q, s)
                                            for w, q, s in zip(ws, q8, s16)], nbytes // 2)
    flat = torch.randn(nbytes // size).to(dtype)
    runs["sum_of_one_buffer"] = (lambda: flat.sum(), nbytes)
    with torch.inference_mode():
        return {k: b / median_s(fn, reps) / 1e9 for k, (fn, b) in runs.items()} | {"weight_bytes": nbytes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="synthetic:llama-125m", help="a synthetic:NAME shape")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--in-cache", action="store_true", help="one layer's matrices, repeated (stay in the cache)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = SHAPES[args.model.removeprefix("synthetic:")]
    layers = 1 if args.in_cache else cfg["num_layers"]
    r = kernel_speeds(layer_shapes(cfg), layers, dtype=getattr(torch, args.dtype))
    print(f"{args.model} ({args.dtype}), {layers} layer(s) of matrices ({r.pop('weight_bytes') / 1e6:.0f} MB), one row, "
          f"{args.threads} threads, CPU {torch.backends.cpu.get_cpu_capability()}: GB/s of weights read")
    for k, v in r.items():
        print(f"  {k:18s} {v:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
