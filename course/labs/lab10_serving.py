"""Lab 10's default model on a datacenter GPU (予測), and what the fitted serving constant, not the GPU,
decides of its curve (the lab's notebook calls these; lab10_explain has the run's other explanations).

    gpu = default_model_on_gpu(res)      # all at once vs InferenceX's closed loop + request_overhead_ms
    serving_overhead_lines(gpu)          # the two curves side by side
    serving_constant_lines(gpu)          # request_overhead_ms x (1 - 1/C), per concurrency
"""
from __future__ import annotations

from pathlib import Path

from minimal_engine.calculators.sim_step import DEFAULT_CONSTANTS
from minimal_engine.calculators.simulator import simulate, simulate_batch

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"


def default_model_on_gpu(res: dict, gpu: str = "H100", dtype: str = "bf16") -> dict:
    """The default model on one ``gpu`` at this run's lengths and concurrencies (予測), two ways:
    ``batch``: all requests at once (``simulate_batch``, this lab's workload; no serving overhead),
    and ``served``: InferenceX's closed loop (``simulate``) with the fitted serving overhead
    ``request_overhead_ms x (1 - 1/C)``. Rows carry interactivity and output_tok_s_per_gpu."""
    kw = dict(weight_dtype=dtype, kv_dtype=dtype, input_len=res["prompt_len"],
              output_len=res["output_len"])
    model = DEFAULT_MODEL_DIR
    batch, served = [], []
    for c in res["concurrencies"]:
        b = simulate_batch(model, gpu, concurrency=c, **kw)
        batch.append({"concurrency": c, "interactivity": b["tok_s_per_user"],
                      "output_tok_s_per_gpu": b["tok_s"], "ttft_ms": b["ttft_ms"],
                      "tpot_ms": b["tpot_ms"]})
        s = simulate(model, gpu, num_gpus=1, tp=1, concurrency=c, **kw)
        served.append({k: s[k] for k in ("concurrency", "interactivity", "output_tok_s_per_gpu",
                                         "ttft_ms", "tpot_ms")})
    return {"gpu": gpu, "batch": batch, "served": served,
            "request_overhead_ms": DEFAULT_CONSTANTS.request_overhead_ms}


def serving_overhead_lines(curves: dict) -> list[str]:
    """What the fitted serving constant, not the GPU, does to the default model's curve (予測)."""
    out = []
    for b, s in zip(curves["batch"], curves["served"]):
        out.append(f"同時 {b['concurrency']:>2}: 全員同時 {b['output_tok_s_per_gpu']:>9,.0f} tok/s/GPU"
                   f"（TTFT {b['ttft_ms']:6.1f} ms）、閉ループ＋サービングの定数 {s['output_tok_s_per_gpu']:>9,.0f}"
                   f" tok/s/GPU（TTFT {s['ttft_ms']:6.1f} ms）")
    return out


def serving_constant_lines(gpu: dict) -> list[str]:
    """Where the closed-loop curve's drop from the smallest concurrency comes from: the constant's
    formula request_overhead_ms x (1 - 1/C), printed for each concurrency of the curve."""
    r = gpu["request_overhead_ms"]
    return [f"同時 {s['concurrency']:>2}: 定数の分 {r:.1f} × (1 − 1/{s['concurrency']}) = "
            f"{r * (1 - 1 / s['concurrency']):5.1f} ms（TTFT の予測 {s['ttft_ms']:6.1f} ms のうち）"
            for s in gpu["served"]]


__all__ = ["default_model_on_gpu", "serving_constant_lines", "serving_overhead_lines"]
