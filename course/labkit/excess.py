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
  * the Linear calls themselves: every Linear layer of the model called once, back to back, on a one-row input
    (``linears_ms``, nothing in between), against the prediction (bytes / the measured bandwidth): the per-call
    cost and the kernel's own rate on these small shapes (final blind reading ch02 #1: on the saved 1-thread runs
    this, not interleaving, held most of the gap).
  * the Linear layers slower inside the step: (measured - fixed) - ``linears_ms``, what the small operators in
    between cost the Linear layers (cache turnover); it can come out near zero or negative within the noise.
  * machine load: ``os.getloadavg()`` (1 minute), read before and after, the larger kept, and the share of CPU
    time the hypervisor gave to others (steal, /proc/stat on Linux). The load average counts runnable threads,
    this notebook's own included; above the usable cores, threads waited for a CPU. It does not see steal or a
    sibling hyperthread's use, so a low load average does not show an uncontended run (final blind reading ch02
    #2): the sentence says what it can see and no more. Where neither is readable nothing is said about load.
The measured parts add up to the excess by construction; the load says whether they are partly waiting for a CPU.
"""
from __future__ import annotations

import os
import statistics
from contextlib import contextmanager

import torch

from course.labkit.linear_rows import linear_layers, pass_ms
from course.labkit.load import usable_cpus

SLOWER = 1.1            # a factor of the prefill reading at or above this is named as a cause (10 % for timer noise)
AGREE = 0.25            # the breakdown's with-Linear step may lie this share outside the table's batch-1 range


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


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) CPU ticks since boot from /proc/stat's first line, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (fields[7], sum(fields)) if len(fields) == 8 else None


def steal_share(before, after) -> float | None:
    """The share of CPU time the hypervisor gave to other guests between two ``cpu_ticks`` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def linears_back_to_back_ms(model, steps: int) -> float:
    """Every nn.Linear of ``model`` (the engine's CpuLinear included) called once on a one-row input, back to back
    with nothing in between: median ms of ``steps`` passes (after one warm pass)."""
    layers = linear_layers(model)
    xs = [torch.zeros(1, m.in_features, dtype=m.weight.dtype, device=m.weight.device) for m in layers]
    with torch.inference_mode():
        pass_ms(layers, xs)                           # the warm pass, not counted
        times = [pass_ms(layers, xs) for _ in range(steps)]
    return statistics.median(times) if times else 0.0


def measure(llm, context: int, steps: int, repeats: int = 1, seed: int = 0) -> dict:
    """Batch-1 decode steps with and without the Linear layers and the Linear layers alone back to back, timed
    alternately (with, without, alone, with, ...) so that the medians (``with_ms``, ``fixed_ms``, ``linears_ms``)
    come from the same minutes of load (blind reading 2026-12-07b ch02 second #3), the load average and steal."""
    from minimal_engine.bench.offline import decode_step_time
    before, ticks, full, fixed, alone = load1(), cpu_ticks(), [], [], []
    for r in range(repeats):
        full.append(decode_step_time(llm, 1, context, steps, seed=seed + r)["median_step_ms"])
        with without_linear_layers(llm.model):
            fixed.append(decode_step_time(llm, 1, context, steps, seed=seed + r)["median_step_ms"])
        alone.append(linears_back_to_back_ms(llm.model, steps))
    after = load1()
    loads = [x for x in (before, after) if x is not None]
    return {"fixed_ms": statistics.median(fixed), "with_ms": statistics.median(full),
            "linears_ms": statistics.median(alone), "load1": max(loads) if loads else None, "cores": usable_cpus(),
            "steal": steal_share(ticks, cpu_ticks())}


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
          load1: float | None, cores: int, threads: int, linears_ms: float | None = None,
          steal: float | None = None, ref_ms: float | None = None) -> dict:
    """The excess (measured - predicted) as fixed time + the Linear layers' time beyond the prediction; with
    ``linears_ms`` the latter splits into the Linear calls alone (back to back) and their slowdown inside the step.
    Read speeds: bytes over the Linear layers' time in the step, and over ``linears_ms``. ``ref_ms``: the same step
    timed separately in the same run (the table's median); ``drift_ms`` = |measured - ref|. The in-step slowdown is a
    residual of ``measured_ms``, so where it is no larger than the drift it cannot be read (blind reading 2026-12-07
    reviews11 ch02 #1: a 1.46 ms residual beside a 0.96 ms drift between two timings of the same step)."""
    excess = measured_ms - predicted_ms
    rest = measured_ms - fixed_ms
    out = {"measured_ms": measured_ms, "predicted_ms": predicted_ms, "excess_ms": excess, "fixed_ms": fixed_ms,
           "reads_ms": rest - predicted_ms, "read_gb_s": weight_bytes / rest / 1e6 if rest > 0 else None,
           "bandwidth_gb_s": bandwidth / 1e9, "load1": load1, "cores": cores, "threads": threads,
           "busy": load1 is not None and load1 > cores, "steal": steal, "linears_ms": linears_ms,
           "ref_ms": ref_ms, "drift_ms": None if ref_ms is None else abs(measured_ms - ref_ms)}
    if linears_ms:
        out.update(calls_ms=linears_ms - predicted_ms, between_ms=rest - linears_ms,
                   alone_gb_s=weight_bytes / linears_ms / 1e6)
    return out


