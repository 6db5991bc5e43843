"""The learner's machine as a simulator "GPU" (chapter 10's lab): a spec from measured peaks, its overheads fitted
on a measured sweep, and measured against predicted (予測). Re-exported by ``sim_calibration``."""
from __future__ import annotations

import math
import statistics


def error(pred: float, measured: float) -> float:
    """Relative error (predicted - measured) / measured."""
    return (pred - measured) / measured


def machine_spec(peaks: dict, name: str = "この PC", memory_gb: float | None = None,
                 max_batched_tokens: int = 2048) -> dict:
    """A custom simulator spec from ``roofline.measure_machine`` (``course.labkit.machine.machine_peaks``): measured
    FLOP/s and B/s are what this machine reaches, so both efficiencies are 1; the engine runs in-process
    (no HTTP: request overhead 0) with its own ``max_num_batched_tokens``. Overheads: ``fit_machine``."""
    if memory_gb is None:
        import os
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    return {"name": name, "memory_gb": memory_gb, "flops_bf16": peaks["flops_bf16"],
            "flops_fp32": peaks.get("flops_fp32", peaks["flops_bf16"]), "bandwidth": peaks["bandwidth"],
            "compute_eff": 1.0, "memory_eff": 1.0, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0,
            "request_overhead_ms": 0.0, "max_batched_tokens": max_batched_tokens}


def _batch(spec, model, rows_or_c, input_len, output_len, dtype):
    from minimal_engine.calculators.simulator import simulate_batch
    return simulate_batch(model, spec, weight_dtype=dtype, kv_dtype=dtype, input_len=input_len,
                          output_len=output_len, concurrency=rows_or_c)


def _fit_on(rows, fit_on):
    cs = sorted(r["concurrency"] for r in rows)
    return tuple(fit_on) if fit_on is not None else (cs[0], cs[-1])


def fit_machine(spec: dict, model, rows: list[dict], input_len: int, output_len: int, dtype: str = "fp32",
                fit_on=None) -> dict:
    """The spec with ``layer_overhead_us`` and ``seq_overhead_us`` fitted on the measured TPOT at the
    concurrencies ``fit_on`` (default: the smallest and the largest measured; the ones between are held out).
    A Python engine pays per layer and per request each step; the roofline of the measured peaks is the rest:
    measured - roofline = layers x (a + b x concurrency), a least-squares line with a, b >= 0."""
    from minimal_engine.calculators.simulator import get_sim_model
    layers, fit_on = get_sim_model(model).shape.layers, _fit_on(rows, fit_on)
    bare = {**spec, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0}           # the roofline part only
    pts = [(r["concurrency"], r["tpot_ms"] - _batch(bare, model, r["concurrency"], input_len, output_len, dtype)["tpot_ms"])
           for r in rows if r["concurrency"] in fit_on]
    if not pts:
        raise ValueError(f"no measured row at the concurrencies {fit_on} to fit the overheads on")
    mc, me = statistics.mean(c for c, _ in pts), statistics.mean(e for _, e in pts)
    var = sum((c - mc) ** 2 for c, _ in pts)
    b = max(sum((c - mc) * (e - me) for c, e in pts) / var, 0.0) if var else 0.0
    a = max(me - b * mc, 0.0)
    return {**spec, "layer_overhead_us": a / layers * 1e3, "seq_overhead_us": b / layers * 1e3}


def fit_machine_all(spec: dict, model, rows: list[dict], input_len: int, output_len: int, dtype: str = "fp32",
                    fit_on=None, rounds: int = 3) -> dict:
    """:func:`fit_machine`, plus ``compute_eff`` fitted on the measured TTFT at ``fit_on``, alternated ``rounds``
    times. ``compute_eff`` is the engine's prompt matmuls' speed over the measured peak (an n x n matmul,
    best of 5): searched in 0.05-2.0, since the engine's shapes and kernels (``model.cpu_linears``) can beat it."""
    fit_on = _fit_on(rows, fit_on)
    pts = [r for r in rows if r["concurrency"] in fit_on]
    for _ in range(rounds):
        spec = fit_machine(spec, model, rows, input_len, output_len, dtype, fit_on)
        grid = [0.05 * i for i in range(1, 41)]
        score = [(sum(abs(math.log(_batch({**spec, "compute_eff": e}, model, r["concurrency"], input_len, output_len,
                                          dtype)["ttft_ms"] / r["ttft_ms"])) for r in pts), e) for e in grid]
        spec = {**spec, "compute_eff": min(score)[1]}
    return fit_machine(spec, model, rows, input_len, output_len, dtype, fit_on)   # TPOT last: exact at fit_on


def machine_table(spec: dict, model, rows: list[dict], input_len: int, output_len: int, dtype: str = "fp32",
                  fit_on=None) -> list[dict]:
    """Measured against predicted (予測) for each row of a measured sweep (chapter 1's workload: all requests
    at once): concurrency, split (fit / held-out), and measured, predicted and error of ttft_ms, tpot_ms, tok_s."""
    out, fit_on = [], _fit_on(rows, fit_on)
    for r in sorted(rows, key=lambda r: r["concurrency"]):
        p = _batch(spec, model, r["concurrency"], input_len, output_len, dtype)
        row = {"concurrency": r["concurrency"], "split": "fit" if r["concurrency"] in fit_on else "held-out"}
        for k in ("ttft_ms", "tpot_ms", "tok_s"):
            row[k], row[f"pred_{k}"], row[f"err_{k}"] = r[k], p[k], error(p[k], r[k])
        out.append(row)
    return out
