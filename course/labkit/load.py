"""Is the machine busy with something else? Checked before a measurement, during it, and after a sweep.

Before: ``sample_cpu_load()`` reads ``/proc/stat`` (all CPUs' busy time) and this process's own CPU time
over ~0.3 s; what the machine spent beyond this process is other programs (another notebook's kernel, a
browser, a build). ``load_warning(...)`` decides from those numbers (tests inject them). Where ``/proc``
is missing (macOS), the 1-minute load average stands in.

During: ``LoadWatch(threads)`` takes the check before and a snapshot; ``finish()`` reads the whole run's
interval: the cores other programs used on average (this process and its worker processes excluded) and the
cores the hypervisor took away (``steal``). A run they crowded is ``disturbed``: its predictions print
判定できません instead of a verdict (``course.labkit.predictions.verdicts``), since 0.3 s before a run cannot
see a job that starts in the middle of it.

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


def _proc_stat_times() -> tuple[float, float, float, int] | None:
    """(busy without steal, steal, total) jiffies over the CPUs this process may run on, and their count."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        with open("/proc/stat") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu") and ln[3:4].isdigit()]
    except OSError:
        return None
    busy = steal = total = 0.0
    count = 0
    for fields in lines:
        if cpus is not None and int(fields[0][3:]) not in cpus:
            continue
        v = [float(x) for x in fields[1:9]] + [0.0] * 8
        stolen = v[7]                                       # user nice system idle iowait irq softirq steal
        busy, steal, total, count = busy + sum(v[:8]) - v[3] - v[4] - stolen, steal + stolen, total + sum(v[:8]), count + 1
    return (busy, steal, total, count) if count else None


def sample_cpu_load(interval_s: float = SAMPLE_S) -> dict:
    """Cores kept busy by other processes during ``interval_s`` (this process's own CPU time excluded),
    counted over the CPUs this process may run on.

    Returns ``{"other_busy_cores", "cpu_count", "source"}``; source is "/proc/stat" or "loadavg"."""
    ncpu = usable_cpus()
    first = _proc_stat_times()
    if first is None:
        try:
            load1 = os.getloadavg()[0]
        except (AttributeError, OSError):
            return {"other_busy_cores": 0.0, "cpu_count": ncpu, "source": "none"}
        return {"other_busy_cores": max(0.0, load1), "cpu_count": ncpu, "source": "loadavg"}
    own0 = time.process_time()
    time.sleep(interval_s)
    own1 = time.process_time()
    second = _proc_stat_times()
    busy, total = second[0] + second[1] - first[0] - first[1], second[2] - first[2]   # steal counts as busy
    if total <= 0:
        return {"other_busy_cores": 0.0, "cpu_count": ncpu, "source": "/proc/stat"}
    busy_cores = first[3] * busy / total                    # jiffies -> cores, whatever the clock tick
    own_cores = (own1 - own0) / interval_s
    return {"other_busy_cores": min(float(ncpu), max(0.0, busy_cores - own_cores)), "cpu_count": ncpu,
            "source": "/proc/stat"}


def _tree_cpu_s() -> float:
    """CPU seconds of this process, its finished children and its live descendants (a lab's worker processes)."""
    t = os.times()
    own = time.process_time() + t.children_user + t.children_system
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parents, cpu = {}, {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(pid)] = int(fields[1])
            cpu[int(pid)] = sum(float(x) for x in fields[11:15]) / tick   # utime stime + its waited children's
    except (OSError, ValueError, AttributeError):
        return own
    me, mine = os.getpid(), set()
    for pid in parents:                                       # descendants: walk each pid up to us
        p, chain = pid, []
        while p in parents and p not in mine and p != me and p > 1:
            chain.append(p)
            p = parents[p]
        if p == me or p in mine:
            mine.update(chain)
    return own + sum(cpu[p] for p in mine)


def disturbed(other_cores: float, steal_cores: float, cpu_count: int, threads: int) -> bool:
    """True when other programs and the hypervisor took enough of the run's cores to move its timings
    (the before-check's rule, applied to the run's average)."""
    taken = other_cores + steal_cores
    return taken >= BUSY_MIN_CORES and taken + threads > CROWDED * cpu_count


DURING_MARK = "⚠ 計測のあいだ、ほかのプログラムが"     # how a disturbed run's warning begins (course.tooling.notebooks)


def was_disturbed(*loads: dict | None) -> bool:
    """True when any of ``loads`` (``LoadWatch.finish()`` dicts, or None for an unwatched run) says ``disturbed``."""
    return any(bool(load and load.get("disturbed")) for load in loads)


def during_warning(other_cores: float, steal_cores: float, cpu_count: int, threads: int) -> str:
    steal = f"（うちハイパーバイザーの steal 約 {steal_cores:.1f} コア）" if steal_cores >= 0.05 else ""
    return (f"{DURING_MARK}平均 約 {other_cores + steal_cores:.1f} コアを使っていました{steal}"
            f"（全 {cpu_count} コア、この計測は {threads} スレッド）。この実行の予想は「判定できません」としています。"
            f"ほかのプログラムを止めて測り直してください。")


class LoadWatch:
    """The load check before a run and the load over the whole run: ``watch = LoadWatch(threads)``, measure,
    ``load = watch.finish()``. ``finish`` returns ``check_load``'s dict plus ``during`` (``other_cores``,
    ``steal_cores``, ``seconds``; None without /proc/stat) and ``disturbed``; ``warning`` joins both checks'
    warnings (None when neither warns)."""

    def __init__(self, threads: int, interval_s: float = SAMPLE_S):
        self.threads = threads
        self.before = check_load(threads, interval_s)
        self.start = (time.perf_counter(), _proc_stat_times(), _tree_cpu_s())

    def finish(self) -> dict:
        wall0, stat0, own0 = self.start
        stat1, own1, wall = _proc_stat_times(), _tree_cpu_s(), time.perf_counter() - wall0
        out = {**self.before, "during": None, "disturbed": False}
        if stat0 is None or stat1 is None or wall <= 0 or stat1[2] <= stat0[2]:
            return out
        cores = stat1[3] / (stat1[2] - stat0[2])            # jiffies -> cores, whatever the clock tick
        other = max(0.0, (stat1[0] - stat0[0]) * cores - (own1 - own0) / wall)
        steal = (stat1[1] - stat0[1]) * cores
        n = self.before["cpu_count"]
        out["during"] = {"other_cores": round(min(float(n), other), 2), "steal_cores": round(steal, 2),
                         "seconds": round(wall, 1)}
        out["disturbed"] = disturbed(other, steal, n, self.threads)
        if out["disturbed"]:
            text = during_warning(other, steal, n, self.threads)
            out["warning"] = f"{out['warning']}\n{text}" if out["warning"] else text
        return out


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


__all__ = ["BUSY_MIN_CORES", "CROWDED", "DROP_TOLERANCE", "SAMPLE_S", "DURING_MARK", "LoadWatch", "check_load", "disturbed",
           "during_warning", "load_warning", "was_disturbed", "sample_cpu_load", "sweep_warnings", "usable_cpus"]