def disagrees(with_ms: float, lo: float, hi: float) -> bool:
    """The breakdown's with-Linear step lies more than ``AGREE`` outside the same step's range timed for the table
    (final blind reading 2026-12-07d ch02 #1: 13.27 ms against 5.70-6.07 ms, so its split described a disturbance)."""
    return with_ms > hi * (1 + AGREE) or with_ms < lo * (1 - AGREE)


def disagreement_ja(with_ms: float, lo: float, hi: float) -> str:
    """Why no breakdown is printed: the same step, timed twice in one run, disagreed; both numbers and both causes."""
    other = f"{lo:.2f} ms" if lo == hi else f"{lo:.2f}〜{hi:.2f} ms"
    return (f"内訳：示しません。内訳のために測った線形層ありのステップ {with_ms:.2f} ms が、同じ実行で別に測った"
            f"同じステップ（バッチ 1、{other}）と大きく違います。同じ実行の中で食い違うのは、"
            "そのあいだにほかのプログラムが CPU を使ったか、マシンの状態（キャッシュの中身や CPU のクロック）が"
            "変わったかです。この実行ではどちらかを分けられません。静かなマシンで測り直してください")


def _load_ja(s: dict) -> str:
    """What the run can see of other programs: the load average, steal, and what neither sees."""
    steal = ("" if s.get("steal") is None else
             f"steal（ハイパーバイザーがほかの仮想マシンに回した CPU 時間）は {s['steal']:.0%} でした。")
    if s["load1"] is None:
        return steal + "このマシンでは load average が読めないので、混み具合はわかりません"
    where = (f"load average（1分）は {s['load1']:.1f}（このノートブックの {s['threads']} スレッドを含む）、"
             f"使えるコアは {s['cores']} ")
    if s["busy"]:
        return (steal + f"{where}で、コアの数より多くのスレッドが CPU を待っていました。上の時間にはどれも、ほかのプログラムに"
                "CPU を譲って待った時間が入っていると考えられます（静かなマシンで測り直すと短くなります）")
    return (steal + f"{where}で、コアの数を超えていません。ただし load average は、同じコアのもう1つのハードウェア"
            "スレッドの使用を数えないので、CPU を取り合わなかったとまでは言えません")


