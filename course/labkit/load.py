"""Is the machine busy with something else? Checked before a measurement, and after a sweep.

Before: ``sample_cpu_load()`` reads ``/proc/stat`` (all CPUs' busy time) and this process's own CPU time
over ~0.3 s; what the machine spent beyond this process is other programs (another notebook's kernel, a
browser, a build). ``load_warning(...)`` decides from those numbers (tests inject them). Where ``/proc``
is missing (macOS), the 1-minute load average stands in.

After: ``sweep_warnings(rows)`` flags a sweep that contradicts itself: output tok/s falling as the
concurrency grows by more than the spread of the repeats (and more than ``DROP_TOLERANCE``).
"""
from __future__ import annotations

import os
import time

SAMPLE_S = 0.3          # how long the load is sampled before a measurement
BUSY_MIN_CORES = 0.5    # other programs using less than half a core are ignored
CROWDED = 0.9           # warn when others' cores + our threads exceed 90 % of the cores
DROP_TOLERANCE = 0.10   # a sweep point may fall 10 % below the previous one (plateau noise)


def usable_cpus() -> int:
    """CPUs this process may use: its affinity set, capped by a cgroup v2 quota (containers) when set."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def _proc_stat_busy_total() -> tuple[float, float, int] | None:
    """(busy, total) jiffies summed over the CPUs this process may run on, and their count; None without
    /proc/stat."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        with open("/proc/stat") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu") and ln[3:4].isdigit()]
    except OSError:
        return None
    busy = total = 0.0
    count = 0
    for fields in lines:
        if cpus is not None and int(fields[0][3:]) not in cpus:
            continue
        values = [float(v) for v in fields[1:9]]
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)    # idle + iowait
        busy, total, count = busy + sum(values) - idle, total + sum(values), count + 1
    return (busy, total, count) if count else None


def sample_cpu_load(interval_s: float = SAMPLE_S) -> dict:
    """Cores kept busy by other processes during ``interval_s`` (this process's own CPU time excluded),
    counted over the CPUs this process may run on.

    Returns ``{"other_busy_cores", "cpu_count", "source"}``; source is "/proc/stat" or "loadavg"."""
    ncpu = usable_cpus()
    first = _proc_stat_busy_total()
    if first is None:
        try:
            load1 = os.getloadavg()[0]
        except (AttributeError, OSError):
            return {"other_busy_cores": 0.0, "cpu_count": ncpu, "source": "none"}
        return {"other_busy_cores": max(0.0, load1), "cpu_count": ncpu, "source": "loadavg"}
    own0 = time.process_time()
    time.sleep(interval_s)
    own1 = time.process_time()
    second = _proc_stat_busy_total()
    busy, total = second[0] - first[0], second[1] - first[1]
    if total <= 0:
        return {"other_busy_cores": 0.0, "cpu_count": ncpu, "source": "/proc/stat"}
    busy_cores = first[2] * busy / total                    # jiffies -> cores, whatever the clock tick
    own_cores = (own1 - own0) / interval_s
    return {"other_busy_cores": min(float(ncpu), max(0.0, busy_cores - own_cores)), "cpu_count": ncpu,
            "source": "/proc/stat"}


def load_warning(other_busy_cores: float, cpu_count: int, threads: int) -> str | None:
    """A Japanese warning when other programs leave too few cores for a measurement with ``threads``
    threads, else None."""
    if other_busy_cores < BUSY_MIN_CORES or other_busy_cores + threads <= CROWDED * cpu_count:
        return None
    return (f"⚠ ほかのプログラムが CPU を使っています（約 {other_busy_cores:.1f} コア / 全 {cpu_count} コア、"
            f"この計測は {threads} スレッド）。ほかのノートブックのカーネルや重いアプリを止めてから測り直すと、"
            f"値が安定します。")


def check_load(threads: int, interval_s: float = SAMPLE_S) -> dict:
    """Sample the load now; returns the sample plus ``threads`` and ``warning`` (a string or None)."""
    s = sample_cpu_load(interval_s)
    return {**s, "threads": threads, "warning": load_warning(s["other_busy_cores"], s["cpu_count"], threads)}


def sweep_warnings(rows: list[dict], key: str = "tok_s", tolerance: float = DROP_TOLERANCE) -> list[str]:
    """Warnings (Japanese) for consecutive sweep points whose ``key`` (median) falls by more than the
    repeats' spread (``key_min`` .. ``key_max``, when present) and more than ``tolerance`` of the lower point.
    ``rows`` are sorted by concurrency."""
    out = []
    rows = sorted(rows, key=lambda r: r["concurrency"])
    for lo, hi in zip(rows, rows[1:]):
        a, b = lo[key], hi[key]
        spread = max(lo.get(f"{key}_max", a) - lo.get(f"{key}_min", a), hi.get(f"{key}_max", b) - hi.get(f"{key}_min", b))
        drop = a - b
        if drop > spread and drop > tolerance * a:
            out.append(f"⚠ 同時リクエスト数 {lo['concurrency']} → {hi['concurrency']} で出力 tok/s が {a:.0f} → {b:.0f} に"
                       f"下がりました（繰り返しのばらつき {spread:.0f} より大きい）。ほかの負荷で計測が乱れた"
                       f"可能性があります。繰り返しを増やすか、ほかのカーネルを止めて測り直してください。")
    return out


__all__ = ["BUSY_MIN_CORES", "CROWDED", "DROP_TOLERANCE", "SAMPLE_S", "check_load", "load_warning",
           "sample_cpu_load", "sweep_warnings", "usable_cpus"]
