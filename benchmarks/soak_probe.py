"""The server with a memory probe, for ``benchmarks/soak.py --probe``: what grows, if RSS grows?

    python benchmarks/soak_probe.py OUT [serve options ...]

Runs ``python -m minimal_engine.serve`` in this process with ``tracemalloc`` on. On each SIGUSR1
it writes ``OUT-N.snap`` (the tracemalloc snapshot) and ``OUT-N.json`` (live Python objects by type,
glibc's malloc counters: bytes in use, free but kept, mmapped). ``compare`` diffs two probes.
tracemalloc sees Python's allocations only; growth in the malloc counters with none there is native
(torch, tokenizers, llguidance). A probe itself raises RSS (the snapshot: ~150 MiB the first time,
kept by malloc), so soak.py samples the warm-up row after the first probe and the last row before
the second.
"""
from __future__ import annotations

import collections
import ctypes
import gc
import json
import signal
import sys
import tracemalloc


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]


def malloc_counters() -> dict[str, float]:
    """glibc's mallinfo2 in MiB: in use, free but kept by malloc, in mmapped blocks."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    mib = 1 / 2**20
    return {"in_use_mib": m.uordblks * mib, "free_kept_mib": m.fordblks * mib,
            "mmapped_mib": m.hblkhd * mib, "arena_mib": m.arena * mib}


def probe(out: str, n: int) -> None:
    tracemalloc.take_snapshot().dump(f"{out}-{n}.snap")
    types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    with open(f"{out}-{n}.json", "w") as f:
        json.dump({"traced_mib": tracemalloc.get_traced_memory()[0] / 2**20,
                   "objects": sum(types.values()), "types": dict(types.most_common(200)),
                   "malloc": malloc_counters()}, f)


def compare(out: str, a: int = 0, b: int = 1, top: int = 12) -> dict:
    """What grew between probe a and probe b: allocation sites, object types, malloc counters."""
    snaps = [tracemalloc.Snapshot.load(f"{out}-{i}.snap") for i in (a, b)]
    sites = snaps[1].compare_to(snaps[0], "lineno")[:top]
    ja, jb = (json.load(open(f"{out}-{i}.json")) for i in (a, b))
    types = {k: jb["types"].get(k, 0) - ja["types"].get(k, 0) for k in jb["types"]}
    return {"traced_growth_mib": round(jb["traced_mib"] - ja["traced_mib"], 2),
            "objects_growth": jb["objects"] - ja["objects"],
            "malloc_growth_mib": {k: round(jb["malloc"][k] - ja["malloc"].get(k, 0), 2)
                                  for k in jb["malloc"]},
            "top_sites": [{"where": str(s.traceback), "growth_kib": round(s.size_diff / 1024, 1),
                           "count_growth": s.count_diff} for s in sites],
            "top_types": dict(sorted(types.items(), key=lambda kv: -abs(kv[1]))[:top])}


def main() -> int:
    out, args = sys.argv[1], sys.argv[2:]
    tracemalloc.start()
    count = [0]

    def on_signal(signum, frame):
        probe(out, count[0])
        count[0] += 1

    signal.signal(signal.SIGUSR1, on_signal)
    from minimal_engine.serve.cli import main as serve
    return serve(args)


if __name__ == "__main__":
    raise SystemExit(main())
