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

SLOWER = 1.1            # a factor of the prefill reading at or above this is named as a cause (10 % for timer noise)


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
    """Batch-1 decode steps with and without the Linear layers, timed alternately (with, without, with, ...) so that
    both medians (``with_ms``, ``fixed_ms``) come from the same minutes of load (blind reading 2026-12-07b ch02
    second #3: a fixed time taken minutes after the batch-1 point mixed two load windows), and the load average."""
    from minimal_engine.bench.offline import decode_step_time
    before, full, fixed = load1(), [], []
    for r in range(repeats):
        full.append(decode_step_time(llm, 1, context, steps, seed=seed + r)["median_step_ms"])
        with without_linear_layers(llm.model):
            fixed.append(decode_step_time(llm, 1, context, steps, seed=seed + r)["median_step_ms"])
    after = load1()
    loads = [x for x in (before, after) if x is not None]
    return {"fixed_ms": statistics.median(fixed), "with_ms": statistics.median(full),
            "load1": max(loads) if loads else None, "cores": usable_cpus()}


def prefill_kernel_reading(flops: float, best_ms: float, kernel: float, roof: float) -> str:
    """Why a long prefill step is longer than its compute roof, from the run (blind reading 2026-12-07b ch02 second
    #1): the step's best rate against the engine's Linear kernel on the model's shapes timed between its repeats
    (``kernel``: what the kernel gives at that moment) and against the roof (the same kernel, timed at the start).
    roof / achieved = (roof / kernel) x (kernel / achieved): the first factor is the kernel itself running slower than
    when the roof was taken (other programs on the CPU), the second is the step's own work beyond its Linear layers at
    the kernel's rate (attention, small operators, Python)."""
    achieved = flops / (best_ms / 1000)
    slow, own = roof / kernel, kernel / achieved
    text = (f"Prefill の内訳：最速の回の速さ {achieved / 1e9:.1f} GFLOP/s、その合間に測った線形層のカーネル "
            f"{kernel / 1e9:.1f} GFLOP/s、屋根 {roof / 1e9:.1f} GFLOP/s。屋根との差 {roof / achieved:.2f} 倍 = "
            f"カーネル自体が屋根を測った時より遅くなった分 {slow:.2f} 倍 × 同じ時刻のカーネルに比べてステップが遅い分 "
            f"{own:.2f} 倍です。")
    if slow >= SLOWER:
        text += "前の因子が大きいのは、ほかのプログラムが CPU を使い、カーネルそのものが遅くなったからです。"
    else:
        text += "カーネルの速さは屋根を測った時とほぼ同じでした。"
    return text + ("後の因子は、線形層の外の仕事（Attention、小さな演算、Python）と、行列の形の違いの分です" if own >= SLOWER
                   else "ステップは、同じ時刻のカーネルとほぼ同じ速さで計算しました")


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
    if s["busy"]:            # the Linear layers' time includes waiting for a CPU: no read speed is a measurement
        read = "CPU を待った時間を含むので、読む速さとしては示しません"
    elif s["read_gb_s"]:
        read = (f"線形層が重みを読んだ速さは約 {s['read_gb_s']:.1f} GB/s で、予測に使った帯域 "
                f"{s['bandwidth_gb_s']:.1f} GB/s より" + ("遅い" if s["read_gb_s"] < s["bandwidth_gb_s"] else "速い"))
    else:
        read = "線形層を除いたステップが実測より長く、読む速さは出せません"
    text = (f"内訳（線形層あり・なしのステップを交互に測った中央値）：実測 {s['measured_ms']:.2f} ms − 予測 "
            f"{s['predicted_ms']:.2f} ms = 超過 {s['excess_ms']:.2f} ms。そのうち固定の時間（線形層を除いたステップ）が "
            f"{s['fixed_ms']:.2f} ms（{share(s['fixed_ms'])}）、残りの {s['reads_ms']:.2f} ms（{share(s['reads_ms'])}）は"
            f"線形層の時間のうち予測を超えた分です（{read}）。")
    if s["load1"] is None:
        return text + "このマシンでは load average が読めないので、混み具合はわかりません"
    where = (f"load average（1分）は {s['load1']:.1f}（このノートブックの {s['threads']} スレッドを含む）、"
             f"使えるコアは {s['cores']} ")
    if s["busy"]:
        return (text + f"{where}で、コアの数より多くのスレッドが CPU を待っていました。上の2つにはどちらも、"
                "ほかのプログラムに CPU を譲って待った時間が入っていると考えられます（静かなマシンで測り直すと、両方とも短くなります）")
    return (text + f"{where}で、CPU を待つスレッドはほぼありませんでした。超過は、このマシンでの固定の時間と読む速さで"
            "説明できます")


__all__ = ["SLOWER", "load1", "measure", "prefill_kernel_reading", "sentence_ja", "split", "without_linear_layers"]
