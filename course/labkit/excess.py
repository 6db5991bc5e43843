"""Where a batch-1 decode step's time beyond its roofline prediction goes, measured in the same run (chapter 2's
lesson and lab; blind reading ch02, reviews6 #2: the saved 4-6x ratios were explained by fixed time and slower
reads alone, with no word on machine load)::

    m = measure(llm, context=64, steps=8)        # the step without its Linear layers, and the load average
    s = split(measured_ms, predicted_ms, m["fixed_ms"], weight_bytes, bandwidth, m["load1"], m["cores"], threads)
    print(sentence_ja(s))                        # the excess, its two measured parts, and what the load says

Three causes, each from the run:
  * fixed per-step time: the batch-1 step with every Linear layer replaced by a preallocated zero output (no weight
    read; the stand-in of benchmarks/batch1_breakdown.py). What remains is Python, the scheduler, attention,
    RMSNorm, RoPE, sampling. Taking the Linear layers out also leaves the caches warm for the small operators, so
    this part is a lower bound on their cost in the real step.
  * slower weight reads: the rest of the step (measured - fixed) against the prediction (bytes / the measured
    bandwidth); weight bytes / (measured - fixed) is the speed the Linear layers actually read at.
  * machine load: ``os.getloadavg()`` (1 minute), read before and after, the larger kept. It counts runnable
    threads, this notebook's own included; above the usable cores, threads waited for a CPU during the run and
    both parts above include that wait. Where the load average is missing (Windows) nothing is said about load.
The two measured parts add up to the excess by construction; the load decides whether they are the machine's
own costs or partly waiting for a CPU.
"""
from __future__ import annotations

import os
import statistics
from contextlib import contextmanager

import torch

from course.labkit.load import usable_cpus


@contextmanager
def without_linear_layers(model):
    """Every nn.Linear (the engine's CpuLinear included) returns a preallocated zero row for one-row inputs."""
    undo = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            zero, full = torch.zeros(1, m.out_features, dtype=m.weight.dtype, device=m.weight.device), m.forward
            undo.append((m, vars(m).get("forward")))      # an instance attribute, or None: the class's method
            m.forward = lambda x, z=zero, f=full: z if x.shape[0] == 1 else f(x)
    try:
        yield
    finally:
        for m, own in undo:
            if own is None:
                del m.forward
            else:
                m.forward = own


def load1() -> float | None:
    """The 1-minute load average, or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def measure(llm, context: int, steps: int, repeats: int = 1, seed: int = 0) -> dict:
    """Median batch-1 decode step without the Linear layers (``fixed_ms``), with the load average around it."""
    from minimal_engine.bench.offline import decode_step_time
    before = load1()
    with without_linear_layers(llm.model):
        times = [decode_step_time(llm, 1, context, steps, seed=seed + r)["median_step_ms"] for r in range(repeats)]
    after = load1()
    loads = [x for x in (before, after) if x is not None]
    return {"fixed_ms": statistics.median(times), "load1": max(loads) if loads else None, "cores": usable_cpus()}


def split(measured_ms: float, predicted_ms: float, fixed_ms: float, weight_bytes: float, bandwidth: float,
          load1: float | None, cores: int, threads: int) -> dict:
    """The excess (measured - predicted) as fixed time + slower reads, the in-step read speed, and the load."""
    excess = measured_ms - predicted_ms
    rest = measured_ms - fixed_ms
    return {"measured_ms": measured_ms, "predicted_ms": predicted_ms, "excess_ms": excess, "fixed_ms": fixed_ms,
            "reads_ms": rest - predicted_ms, "read_gb_s": weight_bytes / rest / 1e6 if rest > 0 else None,
            "bandwidth_gb_s": bandwidth / 1e9, "load1": load1, "cores": cores, "threads": threads,
            "busy": load1 is not None and load1 > cores}


def sentence_ja(s: dict) -> str:
    """The split as Japanese sentences, every number from ``s``."""
    if s["excess_ms"] <= 0:
        return (f"内訳：実測 {s['measured_ms']:.2f} ms は予測 {s['predicted_ms']:.2f} ms を超えていないので、"
                "分ける差がありません")
    share = lambda x: f"{x / s['excess_ms']:.0%}"           # noqa: E731
    read = (f"線形層が重みを読んだ速さは約 {s['read_gb_s']:.1f} GB/s で、予測に使った帯域 "
            f"{s['bandwidth_gb_s']:.1f} GB/s より" + ("遅い" if s["read_gb_s"] < s["bandwidth_gb_s"] else "速い")
            if s["read_gb_s"] else "線形層を除いたステップが実測より長く、読む速さは出せません")
    text = (f"内訳：実測 {s['measured_ms']:.2f} ms − 予測 {s['predicted_ms']:.2f} ms = 超過 {s['excess_ms']:.2f} ms。"
            f"そのうち固定の時間（線形層を除いたステップ）が {s['fixed_ms']:.2f} ms（{share(s['fixed_ms'])}）、"
            f"残りの {s['reads_ms']:.2f} ms（{share(s['reads_ms'])}）は重みを読む時間が予測より長い分です（{read}）。")
    if s["load1"] is None:
        return text + "このマシンでは load average が読めないので、混み具合はわかりません"
    where = (f"load average（1分）は {s['load1']:.1f}（このノートブックの {s['threads']} スレッドを含む）、"
             f"使えるコアは {s['cores']} ")
    if s["busy"]:
        return (text + f"{where}で、コアの数より多くのスレッドが CPU を待っていました。上の2つにはどちらも、"
                "ほかのプログラムに CPU を譲って待った時間が入っていると考えられます（静かなマシンで測り直すと、両方とも短くなります）")
    return (text + f"{where}で、CPU を待つスレッドはほぼありませんでした。超過は、このマシンでの固定の時間と読む速さで"
            "説明できます")


__all__ = ["load1", "measure", "sentence_ja", "split", "without_linear_layers"]
