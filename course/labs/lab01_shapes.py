"""Lab 1 課題6: why one model shape decodes slower than another, measured (plain functions, no widgets)::

    res = measure_shapes()                        # default, llama-125m and SmolLM2-135M shapes, batch 1
    print(lab01_explain.shape_reading(res))       # per model: layers, bytes read per step, TPOT split
    print(verdicts(lab01_explain.shape_predictions(res["rows"]), *res["loads"]))

TPOT at batch 1 is taken apart into two terms, TPOT ~ (bytes read per step / bandwidth) + (the rest):

- the bytes one decode step reads (every layer weight, the norms and the lm_head once, the embedding rows
  looked up, the request's KV cache: ``minimal_engine.bench.roofline.step_cost``, chapter 2's count), over
  this machine's bandwidth measured here (``roofline.measure_bandwidth`` and ``measure_matvec_bandwidth``,
  the largest, as chapter 2's roofline). That is the least time reading the step's bytes can take;
- the rest, TPOT minus that time: on a laptop CPU with these small models mostly the per-layer work that
  does not shrink with fewer bytes (Python and the calls of many small operations in every layer), so it
  grows with the number of layers.

The two synthetic shapes have about the same number of parameters but 12 and 30 layers, so which term
makes their TPOT gap is decided by the run, not assumed. The read time alone cannot say so: BF16 matmuls on
a CPU can run far below the bandwidth, and that time lands in "the rest" too (blind reading 2026-12-07d ch01
#2: the narrower shape's rest per layer was the larger). So on the CPU every Linear layer of each shape is
also timed alone, one row, back to back (``course.labkit.linear_rows.linear_ms``): when those passes take
about the same time for both shapes, the TPOT gap is not the Linear layers timed alone. Whether it is "the same
per-layer work, more layers" is checked, not assumed (lab01_explain._per_layer_check; reviews11 ch01 #2): TPOT
minus the Linear layers, per layer, must be about the same for both shapes. Not separated here: a Linear layer
inside the step can run slower than alone (the caches are shared with the rest of the step).
"""
from __future__ import annotations

from course import labkit
from course.labkit import linear_rows
from course.labkit.backends import local_backend
from course.labkit.load import LoadWatch
from course.runtime import apply_thread_policy, check_device, check_model, get_llm, is_quick
from minimal_engine.bench import roofline
from minimal_engine.model.synthetic import num_parameters

SHAPES = ("default", "synthetic:llama-125m", "synthetic:smollm2-135m")
LABELS = {"default": "既定モデル", "synthetic:llama-125m": "llama-125m の形",
          "synthetic:smollm2-135m": "SmolLM2-135M の形"}


def bandwidth(device: str = "cpu", quick: bool | None = None) -> float:
    """This machine's memory bandwidth in B/s, measured as chapter 2's roofline.measure_machine does: the largest
    of copy, sum and matrix-vector product, every buffer ``roofline.bandwidth_buffer_mb`` (at least 4x the
    last-level cache, so that the probe reads memory, not the cache; blind reading reviews11 ch01 #3: a 4096 x
    4096 bf16 matvec is 32 MiB, the whole L3 of an AMD EPYC)."""
    quick = is_quick() if quick is None else quick
    mb = roofline.bandwidth_buffer_mb(quick, device)
    bw = roofline.measure_bandwidth(mb, device=device)
    matvec = roofline.measure_matvec_bandwidth(roofline.matvec_size(mb), device=device)
    return max(bw["copy"], bw["sum"], matvec)


def attention_ms(cfg, n: int, dtype, repeats: int = 5, device: str = "cpu") -> float:
    """Milliseconds the causal attention of one n-token prefill takes in all of cfg's layers: the engine's
    prefill kernel (``F.scaled_dot_product_attention`` on [1, heads, n, head_dim], as
    minimal_engine/model/attention.py calls it) timed alone, best of ``repeats`` after a warm-up of this shape,
    times the layers. On a CPU this kernel runs at far fewer FLOP/s than the Linear layers' matmuls, so its share
    of the time is larger than its share of the FLOPs (blind reading reviews11 ch01 #1: SDPA was 19 % of a
    384-token TTFT while its FLOP share was 9 %)."""
    import torch
    import torch.nn.functional as F
    g = cfg.num_heads // cfg.num_kv_heads
    q = torch.randn(1, cfg.num_heads, n, cfg.head_dim, device=device).to(dtype)
    k = torch.randn(1, cfg.num_kv_heads, n, cfg.head_dim, device=device).to(dtype)
    v = torch.randn_like(k)
    one = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g > 1)  # noqa: E731
    return 1000 * cfg.num_layers * roofline._best_time(one, repeats)


def shape_row(model: str, measured: dict, bw: float, prompt_len: int, output_len: int,
              linear: dict | None = None) -> dict:
    """One model's row: its shape, the bytes of a decode step at the middle of the output, the time to
    read them at ``bw`` B/s, the measured TPOT (median, min-max) and, on the CPU, ``linear_ms`` /
    ``linear_ms_min``: every Linear layer called once on one row, back to back (``linear_rows.linear_ms``)."""
    llm = get_llm(model, measured["device"])
    cfg, nbytes = llm.model_config, llm.dtype.itemsize
    cost = roofline.step_cost(cfg, nbytes, decode_contexts=[prompt_len + output_len // 2])
    return {"model": model, "label": LABELS.get(model, model), "layers": cfg.num_layers,
            "params": num_parameters(cfg), "dtype": str(llm.dtype).replace("torch.", ""),
            "step_bytes": cost["bytes"], "read_ms": cost["bytes"] / bw * 1e3,
            **{k: measured[k] for k in ("tpot_ms", "tpot_ms_min", "tpot_ms_max") if k in measured},
            **({"linear_ms": linear["median"], "linear_ms_min": linear["min"]} if linear else {})}


def measure_shapes(models=SHAPES, prompt_len: int = 64, output_len: int = 32, repeats: int | None = None,
                   device: str = "cpu", threads: int | None = None) -> dict:
    """TPOT of one request (batch 1) for each model, ``repeats`` times (median, min-max; 3, or 1 with
    COURSE_QUICK), as lab01.measure_lab measures it (``labkit.measure``), and the
    bandwidth measured once. Returns ``rows`` (``shape_row``), ``bandwidth`` (B/s), ``threads``, ``warnings``,
    ``load`` (``LoadWatch`` over the whole task) and ``loads`` (it and each model's, for ``verdicts``)."""
    device = check_device(device)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads)
    bw = bandwidth(device)
    rows, warnings, loads = [], [], []
    for model in models:
        m = labkit.measure(local_backend(check_model(model), device), prompt_len, output_len, 1,
                           (1 if is_quick() else 3) if repeats is None else repeats, threads=threads)
        linear = (linear_rows.linear_ms(get_llm(check_model(model), device), rows=(1,))[1]
                  if device == "cpu" else None)        # the weights' matmuls alone: do they differ between shapes?
        rows.append(shape_row(model, m, bw, prompt_len, output_len, linear))
        warnings += [w for ws in m.get("warnings", []) for w in ws.split("\n") if w not in warnings]
        loads.append(m["load"])
    load = watch.finish()                               # the whole task, the bandwidth's measurement included
    warnings += [w for w in (load["warning"] or "").split("\n") if w and w not in warnings]
    warnings = list(dict.fromkeys(warnings))
    return {"rows": rows, "bandwidth": bw, "threads": threads, "device": device, "warnings": warnings,
            "load": load, "loads": [load, *loads]}


__all__ = ["LABELS", "SHAPES", "bandwidth", "measure_shapes", "shape_row"]
