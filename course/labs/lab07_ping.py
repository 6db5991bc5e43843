"""Lab 7: the bare all-reduce on this machine, with no model and no computation between the calls.

    floor = bare_allreduce_us((1_280, 327_680), calls=300, threads=1)
    floor[1_280]["median_us"], floor[1_280]["p90_us"], floor[1_280]["rank0_median_us"]
    floor_load(floor)           # the LoadWatch dict of the ping (``disturbed``, ``during``: steal)

Two processes (this one as rank 0 and one spawned peer) join the same kind of gloo process group as
the engine's TP (``minimal_engine/features/tensor_parallel/comm.make_process_group``) and call
all-reduce back to back on a float32 tensor of each size. Both ranks record each call's entry and exit on
``time.perf_counter`` (one clock for every process), as the engine's ``trace_calls`` does, and the ping is
read by the same statistic as the engine's exchange (``course.labkit.tp_calls.call_stats``): the time inside
of the rank that arrived last (``median_us``, ``p90_us``), which leaves out the wait for a peer that is still
in its previous call (blind reading 2026-12-07d ch07 #1: rank 0's whole time, the former statistic, includes
that wait, so it was no floor for the engine's exchange). ``rank0_median_us`` keeps rank 0's whole time.
What remains is gloo's own time per call on this machine, including handing the CPU between the two
processes. The ping is timed at another moment than the TP run; ``lab07_explain.comm_reading`` says so.
"""
from __future__ import annotations

import datetime
import statistics
import time

import torch

from course.labkit.load import LoadWatch
from course.labkit.tp_calls import call_stats, pair_calls

TIMEOUT_S = 60.0


def _sizes_to_numel(sizes) -> list[int]:
    return [max(1, int(n) // 4) for n in sizes]


def _calls(pg, numel: int, count: int) -> list[tuple[float, float]]:
    """``count`` back-to-back all-reduces; (entry, exit) of each on perf_counter."""
    t, out = torch.zeros(numel), []
    for _ in range(count):
        t0 = time.perf_counter()
        pg.allreduce([t]).wait()
        out.append((t0, time.perf_counter()))
    return out


def _peer(port: int, sizes: tuple, calls: int, threads: int, conn) -> None:
    """Rank 1: the same calls, in the same order, with nothing between them; sends its records back."""
    import torch.distributed as dist

    from minimal_engine.features.tensor_parallel.comm import make_process_group
    torch.set_num_threads(threads)
    store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    pg = make_process_group(store, 1, 2, torch.device("cpu"), TIMEOUT_S)
    conn.send([_calls(pg, numel, calls) for numel in _sizes_to_numel(sizes)])
    conn.close()


def _p90(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[int(0.9 * (len(xs) - 1))]


def bare_allreduce_us(sizes=(1_280,), calls: int = 300, threads: int = 1, warmup: int = 20) -> dict:
    """Per size in bytes (2 processes, µs): the last-arrived rank's time inside (median, p90), rank 0's whole
    time (median), and ``load``: the LoadWatch dict of the whole ping (both processes are this run's own)."""
    import multiprocessing as mp

    import torch.distributed as dist

    from minimal_engine.features.tensor_parallel.comm import make_process_group
    sizes = tuple(int(n) for n in sizes)
    watch = LoadWatch(2 * threads)
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=TIMEOUT_S),
                          wait_for_workers=False)
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe(duplex=False)
    peer = ctx.Process(target=_peer, daemon=True, name="lab7-ping",
                       args=(store.port, sizes, warmup + calls, threads, theirs))
    peer.start()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        pg = make_process_group(store, 0, 2, torch.device("cpu"), TIMEOUT_S)
        rank0 = [_calls(pg, numel, warmup + calls) for numel in _sizes_to_numel(sizes)]
        if not mine.poll(TIMEOUT_S):
            raise RuntimeError("lab7-ping: the peer process sent no records")
        rank1 = mine.recv()
    finally:
        torch.set_num_threads(old)
        peer.join(TIMEOUT_S)
        if peer.is_alive():
            peer.terminate()
    load = watch.finish()
    out = {}
    for size, r0, r1 in zip(sizes, rank0, rank1):
        paired = pair_calls([r0[warmup:], r1[warmup:]])
        last = [max(range(2), key=lambda r: c[r][0]) for c in paired]
        inside = [(c[r][1] - c[r][0]) * 1e6 for c, r in zip(paired, last)]
        out[size] = {"median_us": statistics.median(inside), "p90_us": _p90(inside),
                     "rank0_median_us": call_stats(paired)["inside_median_us"][0],
                     "calls": calls, "threads": threads, "load": load}
    return out


def floor_load(floor: dict | None) -> dict | None:
    """The ping's LoadWatch dict (the same for every size), or None."""
    return next(iter(floor.values())).get("load") if floor else None


__all__ = ["bare_allreduce_us", "floor_load"]
