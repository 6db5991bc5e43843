"""This machine's measured peaks (chapter 2's roofline), shared by the labs that need them (2 and 10).

    m = machine_peaks(threads=2)        # GFLOP/s (fp32, bf16) and GB/s, measured with 2 PyTorch threads
    format_machine_ja(m)                # one Japanese line for a readout
    saved_on_ja()                       # where a timing notebook's saved figures were measured
"""
from __future__ import annotations

import platform

import torch

from course.runtime import apply_thread_policy, check_device, is_quick
from minimal_engine.bench import roofline


def machine_peaks(threads: int | None = None, device: str = "cpu", quick: bool | None = None) -> dict:
    """``roofline.measure_machine`` with ``threads`` PyTorch threads (the course's policy when None)."""
    threads = apply_thread_policy(threads)
    m = roofline.measure_machine(check_device(device), quick=is_quick() if quick is None else quick)
    return {**m, "threads": threads, "device": device}


def format_machine_ja(m: dict) -> str:
    return (f"行列積 fp32 {m['flops_fp32'] / 1e9:.0f} GFLOP/s・bf16 {m['flops_bf16'] / 1e9:.0f} GFLOP/s、"
            f"帯域 {m['bandwidth'] / 1e9:.1f} GB/s（{m.get('threads', '-')} スレッド）")


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "不明な CPU"


def saved_on_ja(threads: int | None = None) -> str:
    """One Japanese line naming the machine a timing cell ran on: CPU model, the vector instructions
    PyTorch uses (``torch.backends.cpu.get_cpu_capability()``), threads and torch version. A learner
    whose numbers differ from the saved ones sees why."""
    threads = torch.get_num_threads() if threads is None else threads
    return (f"計測したマシン: {cpu_model()}、PyTorch が使う CPU 命令 {torch.backends.cpu.get_cpu_capability()}、"
            f"{threads} スレッド、torch {torch.__version__}")


__all__ = ["cpu_model", "format_machine_ja", "machine_peaks", "saved_on_ja"]