def sentence_ja(s: dict) -> str:
    """The split as Japanese sentences, every number from ``s``."""
    if s["excess_ms"] <= 0:
        return (f"内訳：実測 {s['measured_ms']:.2f} ms は予測 {s['predicted_ms']:.2f} ms を超えていないので、"
                "分ける差がありません")
    share = lambda x: f"{x / s['excess_ms']:.0%}"           # noqa: E731
    head = (f"内訳（線形層あり・なしのステップを交互に測った中央値）：線形層ありのステップ {s['measured_ms']:.2f} ms − 予測 "
            f"{s['predicted_ms']:.2f} ms = 超過 {s['excess_ms']:.2f} ms。"
            + ("" if s.get("drift_ms") is None else
               f"このステップは上の実測とは別に測ったもので、上の実測 {s['ref_ms']:.2f} ms と {s['drift_ms']:.2f} ms 違います。")
            + f"そのうち固定の時間（線形層を除いたステップ）が "
            f"{s['fixed_ms']:.2f} ms（{share(s['fixed_ms'])}）、残りの {s['reads_ms']:.2f} ms（{share(s['reads_ms'])}）は"
            "線形層を入れて増えた時間のうち予測を超えた分です")
    if s.get("linears_ms"):
        head += (f"。\n  残りの内訳：線形層だけを間に何もはさまず続けて呼んでも出る分（線形層の呼び出しとカーネルの実効速度）"
                 f"{s['calls_ms']:.2f} ms（{share(s['calls_ms'])}）")
        if s.get("drift_ms") is not None and abs(s["between_ms"]) <= s["drift_ms"]:
            head += (f"です。その残り {s['between_ms']:.2f} ms（線形層と小さな演算が同じステップで互いを遅くした分の候補）は"
                     f"判定できません。同じステップを2回測った値の差 {s['drift_ms']:.2f} ms 以下なので、同じステップの"
                     "測り直しの揺れと分けられません。揺れの原因の候補は、2つの計測のあいだの CPU のクロックの変化、"
                     "キャッシュの中身の違い、負荷の監視に映らない短いほかのプログラムの仕事で、この実行ではどれかを分けられません")
        else:
            head += (f"、線形層と小さな演算が同じステップで互いを遅くした分（どちらが遅くなったかは分けられません）"
                     f"{s['between_ms']:.2f} ms（{share(s['between_ms'])}）です")
            if s.get("drift_ms"):            # the residual moves with the step's timing: show it from the other timing too
                other = s["ref_ms"] - s["fixed_ms"] - s["linears_ms"]
                head += (f"。上の実測 {s['ref_ms']:.2f} ms で計算するとこの分は {other:.2f} ms です。大きさは、同じステップを"
                         f"2回測った値の差 {s['drift_ms']:.2f} ms の分だけ不確かです")
    if s["busy"]:            # the Linear layers' time includes waiting for a CPU: no read speed is a measurement
        read = "CPU を待った時間を含むので、読む速さとしては示しません"
    elif s.get("linears_ms"):
        read = (f"線形層だけを続けて呼んだときに重みを読んだ速さは約 {s['alone_gb_s']:.1f} GB/s、予測に使った帯域は "
                f"{s['bandwidth_gb_s']:.1f} GB/s です")
    elif s["read_gb_s"]:
        read = (f"線形層が重みを読んだ速さは約 {s['read_gb_s']:.1f} GB/s で、予測に使った帯域 "
                f"{s['bandwidth_gb_s']:.1f} GB/s より" + ("遅い" if s["read_gb_s"] < s["bandwidth_gb_s"] else "速い") + "です")
    else:
        read = "線形層を除いたステップが実測より長く、読む速さは出せません"
    return f"{head}。\n  読む速さ：{read}。\n  混み具合：{_load_ja(s)}"


__all__ = ["AGREE", "SLOWER", "cpu_ticks", "disagreement_ja", "disagrees", "linears_back_to_back_ms", "load1", "measure", "prefill_kernel_reading", "sentence_ja", "split", "steal_share", "without_linear_layers"]
