"""This machine's measured peaks (chapter 2's roofline), shared by the labs that need them (2 and 10).

    m = machine_peaks(threads=2)        # GFLOP/s (fp32, bf16) and GB/s, measured with 2 PyTorch threads
    format_machine_ja(m)                # one Japanese line for a readout
"""
from __future__ import annotations

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


__all__ = ["format_machine_ja", "machine_peaks"]
